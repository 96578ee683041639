"""Reference kv ops (see DESIGN.md, Public API)."""

__all__: list[str] = []
