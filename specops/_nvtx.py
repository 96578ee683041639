"""NVTX ranges in a `specops` domain, for Nsight Systems (the names: docs/profiling.md).

Off unless SPECOPS_NVTX=1 when specops is imported; then every public op (``traced``) and each
phase of a decoding step (``nvtx_range``) is wrapped in a range, never while torch.compile traces.
With the `nvtx` Python package the ranges go to the "specops" domain; otherwise through
torch.cuda.nvtx, named "specops:<name>" (nowhere on a torch without CUDA).  Disabled, ``traced``
returns the function itself and ``nvtx_range`` a shared null context (about 0.12 us a phase,
the ``with``: docs/profiling.md).
``recording()`` collects the ranges instead of emitting them (tests: the CPU has no Nsight)."""

from __future__ import annotations

import contextlib
import functools
import os

import torch

ENABLED = os.environ.get("SPECOPS_NVTX", "0") == "1"
_NULL = contextlib.nullcontext()

try:  # pragma: no cover - depends on the machine
    import nvtx as _nvtx_pkg
except ImportError:
    _nvtx_pkg = None


def _no_range(name: str = "") -> None:
    pass


# The hooks every range calls: _push(name) on entry, _pop() on exit (``recording`` swaps them).
if _nvtx_pkg is not None:  # pragma: no cover - depends on the machine
    _push = functools.partial(_nvtx_pkg.push_range, domain="specops")
    _pop = functools.partial(_nvtx_pkg.pop_range, domain="specops")
elif hasattr(torch._C, "_nvtx"):  # pragma: no cover - a CUDA build of torch
    _push = lambda name: torch.cuda.nvtx.range_push("specops:" + name)  # noqa: E731
    _pop = torch.cuda.nvtx.range_pop
else:
    _push = _pop = _no_range


class _Range:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        _push(self.name)

    def __exit__(self, *exc):
        _pop()
        return False


def nvtx_range(name: str):
    """Context manager: an NVTX range when enabled (and not compiling), else a null context.
    Emits no work on the device and reads nothing from it (no sync)."""
    if not ENABLED or torch.compiler.is_compiling():
        return _NULL
    return _Range(name)


def traced(name: str):
    """Decorator for public ops: wraps calls in an NVTX range when SPECOPS_NVTX=1."""

    def wrap(fn):
        if not ENABLED:
            return fn

        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if torch.compiler.is_compiling():
                return fn(*args, **kwargs)
            _push(name)
            try:
                return fn(*args, **kwargs)
            finally:
                _pop()

        return inner

    return wrap


@contextlib.contextmanager
def recording():
    """Within the block, ranges are appended to the yielded list as ("push", name) and
    ("pop", None) instead of being emitted.  Records only what SPECOPS_NVTX=1 at import wraps."""
    global _push, _pop
    events: list[tuple[str, str | None]] = []
    saved = _push, _pop
    _push = lambda name: events.append(("push", name))  # noqa: E731
    _pop = lambda: events.append(("pop", None))  # noqa: E731
    try:
        yield events
    finally:
        _push, _pop = saved
