"""What the Python-to-Triton boundary tests (tests/test_triton_args_*.py) share: the
bounds-checking interpreter and the hostile layouts they pass.  Importing this module skips the
importing test module where the harness cannot run (no Triton; a GPU, where Triton compiles)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")
if torch.cuda.is_available():  # pragma: no cover - the harness patches the CPU interpreter
    pytest.skip("the bounds harness needs the Triton interpreter", allow_module_level=True)

from triton.runtime import interpreter as interp  # noqa: E402


# the bounds-checking interpreter -----------------------------------------------------------
def _extent(t: torch.Tensor):
    """[lo, hi) bytes spanned by a tensor's elements (None when empty)."""
    if t.numel() == 0:
        return None
    es = t.element_size()
    lo = hi = t.data_ptr()
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            hi += (size - 1) * stride * es
        else:
            lo += (size - 1) * stride * es
    return lo, hi + es


def _extents(a) -> list[tuple[int, int]]:
    """The extents of the tensors an argument holds (a tuple argument's, element by element)."""
    if isinstance(a, tuple):
        return [e for x in a for e in _extents(x)]
    t = a if isinstance(a, torch.Tensor) else getattr(a, "base", None)
    e = _extent(t) if isinstance(t, torch.Tensor) else None
    return [e] if e is not None else []


class Bounds:
    """Active lanes of loads/stores/atomics must fall inside a tensor argument of the running
    launch (or a tensor ``allow``ed by the test: the list form of commit_kv reads every layer's
    slab through offsets from the first).  A violating access is recorded and skipped."""

    def __init__(self):
        self.launch_ranges: list[tuple[int, int]] = []
        self.extra: list[tuple[int, int]] = []
        self.violations: list[str] = []
        self.accesses = 0

    def allow(self, *tensors):
        for t in tensors:
            e = _extent(t)
            if e is not None:
                self.extra.append(e)

    def check(self, what, ptrs, mask, elem_ty) -> np.ndarray:
        """The mask with violating lanes cleared (recorded)."""
        addr = np.asarray(ptrs.data).astype(np.uint64)
        active = np.ones(addr.shape, bool) if mask is None else np.asarray(mask.data).astype(bool)
        active = np.broadcast_to(active, addr.shape)
        size = np.dtype(interp._get_np_dtype(elem_ty)).itemsize
        ok = np.zeros(addr.shape, bool)
        for lo, hi in self.launch_ranges + self.extra:
            ok |= (addr >= lo) & (addr + size <= hi)
        bad = active & ~ok
        self.accesses += int(active.sum())
        if bad.any():
            self.violations.append(f"{what}: {int(bad.sum())} lane(s) outside every argument")
        return active & ok


def check_bounds(monkeypatch):
    """The ``bounds`` fixture of each test module: the interpreter with every active lane of every
    load, store and atomic checked against the extents of the launch's tensor arguments (yields
    the Bounds); a recorded violation fails the test at teardown."""
    b = Bounds()
    init = interp.GridExecutor._init_args_hst

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        b.launch_ranges = [e for a in (*args_hst, *kwargs_hst.values()) for e in _extents(a)]
        return args_hst, kwargs_hst

    builder = interp.InterpreterBuilder
    load, store, rmw, cas = (
        builder.create_masked_load,
        builder.create_masked_store,
        builder.create_atomic_rmw,
        builder.create_atomic_cas,
    )

    def masked_load(self, ptrs, mask, other, *rest):
        keep = b.check("load", ptrs, mask, ptrs.get_element_ty())
        return load(self, ptrs, interp.TensorHandle(keep, mask.dtype), other, *rest)

    def masked_store(self, ptrs, value, mask, *rest):
        keep = b.check("store", ptrs, mask, ptrs.get_element_ty())
        return store(self, ptrs, value, interp.TensorHandle(keep, mask.dtype), *rest)

    def atomic_rmw(self, op, ptr, val, mask, *rest):
        keep = b.check("atomic", ptr, mask, ptr.get_element_ty())
        return rmw(self, op, ptr, val, interp.TensorHandle(keep, mask.dtype), *rest)

    def atomic_cas(self, ptr, cmp, val, *rest):
        b.check("atomic_cas", ptr, None, ptr.get_element_ty())
        return cas(self, ptr, cmp, val, *rest)

    monkeypatch.setattr(interp.GridExecutor, "_init_args_hst", init_args)
    monkeypatch.setattr(builder, "create_masked_load", masked_load)
    monkeypatch.setattr(builder, "create_masked_store", masked_store)
    monkeypatch.setattr(builder, "create_atomic_rmw", atomic_rmw)
    monkeypatch.setattr(builder, "create_atomic_cas", atomic_cas)
    yield b
    assert not b.violations, b.violations[:5]


# hostile layouts ---------------------------------------------------------------------------
def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view (every other element of a bigger buffer, filled
    with garbage in between)."""
    if t.dim() == 0:
        big = torch.full((3,), -777, dtype=t.dtype)
        big[1] = t
        return big[1]
    big = torch.full((*t.shape[:-1], 2 * t.shape[-1] + 1), -7, dtype=t.dtype)
    if t.is_floating_point():
        big.fill_(float("nan"))
    view = big[..., 1::2]
    view.copy_(t)
    return view


def _expanded(value: torch.Tensor, n: int) -> torch.Tensor:
    """n copies of a scalar as a stride-0 view."""
    return value.reshape(1).expand(n)
