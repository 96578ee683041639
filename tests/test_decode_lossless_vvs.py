"""VVS and LANTERN in the decoding loop (specops.decode.vvs) on the exact Markov chain model
(tests/markov_chain_lm.py): lossless without skips, relaxation with delta 0 equal to exact
verification, skips that save passes, and the tree path similarity."""

from __future__ import annotations

import pytest
import torch
from markov_chain_lm import (
    CLASSES,
    LENGTH,
    CFGMarkovLM,
    V,
    _check,
    _filtered,
)

import specops
from specops import Tree
from specops.decode.speculative import speculative


@pytest.mark.parametrize("case", ["plain", "top_k", "cfg"])
def test_vvs_without_skips_is_lossless(markov, case):
    """VVS that never skips (threshold above any similarity) is EAGLE-2: lossless, also with
    top-k filtering and with CFG (whichever skip decision: over the tree's paths here)."""
    from specops.decode.vvs import vvs

    m, d = markov
    kw, ref = {}, m
    if case == "top_k":
        kw, ref = dict(top_k=2), _filtered(m, top_k=2)
    elif case == "cfg":
        m = CFGMarkovLM()
        kw, ref = dict(cfg_scale=m.scale), m.cfg_table()
    codebook = torch.randn(V, 3)
    tokens, stats = vvs(
        m, d, CLASSES, codebook, threshold=2.0, branch=2, depth=3, num_nodes=6, length=LENGTH,
        seed=15, **kw,
    )  # fmt: skip
    _check(ref, tokens)
    assert stats.extra["skipped_steps"] == 0


def test_vvs_interval_skips(markov):
    from specops.decode.vvs import vvs

    m, d = markov
    codebook = torch.randn(V, 3)
    tokens, stats = vvs(
        m,
        d,
        CLASSES[:200],
        codebook,
        schedule="interval",
        interval=2,
        branch=2,
        depth=3,
        num_nodes=6,
        length=LENGTH,
        seed=16,
    )
    assert tokens.shape == (200, LENGTH) and int(tokens.min()) >= 0
    assert stats.extra["skipped_steps"] > 0
    _, ref = speculative(
        m, d, CLASSES[:200], tree="dynamic", branch=2, depth=3, num_nodes=6, length=LENGTH, seed=16
    )
    assert stats.mean_passes < ref.mean_passes


# VVS as published (issue 12 item 4) -------------------------------------------------------------
VVS_TREE = dict(branch=2, depth=3, num_nodes=6, length=LENGTH)


def test_vvs_relax_delta0_equals_exact(markov):
    """LANTERN with delta 0 pools no positive mass: the same draws accept the same drafts, so the
    tokens equal exact verification token for token (with skips, so both step kinds run)."""
    from specops.decode.vvs import lantern, vvs

    m, d = markov
    codebook = torch.randn(V, 3, generator=torch.Generator().manual_seed(0))
    kw = dict(schedule="interval", interval=2, seed=17, **VVS_TREE)
    exact, s0 = vvs(m, d, CLASSES[:300], codebook, **kw)
    relaxed, s1 = vvs(m, d, CLASSES[:300], codebook, relax=lantern(codebook, 2, 0.0), **kw)
    assert torch.equal(exact, relaxed)
    assert s0.passes_per_request == s1.passes_per_request
    # a large delta pools the neighbours' mass: more drafts pass, fewer target passes
    _, s2 = vvs(m, d, CLASSES[:300], codebook, relax=lantern(codebook, 3, 1.0), **kw)
    assert s2.mean_accepted > s0.mean_accepted + 0.2, (s2.accept_hist, s0.accept_hist)


def test_vvs_relax_changes_the_distribution(markov):
    """relax is LOSSY: with a large delta (no skips) the output fails the exactness test that
    exact verification passes (test_vvs_without_skips_is_lossless)."""
    from specops.decode.vvs import lantern, vvs

    m, d = markov
    codebook = torch.randn(V, 3, generator=torch.Generator().manual_seed(0))
    tokens, _ = vvs(
        m, d, CLASSES, codebook, threshold=2.0, relax=lantern(codebook, 3, 1.0), seed=15, **VVS_TREE
    )
    _check(m, tokens, expect_pass=False)


def _brute_tree_similarity(tree, tokens, codebook, depth, alpha, stride):
    """Eq. 2 over the root-to-leaf paths, with Python loops (ragged paths: pairs reaching l)."""
    out = []
    for b in range(tokens.shape[0]):
        paths = [[int(tokens[b, n]) for n in row[1:] if n >= 0] for row in tree.paths()[b].tolist()]
        paths = [p for p in paths if p]
        unit = torch.nn.functional.normalize(codebook.double(), dim=-1)
        num = den = 0.0
        for li in range(0, depth, stride):
            at = [p[li] for p in paths if len(p) > li]
            if len(at) < 2:
                continue
            s = [
                float(unit[x] @ unit[y])
                for i, x in enumerate(at)
                for j, y in enumerate(at)
                if i != j
            ]
            num += alpha**li * sum(s) / len(s)
            den += alpha**li
        out.append(num / den if den else 1.0)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("stride", [1, 2])
def test_tree_path_similarity(stride):
    from specops.decode.vvs import tree_path_similarity

    g = torch.Generator().manual_seed(3)
    codebook = torch.randn(9, 4, generator=g)
    # a full binary tree: every path reaches every depth -> specops.path_similarity of the paths
    t = Tree.kary(2, 4).expand(3)
    tok = torch.randint(0, 9, (3, t.num_nodes), generator=g)
    got = tree_path_similarity(t, tok, codebook, 3, alpha=0.8, stride=stride)
    paths = tok.gather(1, t.paths()[..., 1:].reshape(3, -1).long()).reshape(3, -1, 3)
    ref = specops.path_similarity(paths, codebook, alpha=0.8, stride=stride)
    assert torch.allclose(got, ref, atol=1e-5)
    # ragged paths (leaves at depths 1, 2, 3), one row with a single path
    par = torch.tensor([[-1, 0, 0, 1, 1, 3, 0], [-1, 0, 1, 2, -1, -1, -1]], dtype=torch.int32)
    par[1, 4:] = torch.tensor([3, 4, 5], dtype=torch.int32)
    t = Tree(par)
    tok = torch.randint(0, 9, (2, 7), generator=g)
    got = tree_path_similarity(t, tok, codebook, 6, alpha=0.8, stride=stride)
    ref = _brute_tree_similarity(t, tok, codebook, 6, 0.8, stride)
    assert torch.allclose(got.double(), ref, atol=1e-5), (got, ref)
    assert got[1] == 1.0


@pytest.mark.parametrize("paths", ["tree", "frontier"])
def test_vvs_similarity_paths(markov, paths):
    """Both skip-decision variants skip some steps on the chain model (threshold below 1) and
    need fewer passes per request than EAGLE-2."""
    from specops.decode.vvs import vvs

    m, d = markov
    codebook = torch.randn(V, 3, generator=torch.Generator().manual_seed(1))
    _, st = vvs(m, d, CLASSES[:200], codebook, paths=paths, threshold=0.3, seed=18, **VVS_TREE)
    assert st.extra["skipped_steps"] > 0
    _, ref = speculative(m, d, CLASSES[:200], tree="dynamic", seed=18, **VVS_TREE)
    assert st.mean_passes < ref.mean_passes


def test_vvs_batched_passes_reported(markov):
    """Rows that disagree: a skipping request rides along in the batched pass when another
    verifies.  Stats says so: batched passes >= every request's charged passes, ride-along rows
    counted, batch step compression <= per-request; at batch 1 the two agree."""
    from specops.decode.vvs import vvs

    m, d = markov
    codebook = torch.randn(V, 3, generator=torch.Generator().manual_seed(1))
    _, st = vvs(m, d, CLASSES[:64], codebook, threshold=0.3, seed=19, **VVS_TREE)
    assert st.target_passes >= max(st.passes_per_request)
    assert st.extra["ride_along_rows"] > 0
    assert st.batch_step_compression < st.step_compression
    assert st.row()["batched_passes"] == st.target_passes
    _, one = vvs(m, d, CLASSES[:1], codebook, threshold=0.3, seed=19, **VVS_TREE)
    assert one.extra["ride_along_rows"] == 0
    assert one.target_passes == one.passes_per_request[0]
    assert one.batch_step_compression == pytest.approx(one.step_compression)


@pytest.mark.parametrize("tree", [None, "dynamic"], ids=["chain", "dynamic"])
def test_speculative_relax_delta0_equals_exact(markov, tree):
    """The LANTERN baseline: speculative(relax=...) with delta 0 is exact verification."""
    from specops.decode.vvs import lantern

    m, d = markov
    codebook = torch.randn(V, 3, generator=torch.Generator().manual_seed(0))
    kw = dict(tree=tree, num_draft=3, branch=2, depth=3, num_nodes=6, length=LENGTH, seed=20)
    exact, _ = speculative(m, d, CLASSES[:300], **kw)
    relaxed, _ = speculative(m, d, CLASSES[:300], relax=lantern(codebook, 2, 0.0), **kw)
    assert torch.equal(exact, relaxed)
