"""The CUDA kernels' global-memory traffic, counted through cuda_sim (issue 36, docs/gpu_cost.md).

``specops._traffic`` is the CPU-only build of ``specops._C`` with every memory access of the
emulated device code reported to csrc/sim/traffic/traffic.cpp.  Inside ``counting()``, every
``backend="cuda_sim"`` op call runs through that module, and each kernel launch gives one
``KernelTraffic`` (bench/traffic_common.py)::

    with counting() as launches:
        specops.verify_chain(p, x, q, seed=0, backend="cuda_sim")
    launches[0].bytes_read, launches[0].sectors_per_request
"""

from __future__ import annotations

import contextlib
import importlib

from specops import _build

from .traffic_common import KernelTraffic


def available() -> bool:
    """Whether this install has the counting module (GCC builds with cuda_sim)."""
    try:
        importlib.import_module("specops._traffic")
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def counting():
    """Count the cuda_sim launches of the block; yields the list the launches are appended to
    when the block ends.  Not re-entrant; the results of the ops are unchanged."""
    mod = importlib.import_module("specops._traffic")
    launches: list[KernelTraffic] = []
    saved = _build._C
    _build._C = mod  # ops resolve their bindings through _build._C at call time
    mod.traffic_begin()
    try:
        yield launches
    finally:
        records = mod.traffic_end()
        _build._C = saved
        launches.extend(_record(r) for r in records)


def _record(r: dict) -> KernelTraffic:
    return KernelTraffic(
        backend="cuda",
        kernel=r["kernel"],
        grid=tuple(r["grid"]),
        bytes_read=r["bytes_read"],
        bytes_written=r["bytes_written"],
        requests=r["requests"],
        sectors=r["sectors"],
        cta_bytes=list(r["cta_bytes"]),
        barriers=r["barriers"],
        cta_barriers=list(r["cta_barriers"]),
    )


def planted(kind: str, n: int, grid: int) -> KernelTraffic:
    """Counts one planted kernel of known traffic (csrc/sim/planted_traffic.cpp)."""
    import torch

    src = torch.arange(n, dtype=torch.float32)
    dst = torch.zeros(n)
    with counting() as launches:
        _build._C.cuda_sim_traffic_planted(kind, src, dst, grid)
    (only,) = launches
    return only
