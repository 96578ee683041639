"""NVTX ranges in a `specops` domain, for Nsight Systems.

Off unless SPECOPS_NVTX=1 when specops is imported; then every public op and each decode-loop
phase is wrapped in a range (never while torch.compile traces).  With the `nvtx` Python package
installed the ranges go to the "specops" domain; otherwise through torch.cuda.nvtx, named
"specops:<name>".  Disabled, `traced` returns the function itself: no cost per call."""

from __future__ import annotations

import contextlib
import functools
import os

ENABLED = os.environ.get("SPECOPS_NVTX", "0") == "1"

try:  # pragma: no cover - depends on the machine
    import nvtx as _nvtx_pkg
except ImportError:
    _nvtx_pkg = None


def _compiling() -> bool:
    import torch

    return torch.compiler.is_compiling()


@contextlib.contextmanager
def _range(name: str):
    import torch

    if _nvtx_pkg is not None:
        with _nvtx_pkg.annotate(name, domain="specops"):
            yield
    else:
        torch.cuda.nvtx.range_push("specops:" + name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()


def nvtx_range(name: str):
    """Context manager: an NVTX range when enabled (and not compiling), else nothing."""
    if not ENABLED or _compiling():
        return contextlib.nullcontext()
    return _range(name)


def traced(name: str):
    """Decorator for public ops: wraps calls in an NVTX range when SPECOPS_NVTX=1."""

    def wrap(fn):
        if not ENABLED:
            return fn

        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if _compiling():
                return fn(*args, **kwargs)
            with _range(name):
                return fn(*args, **kwargs)

        return inner

    return wrap
