"""Public tree_build ops: validation, backend choice, registration."""

__all__: list[str] = []
