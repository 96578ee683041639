"""Public features ops: validation, backend choice, registration."""

__all__: list[str] = []
