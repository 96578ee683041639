"""probs_from_logits with rows split over G programs (triton_kernels/probs_split.py).

Against the reference on odd shapes, with small blocks and explicit chunk counts so that a row's
chunks, the radix levels' shared histograms and the partial max / sums all come into play (the
op's own choice of G is exercised by tests/test_probs.py)."""

import math

import pytest
import torch
from helpers import served_vocab_logits, triton_device

import specops

DEV = triton_device()
pytestmark = pytest.mark.skipif(DEV is None, reason="no Triton device or interpreter")


def _reference(x, u, t, k, s, rows_per_req, top_p=None):
    b = x.shape[0] // rows_per_req
    view = (b, rows_per_req, x.shape[-1])
    return specops.probs_from_logits(
        x.view(view),
        temperature=t,
        top_k=k,
        top_p=top_p,
        cfg_scale=s,
        uncond_logits=None if u is None else u.view(view),
        backend="reference",
    ).view(x.shape)


def _split(x, u, t, k, s, rows_per_req, **kw):
    from specops.triton_kernels.probs_split import probs_split_triton

    out = torch.full(x.shape, float("nan"), device=x.device)
    return probs_split_triton(x, u, t, k, s, rows_per_req, out, **kw)


def _same(got, want):
    got, want = got.cpu(), want.cpu()
    assert torch.equal(got > 0, want > 0), "kept sets differ"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("v", [7, 1000, 4099])
@pytest.mark.parametrize("chunks", [1, 2, 3, 5])
def test_split_matches_reference(v, chunks):
    gen = torch.Generator().manual_seed(v * 10 + chunks)
    x = (torch.randn(6, v, generator=gen) * 3).to(DEV)
    u = (torch.randn(6, v, generator=gen) * 3).to(DEV)
    x[1] = -math.inf  # no finite logit: one-hot of token 0
    t = torch.tensor([0.7, 0.0, 1.3], device=DEV)  # request 1 greedy
    k = torch.tensor([5, 0, v // 3], dtype=torch.int32, device=DEV)
    s = torch.tensor([4.0, 1.0, 2.0], device=DEV)
    blk = 64 if v <= 1000 else 512  # the interpreter pays per block
    got = _split(x, u, t, k, s, 2, block=blk, chunks=chunks)
    _same(got, _reference(x, u, t, k, s, 2))
    assert got[1].cpu().tolist() == [1.0] + [0.0] * (v - 1)
    _same(_split(x, None, 1.0, None, None, 1, block=blk, chunks=chunks),
          _reference(x, None, 1.0, None, None, 1))  # fmt: skip
    _same(_split(x, None, 0.9, 2, None, 6, block=blk // 4, chunks=chunks),
          _reference(x, None, 0.9, 2, None, 6))  # fmt: skip


def test_split_ties_and_every_radix_level():
    """Integer logits tie the k-th value many times over (the whole-bin exit at level 0); a
    row of distinct values one ulp apart shares its top 24 key bits (all four levels)."""
    gen = torch.Generator().manual_seed(3)
    ties = torch.randint(-4, 4, (4, 300), generator=gen).float().to(DEV)
    for k in (1, 10, 150, 299, torch.tensor([1, 37, 150, 299], device=DEV)):
        _same(_split(ties, None, 1.0, k, None, 1, block=32, chunks=4),
              _reference(ties, None, 1.0, k, None, 1))  # fmt: skip
    # greedy: the arg-max is the first maximal id, whichever chunk holds it
    ties[:, 250] = ties[:, 40] = 9.0
    got = _split(ties, None, 0.0, 5, None, 1, block=32, chunks=4).cpu()
    assert (got[:, 40] == 1).all() and (got.sum(-1) == 1).all()
    base = torch.full((2, 500), 1.0)
    ulps = torch.arange(500, dtype=torch.int32).view(1, -1).repeat(2, 1)
    near = (base.view(torch.int32) + ulps).view(torch.float32)  # 1.0 + i ulp, distinct
    near = near[:, torch.randperm(500, generator=gen)].contiguous().to(DEV)
    for k in (1, 77, 255, 256, 499):
        got = _split(near, None, 1.0, k, None, 1, block=32, chunks=3)
        _same(got, _reference(near, None, 1.0, k, None, 1))
        assert ((got > 0).sum(-1) == k).all()


def test_split_half_precision_and_masked_entries():
    gen = torch.Generator().manual_seed(5)
    c = (torch.randn(3, 2, 2500, generator=gen) * 2).half().to(DEV)
    u = (torch.randn(3, 2, 2500, generator=gen) * 2).half().to(DEV)
    c[0, 0, ::3] = -math.inf
    u[1, 1, 7] = -math.inf  # masked in the unconditional row only
    x, xu = c.view(6, -1), u.view(6, -1)
    for k in (None, 1000, torch.tensor([1, 0, 2**31 - 1], device=DEV)):
        _same(_split(x, xu, 0.8, k, 3.0, 2, block=256, chunks=4),
              _reference(x, xu, 0.8, k, 3.0, 2))  # fmt: skip


@pytest.mark.parametrize("cap", [None, 16])
def test_split_top_p_matches_reference(cap):
    """Top-p after top-k: the survivors sorted and cut at p * Z in one program a row.  Flat
    logits keep many entries; a per-request k of 0 (top-k off), a k above ``cap`` and ties
    past it take the stored-row search instead; greedy and all -inf rows stay one-hot."""
    gen = torch.Generator().manual_seed(11 + (cap or 0))
    v = 700
    x = (torch.randn(8, v, generator=gen) * 0.7).to(DEV)
    u = (torch.randn(8, v, generator=gen) * 0.7).to(DEV)
    x[3] = -math.inf
    t = torch.tensor([1.0, 0.0, 0.8, 1.2], device=DEV)  # request 1 greedy
    k = torch.tensor([40, 9, 0, 300], dtype=torch.int32, device=DEV)  # request 2: no top-k
    p = torch.tensor([0.9, 0.5, 0.7, 0.95], device=DEV)
    s = torch.tensor([2.0, 1.0, 3.0, 1.5], device=DEV)
    got = _split(x, u, t, k, s, 2, top_p=p, block=64, chunks=3, cap=cap)
    _same(got, _reference(x, u, t, k, s, 2, top_p=p))
    kept = (got > 0).sum(-1).cpu()
    assert (kept[[0, 1, 4, 5, 6, 7]] > 1).all(), kept  # top-p cut inside the survivors
    assert got[3].cpu().tolist() == [1.0] + [0.0] * (v - 1)
    # Python k and p; integer logits tie the k-th value and the top-p boundary many times over
    ties = torch.randint(-3, 3, (4, 300), generator=gen).float().to(DEV)
    for kk, pp in ((10, 0.5), (100, 0.3), (150, 0.99), (7, 0.0001)):
        _same(_split(ties, None, 1.0, kk, None, 1, top_p=pp, block=32, chunks=4, cap=cap),
              _reference(ties, None, 1.0, kk, None, 1, top_p=pp))  # fmt: skip


def test_split_top_p_needs_top_k():
    x = torch.randn(2, 50).to(DEV)
    with pytest.raises(ValueError, match="top_p needs top_k"):
        _split(x, None, 1.0, None, None, 1, top_p=0.9)
    with pytest.raises(ValueError, match="cap must be a power of two, got 100"):
        _split(x, None, 1.0, 5, None, 1, top_p=0.9, cap=100)


def test_the_op_takes_the_split_path_without_top_p():
    """probs_from_logits(backend="triton") runs probs_split_triton (its result overwrites the
    out buffer it also uses as scratch) without top-p and with top-p after a top-k below
    TOPP_CAP; top-p alone (or after a top-k past TOPP_CAP) the one-program-a-row kernel: the
    choice of the entry the declaration names (probs_split.probs_from_logits_triton)."""
    from specops.triton_kernels import probs_split

    calls = []
    real = probs_split.probs_split_triton

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    x = torch.randn(2, 3, 500, generator=torch.Generator().manual_seed(1)).to(DEV)
    probs_split.probs_split_triton = spy
    try:
        got = specops.probs_from_logits(x, top_k=20, backend="triton")
        assert calls == [1]
        got_p = specops.probs_from_logits(x, top_k=20, top_p=0.9, backend="triton")
        assert calls == [1, 1]
        specops.probs_from_logits(x, top_p=0.9, backend="triton")
        specops.probs_from_logits(x, top_k=500, top_p=0.9, backend="triton")  # k >= V: no top-k
        assert calls == [1, 1]
    finally:
        probs_split.probs_split_triton = real
    _same(got, specops.probs_from_logits(x, top_k=20, backend="reference"))
    _same(got_p, specops.probs_from_logits(x, top_k=20, top_p=0.9, backend="reference"))


@pytest.mark.gpu
def test_gpu_split_at_served_vocabularies_bf16():
    """The split path at the served shapes on a GPU (chunk counts from the SM count), without
    and with top-p (the survivors' sort at CAP 4096 for a per-request k)."""
    for c, u, t, k in served_vocab_logits(12, rows=16):
        for top_p in (None, 0.9):
            kw = dict(temperature=t, top_k=k, top_p=top_p, cfg_scale=4.0, uncond_logits=u)
            got = specops.probs_from_logits(c, backend="triton", **kw)
            _same(got, specops.probs_from_logits(c, backend="reference", **kw))
