"""Boundary fuzz (issue 14), layouts and dtypes: every public op with each tensor argument
sliced, narrowed, strided on dim 0, transposed or expanded (and all at once), int32/int64 ids and
float32/float16 inputs, against the reference (tests/fuzz_harness.py)."""

from __future__ import annotations

import pytest
import torch
from fuzz_cases import BUILDERS, _gen
from fuzz_harness import (
    LAYOUTS,
    _available,
    _clone_all,
    _move,
    _param,
    check_against_reference,
    lay,
    layout_ok,
)

# layouts ------------------------------------------------------------------------------------
# The Triton interpreter costs ~0.1 s a call: "narrow" and "outer" (padded rows, strided dim 0)
# run on the C++ twins only; the Triton kernels get sliced, transposed, expanded and mixed.
_TRITON_LAYOUTS = ("sliced", "transposed", "expanded")


def _layout_params():
    out = []
    for name, build in BUILDERS.items():
        case = build(_gen(name))
        for be in case.backends:
            for arg, t in case.inputs.items():
                for layout in LAYOUTS if be != "triton" else _TRITON_LAYOUTS:
                    if layout == "expanded" and arg in case.no_expand:
                        continue
                    if layout_ok(t, layout):
                        out.append(_param(f"{name}-{arg}-{layout}-{be}", name, arg, layout, be))
            out.append(_param(f"{name}-all-mixed-{be}", name, "*", "mixed", be))
    return out


_MIXED = ("sliced", "transposed", "narrow", "outer")


@pytest.mark.parametrize("name,arg,layout,backend", _layout_params())
def test_layouts(name, arg, layout, backend):
    if not _available(backend):
        pytest.skip(f"backend {backend} not available")
    case = BUILDERS[name](_gen(name))
    views, bases = {}, {}
    for i, (k, t) in enumerate(case.inputs.items()):
        if layout == "mixed":  # every argument non-contiguous at once, layouts rotating
            lo = next((x for x in _MIXED[i % 4 :] + _MIXED if layout_ok(t, x)), "contiguous")
        else:
            lo = layout if k == arg else "contiguous"
        views[k], bases[k] = lay(t, lo)
        if lo == "contiguous":
            bases[k] = None
    check_against_reference(case, backend, views, bases)


# dtypes: int32 / int64 ids, float32 / float16 inputs ------------------------------------
def _dtype_params():
    out = []
    for name in BUILDERS:
        for be in BUILDERS[name](_gen(name)).backends:
            for idt in ("int32", "int64"):
                for fdt in ("float32", "float16"):
                    if be == "triton" and (idt == "int32") == (fdt == "float32"):
                        continue  # the interpreter: two of the four combinations
                    out.append(_param(f"{name}-{idt}-{fdt}-{be}", name, idt, fdt, be))
    return out


@pytest.mark.parametrize("name,idt,fdt,backend", _dtype_params())
def test_dtypes(name, idt, fdt, backend):
    if not _available(backend):
        pytest.skip(f"backend {backend} not available")
    case = BUILDERS[name](_gen(name), idt=getattr(torch, idt), fdt=getattr(torch, fdt))
    if fdt == "float16":
        case.float_tol = max(case.float_tol, 2e-3)
    views = _clone_all(case.inputs)
    check_against_reference(case, backend, views, {})


def test_moving_keeps_each_layout():
    """What a GPU session runs backend "triton" on: every layout re-made over a copy on the
    device, with the same values, sizes, strides and offset (checked here with a CPU copy)."""
    t = torch.arange(24, dtype=torch.float32).view(4, 6)
    for layout in ("contiguous", *LAYOUTS):
        if not layout_ok(t, layout):
            continue
        v, b = lay(t, layout)
        (mv,), (mb,) = (d.values() for d in _move({"x": v}, {"x": b}, "cpu"))
        assert torch.equal(mv, v) and mv.stride() == v.stride(), layout
        if b is not None:
            assert mv.storage_offset() == v.storage_offset() - b.storage_offset(), layout
            assert mb.data_ptr() != b.data_ptr() and mv.untyped_storage().data_ptr() == (
                mb.untyped_storage().data_ptr()
            ), layout
