"""Boundary fuzz (issue 14), invalid arguments: a wrong rank, dtype or device of every tensor
argument and seeds/offsets out of range are a clear ValueError / TypeError naming the argument;
out= buffers of the wrong dtype or shape are rejected, a right one is returned."""

from __future__ import annotations

import pytest
import torch
from fuzz_cases import BUILDERS, _gen, _probs
from fuzz_harness import _available, _clone_all, _device, _on_device, _param

import specops

_ANY_RANK = {("sample", "probs"), ("sample_3d", "probs"), ("sample_uniforms", "probs"),
             ("sample_wor", "probs"), ("sample_wor_uniforms", "probs"),
             ("probs_from_logits", "logits")}  # fmt: skip
_RANK_FLEX = {"seed", "offset", "step", "age_step", "step_embedding"}  # [] or [B] etc.


def _invalid_params():
    out = []
    for name, build in BUILDERS.items():
        case = build(_gen(name))
        be = case.backends[0]
        for arg in case.inputs:
            if (name, arg) not in _ANY_RANK and arg not in _RANK_FLEX:
                out.append(_param(f"{name}-{arg}-rank-{be}", name, arg, "rank", be))
            if (name, arg) != ("gather_rows", "src"):  # gather_rows copies rows of any dtype
                out.append(_param(f"{name}-{arg}-dtype-{be}", name, arg, "dtype", be))
            out.append(_param(f"{name}-{arg}-device-{be}", name, arg, "device", be))
    for name in ("sample", "sample_wor", "verify_chain", "verify_tree", "verify_jacobi"):
        be = BUILDERS[name](_gen(name)).backends[0]
        for what in ("seed=2**64", "offset=2**64", "seed=-2**63-1", "seed=1.5"):
            out.append(_param(f"{name}-{what}-{be}", name, what, "rng", be))
    return out


def _bad(t: torch.Tensor, how: str) -> torch.Tensor:
    if how == "rank":
        return t.unsqueeze(0)
    if how == "dtype":
        return t.to(torch.int32) if t.dtype.is_floating_point else t.to(torch.float32)
    if how == "device":
        return t.to("meta")
    raise AssertionError(how)


@pytest.mark.parametrize("name,arg,how,backend", _invalid_params())
def test_invalid_arguments(name, arg, how, backend):
    if not _available(backend):
        pytest.skip(f"backend {backend} not available")
    case = BUILDERS[name](_gen(name))
    t = _clone_all(case.inputs)
    if how == "rng":
        key, val = arg.split("=")
        t.pop("uniforms", None)
        t[key] = {"2**64": 2**64, "-2**63-1": -(2**63) - 1, "1.5": 1.5}[val]
        expect = key
    else:
        t[arg] = _bad(t[arg], how)
        expect = case.names.get(arg, arg)
    t, _ = _on_device(backend, {k: v for k, v in t.items()}, {})
    with pytest.raises((ValueError, TypeError)) as info:
        case.call(backend, t)
    if how == "device":  # the check may name the argument it compared against: name the device
        expect = "meta"
    assert expect in str(info.value), f"the error does not name {expect!r}: {info.value}"


# out= buffers: wrong dtype / shape are rejected, the buffer is returned -------------------
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_sample_out_is_returned(backend):
    if not _available(backend):
        pytest.skip(f"backend {backend} not available")
    g = _gen("out")
    dev = _device(backend)
    p = _probs(g, 4, 9).to(dev)
    out = torch.empty(4, dtype=torch.int32, device=dev)
    assert specops.sample(p, seed=1, out=out, backend=backend) is out
    for bad in (torch.empty(4, dtype=torch.int64, device=dev),
                torch.empty(5, dtype=torch.int32, device=dev)):  # fmt: skip
        with pytest.raises((ValueError, TypeError), match="out"):
            specops.sample(p, seed=1, out=bad, backend=backend)
