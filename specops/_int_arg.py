"""The one check of an int argument: a Python int (a bool is not one) in [lo, hi], else a
TypeError / ValueError that names it.  Used by Tree's constructors, the decoding loop and the
feature cache."""

from __future__ import annotations

import numbers

__all__ = ["check_int"]


def check_int(fn: str, name: str, value, lo: int = 1, hi: int | None = None, why: str = "") -> int:
    """``value`` as an int in [lo, hi]; the error reads ``"<fn>: <name> must be an int ..."``
    (``why``: what sets ``hi``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]{why}"
        raise ValueError(f"{fn}: {name} must be an int {want}, got {value}")
    return value
