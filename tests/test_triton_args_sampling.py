"""The Python-to-Triton boundary (issue #14), sampling ops: sliced, transposed and expanded views of
the seeds, offsets, uniforms, counts and parameters that sample, verify_chain and
probs_from_logits read give the results of their contiguous copies; out buffers that cannot be
written are a ValueError; no access outside the tensor arguments (tests/triton_bounds.py)."""

from __future__ import annotations

import pytest
import torch
from triton_bounds import _expanded, _strided, check_bounds

import specops
from specops import reference


@pytest.fixture
def bounds(monkeypatch):
    yield from check_bounds(monkeypatch)


def test_sample_strided_seed_offset_uniforms_out(bounds):
    g = torch.Generator().manual_seed(0)
    b, v = 5, 37
    probs = torch.rand(b, v, generator=g)
    seeds = torch.randint(0, 2**40, (b,), generator=g)
    off = torch.tensor([3], dtype=torch.int64)
    want = specops.sample(probs, seed=seeds, offset=off, backend="reference")
    for seed in (_strided(seeds), torch.stack([seeds, seeds], 1)[:, 1]):
        for offset in (_strided(off), torch.tensor([9, 3])[1:]):
            got = specops.sample(probs, seed=seed, offset=offset, backend="triton")
            assert torch.equal(got, want)
    # expanded seed: one seed for every request, read as such
    one = torch.tensor(1234, dtype=torch.int64)
    want = specops.sample(probs, seed=one.reshape(1).repeat(b), offset=5, backend="reference")
    got = specops.sample(probs, seed=_expanded(one, b), offset=5, backend="triton")
    assert torch.equal(got, want)
    # uniforms: sliced and expanded
    u = torch.rand(b, generator=g)
    want = specops.sample(probs, uniforms=u, backend="reference")
    assert torch.equal(specops.sample(probs, uniforms=_strided(u), backend="triton"), want)
    u0 = torch.tensor(0.3)
    want = specops.sample(probs, uniforms=u0.repeat(b), backend="reference")
    assert torch.equal(specops.sample(probs, uniforms=_expanded(u0, b), backend="triton"), want)
    # out: a strided view is written in place; an expanded one is refused
    out = _strided(torch.zeros(b, dtype=torch.int32))
    specops.sample(probs, uniforms=u, backend="triton", out=out)
    assert torch.equal(out, specops.sample(probs, uniforms=u, backend="reference"))
    with pytest.raises(ValueError, match="out has overlapping elements"):
        specops.sample(probs, backend="triton", out=torch.zeros(1, dtype=torch.int32).expand(b))


def test_sample_triton_launcher_strided_out(bounds):
    """The launcher on its own (no public-layer normalisation) writes a strided out in place."""
    from specops.triton_kernels.sample import sample_triton

    g = torch.Generator().manual_seed(1)
    p = torch.rand(4, 11, generator=g)
    u = torch.rand(4, generator=g)
    want = reference.sample(p, uniforms=u)
    out = _strided(torch.zeros(4, dtype=torch.int32))
    sample_triton(p, (None, 0, None, 0), _strided(u), out)
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match="overlapping"):
        sample_triton(p, (None, 0, None, 0), u, torch.zeros(1, dtype=torch.int32).expand(4))


def test_verify_chain_strided_seed_uniforms_and_counts(bounds):
    g = torch.Generator().manual_seed(2)
    b, k, v = 4, 3, 19
    target = torch.rand(b, k + 1, v, generator=g)
    draft = torch.rand(b, k, v, generator=g)
    tokens = torch.randint(0, v, (b, k), generator=g)
    num = torch.tensor([3, 1, 0, 2])
    seeds = torch.randint(0, 2**40, (b,), generator=g)
    kw = dict(num_draft=num, offset=torch.tensor(4))
    want = specops.verify_chain(target, tokens, draft, seed=seeds, backend="reference", **kw)
    got = specops.verify_chain(
        _strided(target),
        tokens.t().contiguous().t(),
        _strided(draft),
        seed=_strided(seeds),
        num_draft=_strided(num),
        offset=_strided(torch.tensor(4)),
        backend="triton",
    )
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.num_accepted, want.num_accepted)
    one = torch.tensor(77, dtype=torch.int64)
    want = specops.verify_chain(target, tokens, draft, seed=one.repeat(b), backend="reference")
    got = specops.verify_chain(target, tokens, draft, seed=_expanded(one, b), backend="triton")
    assert torch.equal(got.tokens, want.tokens)
    u = torch.rand(b, k + 1, generator=g)
    want = specops.verify_chain(target, tokens, draft, uniforms=u, backend="reference")
    got = specops.verify_chain(target, tokens, draft, uniforms=_strided(u), backend="triton")
    assert torch.equal(got.tokens, want.tokens)


def test_probs_strided_parameters_logits_and_out(bounds):
    g = torch.Generator().manual_seed(3)
    b, v = 3, 29
    logits = torch.randn(b, v, generator=g)
    uncond = torch.randn(b, v, generator=g)
    temp = torch.tensor([0.7, 1.0, 1.3])
    top_k = torch.tensor([5, 0, 9], dtype=torch.int32)
    top_p = torch.tensor([0.9, 0.5, 1.0])
    scale = torch.tensor([1.5, 2.0, 1.0])
    kw = dict(temperature=temp, top_k=top_k, top_p=top_p, cfg_scale=scale)
    want = specops.probs_from_logits(logits, uncond_logits=uncond, backend="reference", **kw)
    strided = {name: _strided(t) for name, t in kw.items()}
    got = specops.probs_from_logits(
        logits.t().contiguous().t(), uncond_logits=_strided(uncond), backend="triton", **strided
    )
    torch.testing.assert_close(got, want)
    # expanded parameters
    one = dict(temperature=torch.tensor(0.8), top_k=torch.tensor(4), top_p=torch.tensor(0.7))
    want = specops.probs_from_logits(
        logits, backend="reference", **{n: t.reshape(1).repeat(b) for n, t in one.items()}
    )
    got = specops.probs_from_logits(
        logits, backend="triton", **{n: _expanded(t, b) for n, t in one.items()}
    )
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="out must be contiguous"):
        specops.probs_from_logits(logits, backend="triton", out=torch.zeros(v, b).t())


def test_probs_triton_launcher_checks_out(bounds):
    from specops.triton_kernels.probs import probs_triton

    logits = torch.randn(2, 8)
    out = torch.zeros(2, 17)[:, ::2]  # row stride 17, column stride 2: not addressable
    with pytest.raises(ValueError, match="contiguous last dim"):
        probs_triton(logits, None, 1.0, None, None, None, 1, out)
    out = torch.zeros(2, 9)[:, 1:]  # row stride 9, unit column stride: written in place
    probs_triton(logits, None, 1.0, None, None, None, 1, out)
    torch.testing.assert_close(out, torch.softmax(logits, -1))
