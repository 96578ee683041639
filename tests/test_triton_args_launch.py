"""The Python-to-Triton boundary (DESIGN.md, Rules: Layout; issue #14), launches: every launcher
launches through ``specops.triton_kernels._args.launch`` (no bare ``kernel[grid](...)``), which
refuses a non-contiguous tensor passed without its strides; and the bounds harness
(tests/triton_bounds.py) catches an out-of-bounds read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from specops.triton_kernels import _args
from triton_bounds import check_bounds

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bounds(monkeypatch):
    yield from check_bounds(monkeypatch)


def test_bounds_harness_catches_an_out_of_bounds_read(bounds):
    """The harness itself: a kernel reading one element past its argument is caught."""
    import triton
    import triton.language as tl

    @triton.jit
    def _past_the_end(x, out, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out + i, tl.load(x + i + 1))

    x = torch.arange(4, dtype=torch.float32)
    out = torch.zeros(4)
    _past_the_end[(1,)](x, out, N=4)
    assert bounds.violations == ["load: 1 lane(s) outside every argument"]
    assert bounds.accesses == 8 and torch.equal(out, torch.tensor([1.0, 2.0, 3.0, 0.0]))
    bounds.violations.clear()


# every launch through _args.launch ----------------------------------------------------------
def test_every_launcher_goes_through_args_launch():
    offenders = []
    for path in sorted((ROOT / "triton_kernels").glob("*.py")):
        if path.name == "_args.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            # kernel[grid](...): a call of a subscript
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                offenders.append(f"{path.name}:{node.lineno}: {ast.unparse(node.func)}")
    assert not offenders, "launch Triton kernels through _args.launch:\n" + "\n".join(offenders)


def test_launch_refuses_a_non_contiguous_bare_tensor():
    import triton
    import triton.language as tl

    @triton.jit
    def _copy(x, out, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out + i, tl.load(x + i))

    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(4)
    with pytest.raises(ValueError, match="'x' of _copy is a non-contiguous tensor"):
        _args.launch(_copy, (1,), x[::2], out, N=4)
    _args.launch(_copy, (1,), _args.Strided(x[::2]), out, N=4)  # the launcher takes the blame
    _args.launch(_copy, (1,), x[::2].contiguous(), out, N=4)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_launch_reads_tuple_arguments_element_by_element():
    """A tuple argument (the sampling kernels' ``rng``): Strided elements unwrapped, a bare
    non-contiguous element refused by its place in the tuple."""
    import triton
    import triton.language as tl

    @triton.jit
    def _gather(src, out, N: tl.constexpr):
        ptr, stride = src
        i = tl.arange(0, N)
        tl.store(out + i, tl.load(ptr + i * stride))

    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(4)
    with pytest.raises(ValueError, match=r"'src'\[0\] of _gather is a non-contiguous tensor"):
        _args.launch(_gather, (1,), (x[::2], 1), out, N=4)
    _args.launch(_gather, (1,), (_args.Strided(x[1::2]), 2), out, N=4)
    assert out.tolist() == [1.0, 3.0, 5.0, 7.0]
