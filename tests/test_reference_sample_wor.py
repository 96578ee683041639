"""sample_without_replacement: Gumbel top-k against the law of sequential sampling without
replacement, padding, seeds; and its public layer (errors, opcheck)."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import chi2_pvalue, random_probs

import specops
from specops.reference import sample_without_replacement as wor
from specops.reference.philox import row_uniforms

PASS = 1e-3


def sequential_law(p: torch.Tensor, k: int) -> torch.Tensor:
    """P(c_0, ..., c_{k-1}) of sequential sampling without replacement, as a [V]*k tensor:
    prod_j p(c_j) / (1 - p(c_0) - ... - p(c_{j-1})) over distinct tuples, 0 otherwise."""
    v = p.shape[0]
    p = p.double() / p.double().sum()
    law = torch.zeros((v,) * k, dtype=torch.float64)
    for tup in itertools.permutations(range(v), k):
        prob, used = 1.0, 0.0
        for c in tup:
            prob *= float(p[c]) / (1.0 - used) if used < 1.0 else 0.0
            used += float(p[c])
        law[tup] = prob
    return law


def joint_pvalue(draws: torch.Tensor, p: torch.Tensor) -> float:
    b, k = draws.shape
    v = p.shape[0]
    idx = torch.zeros(b, dtype=torch.long)
    for j in range(k):
        idx = idx * v + draws[:, j].long()
    counts = torch.bincount(idx, minlength=v**k)
    return chi2_pvalue(counts.numpy(), sequential_law(p, k).flatten().numpy())


def test_draws_follow_sequential_sampling_without_replacement():
    p = random_probs(5, generator=torch.Generator().manual_seed(0), sharpness=1.5)
    draws = wor(p.expand(30000, -1), 3, seed=7, offset=2)
    assert draws.shape == (30000, 3) and draws.dtype == torch.int32
    # the joint law of (c_0, c_1, c_2): distinctness is included (repeats have probability 0)
    assert joint_pvalue(draws, p) > PASS


def test_negative_control_wrong_keys_fail():
    # ranking by p * u (a common mistake) is not sampling without replacement
    p = random_probs(5, generator=torch.Generator().manual_seed(0), sharpness=1.5)
    u = row_uniforms(7, 2, 30000, 5)
    draws = torch.sort(p * u, -1, descending=True).indices[:, :3]
    assert joint_pvalue(draws, p) < PASS
    # and the same uniforms through the real keys pass
    assert joint_pvalue(wor(p.expand(30000, -1), 3, uniforms=u), p) > PASS


def test_known_answer_from_explicit_uniforms():
    p = torch.tensor([0.5, 0.0, 0.2, 0.3])
    u = torch.tensor([0.3, 0.9, 0.95, 0.5])
    keys = torch.log(p) - torch.log(-torch.log(u))
    want = [i for i in torch.argsort(keys, descending=True).tolist() if p[i] > 0]
    assert wor(p, 3, uniforms=u).tolist() == want
    assert wor(p, 4, uniforms=u).tolist() == want + [-1]  # only 3 positive entries
    assert wor(p, 6, uniforms=u).tolist() == want + [-1] * 3  # k > V


def test_zero_entries_never_chosen_and_padding():
    gen = torch.Generator().manual_seed(1)
    p = random_probs(2000, 9, generator=gen, zero_frac=0.5)
    p[:10] = 0.0  # rows without mass: all -1
    d = wor(p, 5, seed=3)
    npos = (p > 0).sum(-1)
    valid = d >= 0
    assert (valid.sum(-1) == npos.clamp(max=5)).all()
    assert (valid[:, 1:] <= valid[:, :-1]).all()  # -1 only after the draws
    assert (p.gather(-1, d.long().clamp(min=0)) > 0)[valid].all()
    s = torch.sort(torch.where(valid, d, -1 - torch.arange(5)), -1).values
    assert (s[:, 1:] != s[:, :-1]).all()  # distinct


def test_leading_dims_seeds_and_scale_invariance():
    gen = torch.Generator().manual_seed(2)
    p = random_probs(4, 3, 20, generator=gen)
    seeds = torch.tensor([11, 12, 13, 14])
    d = wor(p, 4, seed=seeds, offset=5)
    assert d.shape == (4, 3, 4)
    # flat row r = (b, m) reads seed[b]: rows_per_seed = 3
    u = row_uniforms(seeds, 5, 12, 20, rows_per_seed=3).reshape(4, 3, 20)
    assert torch.equal(d, wor(p, 4, uniforms=u))
    assert torch.equal(wor(p * 2.0, 4, seed=seeds, offset=5), d)  # rows need not be normalised
    assert torch.equal(wor(p[0, 0], 4, seed=9), wor(p[0, 0][None], 4, seed=9)[0])


def test_first_draw_is_sample_distribution():
    # entry 0 alone is a draw from p (what proactive drafting's first child relies on)
    p = random_probs(11, generator=torch.Generator().manual_seed(3), zero_frac=0.3)
    d = wor(p.expand(20000, -1), 4, seed=1)
    counts = torch.bincount(d[:, 0].long(), minlength=11)
    assert chi2_pvalue(counts.numpy(), p.numpy()) > PASS


# public layer -------------------------------------------------------------------------------
def test_public_matches_reference(device):
    gen = torch.Generator().manual_seed(4)
    p = random_probs(6, 2, 30, generator=gen, zero_frac=0.2).to(device)
    seeds = torch.arange(6, device=device)
    got = specops.sample_without_replacement(
        p, 3, seed=seeds, offset=torch.tensor(2, device=device)
    )
    want = wor(p, 3, seed=seeds, offset=2)
    assert torch.equal(got, want) and got.dtype == torch.int32
    u = torch.rand(6, 2, 30, generator=gen).to(device)
    assert torch.equal(specops.sample_without_replacement(p, 2, uniforms=u), wor(p, 2, uniforms=u))


def test_public_errors():
    p = torch.rand(3, 8)
    f = specops.sample_without_replacement
    with pytest.raises(TypeError, match="probs"):
        f(p.long(), 2)
    with pytest.raises(TypeError, match="k"):
        f(p, 2.0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        f(p, 0)
    with pytest.raises(ValueError, match="uniforms"):
        f(p, 2, uniforms=torch.rand(3, 7))
    with pytest.raises(TypeError, match="uniforms"):
        f(p, 2, uniforms=torch.rand(3, 8).double())
    with pytest.raises(ValueError, match="seed"):
        f(p, 2, seed=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="negative"):
        f(-p, 2)
    with pytest.raises(ValueError, match="non-empty"):
        f(torch.rand(3, 0), 1)
    with pytest.raises(RuntimeError, match="not available"):
        f(p, 2, backend="triton")  # no Triton kernel
    with pytest.raises(RuntimeError, match="not available"):
        f(p, 2, backend="cuda")  # CPU tensors


def test_opcheck_and_compile():
    p = random_probs(3, 40, generator=torch.Generator().manual_seed(0))
    torch.library.opcheck(
        torch.ops.specops.sample_without_replacement.default,
        (p, 3, None, 1, None, 2, None, "reference"),
        test_utils=("test_schema", "test_faketensor"),
    )
    with specops.validation(False):
        fn = torch.compile(
            lambda x: specops.sample_without_replacement(x, 3, seed=1),
            backend="aot_eager",
            fullgraph=True,
        )
        assert torch.equal(fn(p), wor(p, 3, seed=1))
