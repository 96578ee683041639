"""End-to-end losslessness of the decoding loop (specops.decode) on the exact Markov chain model
(tests/markov_chain_lm.py): AR, speculative decoding with every tree, SJD and SJD-PAC reproduce
the chain's joint distribution; deliberately wrong verifications fail the same test."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from markov_chain_lm import (
    BATCH,
    CLASSES,
    CLASSES_PAC,
    HIDDEN,
    LENGTH,
    MarkovDrafter,
    MarkovLM,
    V,
    _check,
)

import specops
from specops import Tree
from specops.decode.ar import ar
from specops.decode.sjd import sjd
from specops.decode.sjd_pac import sjd_pac
from specops.decode.speculative import speculative


def test_exact_joint_is_a_distribution(markov):
    m, _ = markov
    for s in (1, 3, 5):
        assert abs(m.joint(s).sum() - 1) < 1e-9


def test_ar_matches_chain(markov):
    m, _ = markov
    tokens, stats = ar(m, CLASSES, length=LENGTH, seed=11)
    _check(m, tokens)
    assert stats.step_compression == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kw",
    [
        dict(tree=None, num_draft=3),
        dict(tree="dynamic", branch=2, depth=3, num_nodes=6),
        dict(tree="confidence", branch=3, depth=3, num_nodes=8, threshold=0.95),
        dict(tree="confidence", branch=3, depth=3, num_nodes=8, confidence="top1", threshold=0.5),
        dict(tree=Tree.kary(2, 3), without_replacement=False),
        dict(tree=Tree.kary(2, 3), without_replacement=True),
    ],
    ids=["chain", "dynamic", "confidence", "confidence-top1", "static-iid", "static-wor"],
)
def test_speculative_lossless(markov, kw):
    m, d = markov
    tokens, stats = speculative(m, d, CLASSES, length=LENGTH, seed=12, **kw)
    _check(m, tokens)
    assert stats.step_compression > 1.2


@pytest.mark.parametrize("hide", [None, "first"])
@pytest.mark.parametrize("tree", [None, "dynamic"], ids=["chain", "dynamic"])
def test_speculative_drafter_prefill_lossless(tree, hide):
    """A two-token prompt [V, V] (the chain then starts from the pair (V, V)): the drafter's
    prefill over it, with or without its first position hidden, keeps sampling lossless."""
    m, d = MarkovLM(), MarkovDrafter()
    m.first = (V, V)
    prompt = torch.full((BATCH, 2), V)
    mask = None if hide is None else torch.tensor([[True, False]]).expand(BATCH, 2)
    opts = dict(tree=tree, num_draft=3, branch=2, depth=3, num_nodes=6)
    tokens, stats = speculative(m, d, prompt, length=LENGTH, seed=14, hide=mask, **opts)
    _check(m, tokens)
    assert stats.extra["drafter_prefill"] == (1 if hide else 2)


@pytest.mark.parametrize("init", ["target", "uniform"])
def test_sjd_lossless(markov, init):
    m, _ = markov
    tokens, stats = sjd(m, CLASSES, window=4, init=init, length=LENGTH, seed=13)
    _check(m, tokens)
    assert stats.step_compression > 1.0


@pytest.mark.parametrize(
    "ac,pd,bc,init",
    [
        (True, True, True, "target"),
        (True, True, True, "uniform"),
        (True, True, False, "target"),
        (False, True, True, "target"),
        (True, False, True, "target"),
    ],
    ids=["pac", "pac-uniform-init", "no-branch-continuation", "pd-only", "ac-only"],
)
def test_sjd_pac_lossless(markov, ac, pd, bc, init):
    """Every SJD-PAC variant, the branch continuation (a non-first leaf of the K-ary part accepted:
    the next window continues along the chain) exercised thousands of times."""
    m, _ = markov
    tokens, stats = sjd_pac(
        m,
        CLASSES_PAC,
        window=6,
        branch=2,
        depth=2,
        continuation=ac,
        proactive=pd,
        branch_continuation=bc,
        init=init,
        length=LENGTH,
        seed=14,
    )
    _check(m, tokens)
    assert stats.step_compression > 1.0
    if pd and bc:
        assert stats.extra["branch_continuations"] > 2000, stats.extra
    else:
        assert stats.extra["branch_continuations"] == 0


def test_sjd_pac_branch_continuation_without_ac_is_detected(markov, monkeypatch):
    """Negative control: the chain continued after a non-first leaf WITHOUT its continuation
    check (the chain tokens, drawn from the chain's draft rows, passed on as if they were draws
    of the chain's stale target rows) must fail the exactness test."""
    m, _ = markov
    real = specops.verify_jacobi

    def no_ac(target_probs, window_tokens, draft_probs, **kw):
        r = real(target_probs, window_tokens, draft_probs, **kw)
        if kw.get("tree") is None:  # the chain-mode continuation call
            keep = torch.where(window_tokens >= 0, window_tokens, r.next_window)
            r = r._replace(next_window=keep.int())
        return r

    monkeypatch.setattr(specops, "verify_jacobi", no_ac)
    tokens, st = sjd_pac(m, CLASSES_PAC, window=6, branch=2, depth=2, length=LENGTH, seed=14)
    assert st.extra["branch_continuations"] > 2000
    _check(m, tokens, expect_pass=False)


def test_sjd_pac_init_mask_and_errors(markov):
    m, _ = markov
    mask = torch.tensor([True, True, False, True])
    tokens, _ = sjd_pac(m, CLASSES[:50], window=6, branch=2, depth=2, init=mask, length=LENGTH)
    assert tokens.shape == (50, LENGTH)
    with pytest.raises(ValueError, match="init"):
        sjd_pac(m, CLASSES[:2], window=6, branch=2, depth=2, init="zeros", length=LENGTH)
    with pytest.raises(ValueError, match="init"):
        sjd(m, CLASSES[:2], window=4, init=torch.zeros(V, dtype=torch.bool), length=LENGTH)


def test_wrong_verification_is_detected(markov, monkeypatch):
    """Negative control: the target rows passed as the draft distribution (a plausible wiring
    bug: every draft passes u * p(x) < p(x)) emit the drafter's distribution; the same
    statistical test must reject it.  (Passing q = one-hot instead would NOT be a bug: verifying
    any draft as a deterministic one is lossless.)"""
    m, d = markov
    real = specops.verify_chain

    def wrong(target_probs, draft_tokens, draft_probs, **kw):
        return real(target_probs, draft_tokens, target_probs[:, :-1], **kw)

    monkeypatch.setattr(specops, "verify_chain", wrong)
    tokens, _ = speculative(m, d, CLASSES, tree=None, num_draft=3, length=LENGTH, seed=12)
    _check(m, tokens, expect_pass=False)


def test_greedy_speculative_equals_greedy_ar(markov):
    m, d = markov
    ref, _ = ar(m, CLASSES[:64], length=LENGTH, temperature=0)
    for kw in (
        dict(tree=None),
        dict(tree="dynamic", branch=2, depth=3, num_nodes=6),
        dict(tree="confidence", branch=3, depth=3, num_nodes=8, threshold=0.95),
    ):
        got, _ = speculative(m, d, CLASSES[:64], length=LENGTH, temperature=0, **kw)
        assert torch.equal(got, ref)


def test_confidence_tree_extremes(markov):
    """Spec-LLaVA's confidence tree: never confident (entropy threshold < 0) is the EAGLE-2 tree
    (same tokens, same draws); always confident (top-1 probability >= 0) offers one child per
    node, a chain of ``depth`` drafts whatever the budget; padding is never accepted."""
    m, d = markov
    kw = dict(branch=2, depth=3, num_nodes=6, length=LENGTH, seed=21)
    ref, st_ref = speculative(m, d, CLASSES[:300], tree="dynamic", **kw)
    got, st = speculative(m, d, CLASSES[:300], tree="confidence", threshold=-1.0, **kw)
    assert torch.equal(got, ref)
    assert st.extra["mean_tree_nodes"] == st_ref.extra["mean_tree_nodes"] == 6
    _, chain = speculative(
        m, d, CLASSES[:300], tree="confidence", confidence="top1", threshold=0.0, **kw
    )
    assert chain.extra["mean_tree_nodes"] == 4  # root + 3 drafts
    assert max(n for n, c in enumerate(chain.accept_hist) if c) <= 4
    with pytest.raises(ValueError, match="confidence"):
        speculative(m, d, CLASSES[:2], tree="confidence", confidence="margin", **kw)


class PositionalLM(MarkovLM):
    """p(x_t | x_{t-1}, t) proportional to P[t, :] * M[x_{t-1}, :]: strongly position-dependent,
    first order in the tokens.  After a non-first branch of SJD-PAC's tree is accepted, the
    chain below the first leaf is conditioned on the wrong branch only through its first token,
    and its rows are right for their positions: a misaligned continuation would be rejected."""

    def __init__(self, seed=0):
        super().__init__(seed)
        g = np.random.default_rng(seed + 1)
        self.pos = torch.tensor(g.dirichlet([0.15] * V, size=128)).float()
        self.mix = torch.tensor(g.uniform(0.2, 1.0, size=(V + 1, V))).float()

    def __call__(self, tokens, positions, cache, tree=None):
        b, n = tokens.shape
        kc, vc = cache.layer(0)
        stored = torch.zeros(b, n, 1, 64)
        stored[:, :, 0, 0] = tokens.float() + 1
        specops.append_kv(kc, vc, stored, stored, cache.seqlens)
        p = self.pos[positions.long() + 1] * self.mix[tokens.long().clamp(0, V)]
        return (p / p.sum(-1, keepdim=True)).log(), torch.zeros(b, n, HIDDEN)


def test_sjd_pac_branch_continuation_is_aligned():
    """Where the chain's stale rows are right for their positions, continuing along the chain
    after a non-first leaf beats fresh draws from the leaf's row (measured 5.22 vs 4.80)."""
    m = PositionalLM(seed=2)
    kw = dict(window=16, branch=2, depth=3, length=60, seed=0)
    _, on = sjd_pac(m, CLASSES[:500], **kw)
    _, off = sjd_pac(m, CLASSES[:500], branch_continuation=False, **kw)
    assert on.extra["branch_continuations"] > 300
    assert on.step_compression > off.step_compression + 0.2, (on, off)
