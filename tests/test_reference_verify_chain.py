"""The reference verify_chain, with LANTERN's relaxation, against its contract (DESIGN.md,
reference/verify.py); chi-square checks each paired with a negative control (verify_stats.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import gen as _gen
from helpers import random_probs
from verify_stats import PASS, _draw, chain_inputs, joint_pvalue

from specops.reference import verify as rv
from specops.reference.philox import row_uniforms


def chain_joint_pvalue(*, seed=0, deterministic=False, ragged=False, b=20000):
    gen = _gen(100 + seed)
    m, tp, x, dp = chain_inputs(b, gen, deterministic=deterministic)
    nd = torch.randint(0, 3, (b,), generator=gen) if ragged else None
    r = rv.verify_chain(tp, x, dp, num_draft=nd, seed=seed, offset=7)
    emitted = r.num_accepted.long() + 1
    seqs = m.complete(r.tokens, emitted, 3, gen)
    return joint_pvalue(seqs, m)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("ragged", [False, True])
def test_chain_is_lossless(deterministic, ragged):
    # joint law of the first three tokens (missing ones completed from the true conditionals)
    assert chain_joint_pvalue(deterministic=deterministic, ragged=ragged) > PASS


def test_chain_negative_control_residual_without_q(monkeypatch):
    # On rejection, sampling from p instead of norm(max(p - q, 0)) biases the output.
    monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    assert chain_joint_pvalue() < PASS


def test_chain_greedy_matches_argmax_decoding():
    gen = _gen(1)
    b, k, v = 300, 5, 7
    p = random_probs(b, k + 1, v, generator=gen)
    am = p.argmax(-1)
    rand = torch.randint(0, v, (b, k), generator=gen)
    x = torch.where(torch.rand(b, k, generator=gen) < 0.75, am[:, :k], rand)
    nd = torch.randint(0, k + 1, (b,), generator=gen)
    r = rv.verify_chain(p, x, None, num_draft=nd, greedy=True)
    for i in range(b):
        want = []
        for j in range(int(nd[i]) + 1):
            want.append(int(am[i, j]))
            if j == int(nd[i]) or int(x[i, j]) != int(am[i, j]):
                break
        got = r.tokens[i]
        assert int(r.num_accepted[i]) == len(want) - 1
        assert got[: len(want)].tolist() == want and (got[len(want) :] == -1).all()


def test_chain_one_hot_targets_are_exact(device):
    gen = _gen(2)
    b, k, v = 500, 4, 9
    hot = torch.randint(0, v, (b, k + 1), generator=gen)
    p = torch.nn.functional.one_hot(hot, v).float()
    q = random_probs(b, k, v, generator=gen)
    other = _draw(q.reshape(-1, v), gen).reshape(b, k)
    x = torch.where(torch.rand(b, k, generator=gen) < 0.8, hot[:, :k], other)
    p, q, x = p.to(device), q.to(device), x.to(device)
    want = rv.verify_chain(p, x, q, greedy=True)
    for seed in range(4):
        for dp in (q, None):
            got = rv.verify_chain(p, x, dp, seed=seed)
            assert torch.equal(got.tokens, want.tokens)
            assert torch.equal(got.num_accepted, want.num_accepted)


def test_chain_explicit_uniforms_known_answer():
    p = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]])
    q = torch.tensor([[[0.2, 0.5, 0.3]]])
    x = torch.tensor([[1]])
    # accept iff u * q(1) < p(1): u * 0.5 < 0.3  <=>  u < 0.6
    acc = rv.verify_chain(p, x, q, uniforms=torch.tensor([[0.59, 0.95]]))
    assert acc.tokens.tolist() == [[1, 2]] and acc.num_accepted.tolist() == [1]  # bonus: u=.95
    rej = rv.verify_chain(p, x, q, uniforms=torch.tensor([[0.61, 0.95]]))
    # residual max(p - q, 0) = [0.3, 0, 0]: token 0 whatever the final uniform
    assert rej.tokens.tolist() == [[0, -1]] and rej.num_accepted.tolist() == [0]
    # deterministic draft: accept iff u < p(1) = 0.3; residual = p without token 1
    det = rv.verify_chain(p, x, None, uniforms=torch.tensor([[0.31, 0.8]]))
    assert det.tokens.tolist() == [[2, -1]]  # (0.5, 0, 0.2) -> cdf 0.5/0.7 < 0.8
    det = rv.verify_chain(p, x, None, uniforms=torch.tensor([[0.29, 0.05]]))
    assert det.tokens.tolist() == [[1, 0]]


def test_chain_padding_counts_and_num_draft(device):
    gen = _gen(3)
    b, k, v = 400, 6, 8
    p = random_probs(b, k + 1, v, generator=gen).to(device)
    q = random_probs(b, k, v, generator=gen).to(device)
    x = _draw(q.reshape(-1, v).cpu(), gen).reshape(b, k).to(device)
    nd = torch.randint(0, k + 1, (b,), generator=gen).to(device)
    r = rv.verify_chain(p, x, q, num_draft=nd, seed=5)
    a = r.num_accepted.long()
    assert r.tokens.dtype == torch.int32 and r.num_accepted.dtype == torch.int32
    assert r.tokens.shape == (b, k + 1) and (a <= nd).all()
    col = torch.arange(k + 1, device=device)
    assert ((r.tokens >= 0) == (col <= a[:, None])).all()
    assert (torch.where(col[:k] < a[:, None], r.tokens[:, :k] == x, True)).all()
    # -1 padding after num_draft drafts is the same as num_draft
    xpad = torch.where(torch.arange(k, device=device) < nd[:, None], x, -1)
    r2 = rv.verify_chain(p, xpad, q, seed=5)
    assert torch.equal(r.tokens, r2.tokens) and torch.equal(r.num_accepted, r2.num_accepted)
    # num_draft = 0: the bonus sample from row 0 only
    r0 = rv.verify_chain(p, x, q, num_draft=torch.zeros_like(nd), seed=5)
    assert (r0.num_accepted == 0).all() and (r0.tokens[:, 1:] == -1).all()


def test_chain_seeds_offsets_and_uniforms():
    gen = _gen(4)
    b, k, v = 64, 3, 10
    p = random_probs(b, k + 1, v, generator=gen)
    q = random_probs(b, k, v, generator=gen)
    x = _draw(q.reshape(-1, v), gen).reshape(b, k)
    seeds = torch.randint(0, 2**40, (b,), generator=gen)
    r = rv.verify_chain(p, x, q, seed=seeds, offset=torch.tensor(11))
    # per-request seed: request b reads stream row b under seed[b], draws 0..K
    u = row_uniforms(seeds, 11, b, k + 1, rows_per_seed=1)
    ru = rv.verify_chain(p, x, q, uniforms=u)
    assert torch.equal(r.tokens, ru.tokens)
    same = rv.verify_chain(p, x, q, seed=torch.full((b,), 9), offset=3)
    assert torch.equal(same.tokens, rv.verify_chain(p, x, q, seed=9, offset=3).tokens)
    assert not torch.equal(
        rv.verify_chain(p, x, q, seed=9, offset=4).tokens, same.tokens
    )  # another offset, other draws (with overwhelming probability at B=64)


def test_chain_out_of_range_drafts_are_rejected():
    p = torch.tensor([[[0.2, 0.3, 0.5], [0.3, 0.3, 0.4]]]).expand(4, -1, -1)
    q = torch.tensor([[[0.0, 0.0, 1.0]]]).expand(4, -1, -1)
    x = torch.tensor([[3], [1000], [-2], [-(2**40)]])
    for dp in (q, None):
        for s in range(5):
            r = rv.verify_chain(p, x, dp, seed=s)
            assert (r.num_accepted == 0).all()
            assert ((r.tokens[:, 0] >= 0) & (r.tokens[:, 0] < 3)).all()
    # residual max(p - q, 0) = (0.2, 0.3, 0) with draft_probs
    r = rv.verify_chain(p, x, q, seed=0)
    assert (r.tokens[:, 0] != 2).all()


def test_chain_rows_without_mass_fall_back_to_token_zero():
    p = torch.zeros(3, 2, 5)
    x = torch.tensor([[2], [4], [-1]])
    q = torch.zeros(3, 1, 5)
    for dp in (q, None):
        r = rv.verify_chain(p, x, dp, seed=1)
        assert r.tokens.tolist() == [[0, -1]] * 3 and r.num_accepted.tolist() == [0] * 3
    r = rv.verify_chain(p, x, None, greedy=True)
    assert r.tokens.tolist() == [[0, -1]] * 3


def test_chain_empty_draft():
    p = random_probs(5, 1, 6, generator=_gen(5))
    r = rv.verify_chain(p, torch.zeros(5, 0, dtype=torch.long), torch.zeros(5, 0, 6), seed=2)
    assert r.tokens.shape == (5, 1) and (r.num_accepted == 0).all()
    u = row_uniforms(2, 0, 5, 1)[:, 0]
    from specops.reference import inverse_cdf

    assert torch.equal(r.tokens[:, 0], inverse_cdf(p[:, 0], u))


# --------------------------------------------------------------------------------------------
# relaxation (LANTERN)
# --------------------------------------------------------------------------------------------
def test_relaxation_threshold_exact():
    # binary fractions, so that the cumulative sums are exact
    p = torch.tensor([[[0.125, 0.25, 0.25, 0.375], [0.25, 0.25, 0.25, 0.25]]])
    q = torch.tensor([[[0.5, 0.125, 0.25, 0.125]]])
    x = torch.tensor([[0]])
    nb = torch.tensor([[2, 0, -1, 1, 3], [0, 2, 3, 3, 3], [1, 3, 0, 0, 0], [2, 1, 0, 0, 0]])
    nb = nb.to(torch.int32)

    def accepted(delta, u):
        relax = rv.Relaxation(nb, delta)
        r = rv.verify_chain(p, x, q, relax=relax, uniforms=torch.tensor([[u, 0.5]]))
        return int(r.num_accepted[0]) == 1

    # neighbours of 0 in order: 2 (0.25), [0 itself and -1 skipped], 1 (0.25), 3 (0.375):
    # cumulative 0.25, 0.5, 0.875.  delta 0.3: pool 0.25, accept iff 0.5 u < 0.125 + 0.25
    assert accepted(0.3, 0.74) and not accepted(0.3, 0.76)
    # delta 0.5 (<= is inclusive): pool 0.5, 0.5 u < 0.625 always
    assert accepted(0.5, 0.999)
    # delta 0.2: the first neighbour alone exceeds it, nothing pooled: u < 0.25
    assert accepted(0.2, 0.24) and not accepted(0.2, 0.26)
    assert accepted(0.0, 0.24) and not accepted(0.0, 0.26)


def test_relaxation_delta_zero_is_exact_and_delta_raises_acceptance():
    gen = _gen(6)
    b, k, v = 3000, 4, 12
    p = random_probs(b, k + 1, v, generator=gen, sharpness=2.0)
    q = random_probs(b, k, v, generator=gen, sharpness=2.0)
    x = _draw(q.reshape(-1, v), gen).reshape(b, k)
    nb = torch.stack([torch.roll(torch.arange(v), -s) for s in (1, 2, 3)], 1).to(torch.int32)
    base = rv.verify_chain(p, x, q, seed=3)
    zero = rv.verify_chain(p, x, q, seed=3, relax=rv.Relaxation(nb, 0.0))
    assert torch.equal(base.tokens, zero.tokens)
    loose = rv.verify_chain(p, x, q, seed=3, relax=rv.Relaxation(nb, 0.3))
    assert (loose.num_accepted >= base.num_accepted).all()  # same draws, larger threshold
    assert loose.num_accepted.float().mean() > base.num_accepted.float().mean() + 0.2
