"""Threads of the C++ CPU twins (a blocking thread pool: csrc/host_parallel.cpp).

Every threaded kernel splits independent work items (requests, rows, continuation positions), so
its outputs are the same for any thread count.  The count is process-wide: ``SPECOPS_NUM_THREADS``
when set, else ``torch.get_num_threads()`` when specops is imported; ``set_num_threads`` changes
it (1 = serial)."""

from __future__ import annotations

import os

from specops._build import _C


def set_num_threads(n: int) -> None:
    """Threads the C++ CPU kernels use from now on (n >= 1)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: n must be an int >= 1, got {n!r}")
    if _C is not None:
        _C.set_host_threads(n)


def get_num_threads() -> int:
    """Threads the C++ CPU kernels use (1 without a compiled module)."""
    if _C is None:
        return 1
    return int(_C.host_threads())


def _init() -> None:
    env = os.environ.get("SPECOPS_NUM_THREADS", "")
    if env:
        n = int(env)
    else:
        import torch

        n = torch.get_num_threads()
    set_num_threads(max(1, n))


_init()
