"""verify_chain(block=True): block verification (Sun et al. 2024, arXiv 2403.10444, Alg. 2).

Exact expectations computed by enumeration with rational arithmetic: on the paper's two-token toy
(p = [1/3, 2/3], q = [2/3, 1/3]) the expected accepted length is 11/9 against token-wise 10/9 at
K = 2, 5/3 against 38/27 at K = 3, and equal (2/3) at K = 1; on a context-dependent V = 3 example
437/360 against 9/8.  The law of the emitted tokens is the target's (chi-square on the joint of
the first two tokens).  Every backend gives the reference's tokens on random inputs (ragged
batches, deterministic drafts, zero entries, K = 0, V = 1), and the fixed-coin vectors agree with
SGLang 0.5.23's block-verification kernel run on the same coins."""

from __future__ import annotations

import pytest
import torch
from helpers import CUDA_SIM, backend_device, chi2_pvalue, gen

import specops
from specops import _build

N = 40000  # requests per statistical check: sd of a mean accepted length <= 1/200

_BACKENDS = ["reference", pytest.param("cpu", marks=pytest.mark.skipif(
    not _build.has_cpp(), reason="no C++ build")), CUDA_SIM, "triton"]  # fmt: skip


def _toy(k, seed):
    """The paper's toy: context-free p = [1/3, 2/3], q = [2/3, 1/3], drafts x_i ~ q."""
    g = gen(seed)
    p = torch.tensor([1 / 3, 2 / 3]).expand(N, k + 1, 2).contiguous()
    q = torch.tensor([2 / 3, 1 / 3]).expand(N, k, 2).contiguous()
    x = torch.multinomial(q.reshape(-1, 2), 1, generator=g).reshape(N, k)
    return p, x, q


@pytest.mark.parametrize("k,block_mean,token_mean", [(1, 2 / 3, 2 / 3), (2, 11 / 9, 10 / 9),
                                                     (3, 5 / 3, 38 / 27)])  # fmt: skip
def test_paper_toy_expected_accepted_length(k, block_mean, token_mean):
    p, x, q = _toy(k, 10 + k)
    blk = specops.verify_chain(p, x, q, seed=3, block=True).num_accepted.double().mean().item()
    tok = specops.verify_chain(p, x, q, seed=3).num_accepted.double().mean().item()
    assert abs(blk - block_mean) < 0.02
    assert abs(tok - token_mean) < 0.02


_P1 = [1 / 2, 1 / 3, 1 / 6]
_P2 = [[1 / 4, 1 / 4, 1 / 2], [1 / 5, 3 / 5, 1 / 5], [1 / 3, 1 / 3, 1 / 3]]  # given x_1
_Q1 = [1 / 6, 1 / 2, 1 / 3]
_Q2 = [[1 / 2, 1 / 4, 1 / 4], [1 / 3, 1 / 3, 1 / 3], [1 / 10, 1 / 10, 4 / 5]]  # given x_1


def _context_example(seed):
    """V = 3, K = 2: p_2 and q_2 depend on x_1, p_3 puts 1/2 on x_2 and 1/4 elsewhere."""
    g = gen(seed)
    q1 = torch.tensor(_Q1).expand(N, 3)
    x1 = torch.multinomial(q1, 1, generator=g)[:, 0]
    q2 = torch.tensor(_Q2)[x1]
    x2 = torch.multinomial(q2, 1, generator=g)[:, 0]
    p3 = torch.full((N, 3), 0.25).scatter(1, x2[:, None], 0.5)
    p = torch.stack([torch.tensor(_P1).expand(N, 3), torch.tensor(_P2)[x1], p3], 1)
    q = torch.stack([q1, q2], 1)
    return p.contiguous(), torch.stack([x1, x2], 1), q.contiguous()


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_context_example_length_and_law(backend):
    p, x, q = _context_example(5)
    r = specops.verify_chain(p, x, q, seed=9, block=True, backend=backend)
    tok = specops.verify_chain(p, x, q, seed=9, backend=backend)
    assert abs(r.num_accepted.double().mean().item() - 437 / 360) < 0.02
    assert abs(tok.num_accepted.double().mean().item() - 9 / 8) < 0.02
    # the first two emitted tokens follow p_1(y1) p_2(y2 | y1); after one emitted token the
    # second is drawn from the target (the next decoding step would)
    y1 = r.tokens[:, 0].long()
    y2 = r.tokens[:, 1].long()
    fresh = torch.multinomial(torch.tensor(_P2)[y1], 1, generator=gen(6))[:, 0]
    y2 = torch.where(r.num_accepted >= 1, y2, fresh)
    counts = torch.bincount(y1 * 3 + y2, minlength=9)
    joint = (torch.tensor(_P1)[:, None] * torch.tensor(_P2)).reshape(-1)
    assert chi2_pvalue(counts, joint) > 1e-3
    assert (r.tokens[:, 0] >= 0).all() and (r.tokens[:, 1:] >= -1).all()


def test_a_broken_residual_is_caught():
    """Negative control: the token-wise residual max(p - q, 0) in place of max(w p - q, 0) at
    the stopping point breaks the law of the context example (the test above would fail)."""
    import specops.reference.block as blk

    p, x, q = _context_example(5)
    orig = blk.block_residual
    try:
        blk.block_residual = lambda pp, qq, w: orig(pp, qq, torch.ones_like(w))
        r = specops.verify_chain(p, x, q, seed=9, block=True, backend="reference")
    finally:
        blk.block_residual = orig
    y1, y2 = r.tokens[:, 0].long(), r.tokens[:, 1].long()
    fresh = torch.multinomial(torch.tensor(_P2)[y1], 1, generator=gen(6))[:, 0]
    y2 = torch.where(r.num_accepted >= 1, y2, fresh)
    counts = torch.bincount(y1 * 3 + y2, minlength=9)
    joint = (torch.tensor(_P1)[:, None] * torch.tensor(_P2)).reshape(-1)
    assert chi2_pvalue(counts, joint) < 1e-6


# (x, coins for positions 1 and 2, final coin) -> (tau, tokens row), on the context example;
# SGLang 0.5.23's chain_speculative_sampling_triton(block_verification=True) gives the same on
# these coins (run in Triton's interpreter)
_FIXED = [
    ((0, 1), (0.5, 0.5), 0.5, 2, [0, 1, 1]),
    ((0, 1), (0.1, 0.9), 0.0, 2, [0, 1, 0]),
    ((1, 2), (0.3, 0.2), 0.7, 2, [1, 2, 2]),
    ((2, 2), (0.0, 0.99), 0.99, 1, [2, 1, -1]),
]


@pytest.mark.parametrize("backend", _BACKENDS)
@pytest.mark.parametrize("case", range(len(_FIXED)))
def test_fixed_coins(backend, case):
    dev = backend_device(backend)
    xs, coins, final, tau, row = _FIXED[case]
    x1, x2 = xs
    p3 = torch.full((3,), 0.25).scatter(0, torch.tensor([x2]), 0.5)
    p = torch.stack([torch.tensor(_P1), torch.tensor(_P2[x1]), p3])[None].to(dev)
    q = torch.stack([torch.tensor(_Q1), torch.tensor(_Q2[x1])])[None].to(dev)
    u = torch.tensor([[*coins, final]], device=dev)
    r = specops.verify_chain(p, torch.tensor([[x1, x2]], device=dev), q, uniforms=u, block=True,
                             backend=backend)  # fmt: skip
    assert r.num_accepted.tolist() == [tau]
    assert r.tokens.tolist() == [row]


def _random_case(g, b, k, v, zero, deterministic):
    def rows(*s):
        w = torch.rand(*s, generator=g) ** 3
        w = torch.where(torch.rand(*s, generator=g) < zero, 0.0, w)
        w[..., 0] += 1e-3
        return w / w.sum(-1, keepdim=True)

    p, q = rows(b, k + 1, v), rows(b, k, v)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k) if k else (
        torch.zeros(b, 0, dtype=torch.long))  # fmt: skip
    nd = torch.randint(0, k + 1, (b,), generator=g)
    return p, x, (None if deterministic else q), nd


@pytest.mark.parametrize("backend", _BACKENDS[1:])
@pytest.mark.parametrize("k,v", [(0, 5), (1, 7), (3, 1), (4, 9), (6, 33), (8, 300)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_backends_match_the_reference(backend, k, v, deterministic):
    dev = backend_device(backend)
    g = gen(100 + k * 7 + v)
    for trial in range(3):
        p, x, q, nd = _random_case(g, 6, k, v, 0.3 * trial, deterministic)
        want = specops.verify_chain(p, x, q, num_draft=nd, seed=trial, offset=4, block=True,
                                    backend="reference")  # fmt: skip
        on = lambda t: None if t is None else t.to(dev)  # noqa: E731
        got = specops.verify_chain(on(p), on(x), on(q), num_draft=on(nd), seed=trial, offset=4,
                                   block=True, backend=backend)  # fmt: skip
        assert torch.equal(got.tokens.cpu(), want.tokens), (trial, got.tokens, want.tokens)
        assert torch.equal(got.num_accepted.cpu(), want.num_accepted)


def test_k1_is_token_wise():
    """One draft: h_1 = w_1 = min(1, p/q) and the residual at tau = 0 is token-wise's, so the
    two rules give the same tokens on the same draws."""
    g = gen(4)
    p, x, q, _ = _random_case(g, 500, 1, 11, 0.2, False)
    a = specops.verify_chain(p, x, q, seed=2, block=True)
    b = specops.verify_chain(p, x, q, seed=2)
    assert torch.equal(a.tokens, b.tokens)


def test_never_fewer_on_average_and_more_with_sampled_drafts():
    """Random 8-token vocabularies, K = 4, drafts from q: block's mean accepted length is at
    least token-wise's on every case and larger over all (the paper's Theorem 2)."""
    g = gen(8)
    gains = []
    for case in range(5):
        p1 = torch.rand(8, generator=g) ** 2
        q1 = torch.rand(8, generator=g) ** 2
        p = (p1 / p1.sum()).expand(N // 4, 5, 8).contiguous()
        q = (q1 / q1.sum()).expand(N // 4, 4, 8).contiguous()
        x = torch.multinomial(q.reshape(-1, 8), 1, generator=g).reshape(-1, 4)
        blk = specops.verify_chain(p, x, q, seed=case, block=True).num_accepted.double().mean()
        tok = specops.verify_chain(p, x, q, seed=case).num_accepted.double().mean()
        assert blk > tok - 0.03
        gains.append(float(blk - tok))
    assert sum(gains) / len(gains) > 0.03


def test_bad_arguments():
    p = torch.full((1, 3, 4), 0.25)
    x = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="block=True cannot be combined"):
        specops.verify_chain(p, x, greedy=True, block=True)
    with pytest.raises(ValueError, match="block=True cannot be combined"):
        nb = torch.zeros(4, 1, dtype=torch.int32)
        specops.verify_chain(p, x, relax=specops.Relaxation(nb, 0.1), block=True)
    with pytest.raises(TypeError, match="block must be a bool"):
        specops.verify_chain(p, x, block=1)
    if _build.has_cpp():
        with specops.validation(False), pytest.raises(ValueError, match="block"):
            specops.verify_chain(p, x, greedy=True, block=True, backend="cpu")
