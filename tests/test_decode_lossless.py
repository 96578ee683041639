"""End-to-end losslessness of the decoding loop (specops.decode) on a model whose output
distribution is known exactly: a second-order Markov chain over a few tokens, wrapped in the
model protocol.  Its "KV cache" stores the token ids (so a wrong ``commit_kv`` or a wrong tree
mask changes the distribution), and the parent of every tree node is read from the mask bits.

Every sampling method must reproduce the chain's exact joint distribution of every three
consecutive tokens (chi-square, fixed seeds); a deliberately wrong verification (sampled
drafts verified as if they were deterministic) must fail the same test.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import chi2_pvalue

import specops
from specops import Tree
from specops.decode.ar import ar
from specops.decode.sjd import sjd
from specops.decode.sjd_pac import sjd_pac
from specops.decode.speculative import speculative
from specops.tree import unpack_bits

V = 4  # states; token V is the prompt
LENGTH = 7
BATCH = 2000
HIDDEN = 8


class _Cache:
    def __init__(self, batch, capacity, device="cpu"):
        # token id + 1 stored in element 0 of a one-head, 64-wide "key" (0 = empty)
        self.kv = torch.zeros(1, 2, batch, capacity, 1, 64, device=device)
        self.seqlens = torch.zeros(batch, dtype=torch.int32, device=device)

    def layer(self, i):
        return self.kv[i, 0], self.kv[i, 1]


def _parents_from_bits(bits, n):
    """parent of node n = its deepest proper ancestor (-1 for the tree root)."""
    anc = unpack_bits(bits, n)  # [B, N, N]
    ids = torch.arange(n)
    proper = anc & (ids[None, None, :] != ids[None, :, None])
    return torch.where(proper, ids, -1).amax(-1)


class MarkovLM:
    """x_{t+1} ~ T[x_{t-1}, x_t]: a second-order chain; x_{-1} of the first token = 'start'."""

    def __init__(self, seed=0, concentration=0.6):
        g = np.random.default_rng(seed)
        # prev in [0, V] (V = prompt) plus V + 1 = start; cur in [0, V]
        self.table = torch.tensor(g.dirichlet([concentration] * V, size=(V + 2, V + 1)))
        self.cfg = SimpleNamespace(vocab=V, null_class=None, grid=None)

    def new_cache(self, batch, capacity, device="cpu"):
        return _Cache(batch, capacity, device)

    def __call__(self, tokens, positions, cache, tree=None):
        b, n = tokens.shape
        if tree is None:
            par = torch.arange(-1, n - 1).expand(b, n)
        else:
            bits = tree.mask_bits if isinstance(tree, Tree) else tree
            par = _parents_from_bits(bits.expand(b, -1, -1), n)
        kc, vc = cache.layer(0)
        stored = torch.zeros(b, n, 1, 64)
        stored[:, :, 0, 0] = tokens.float() + 1
        specops.append_kv(kc, vc, stored, stored, cache.seqlens)
        last = kc[torch.arange(b), (cache.seqlens.long() - 1).clamp(min=0), 0, 0].long() - 1
        last = torch.where(cache.seqlens > 0, last, V + 1)  # nothing before: 'start'
        prev = torch.where(par >= 0, tokens.gather(1, par.clamp(min=0)), last[:, None])
        cur = tokens.long().clamp(0, V)  # (a CFG null prompt reads as the prompt, index V)
        probs = self._rows(kc, b)[torch.arange(b)[:, None], prev.long(), cur]
        hidden = torch.nn.functional.one_hot(cur, HIDDEN).float()
        return probs.log().float(), hidden

    def _rows(self, kc, b):
        """The transition table of every cache row [B, V + 2, V + 1, V]."""
        return self.table.expand(b, -1, -1, -1)

    def joint(self, start: int) -> np.ndarray:
        """Exact P(x_start, x_start+1, x_start+2) (tokens 1-based, x_0 = prompt) [V, V, V]."""
        t = self.table.numpy()
        pair = np.zeros((V + 2, V + 1))  # distribution of (x_{i-1}, x_i)
        pair[getattr(self, "first", (V + 1, V))] = 1.0  # (start, prompt)
        for _ in range(start - 1):
            new = np.zeros_like(pair)
            for a, c in itertools.product(range(V + 2), range(V + 1)):
                if pair[a, c] > 0:
                    new[c, :V] += pair[a, c] * t[a, c]
            pair = new
        out = np.zeros((V, V, V))
        for a, c in itertools.product(range(V + 2), range(V + 1)):
            if pair[a, c] == 0:
                continue
            for x, y, z in itertools.product(range(V), repeat=3):
                out[x, y, z] += pair[a, c] * t[a, c, x] * t[c, x, y] * t[x, y, z]
        return out


class MarkovDrafter:
    """A first-order chain Q[x] (deliberately different from the target) in the drafter
    protocol; features are ignored."""

    def __init__(self, seed=1):
        g = np.random.default_rng(seed)
        self.table = torch.tensor(g.dirichlet([0.8] * V, size=V + 1)).float()

    def new_cache(self, batch, capacity, device="cpu"):
        return _Cache(batch, capacity, device)

    def __call__(self, tokens, features, step, positions, cache, tree=None):
        b, m = tokens.shape
        return self.table[tokens.long().clamp(0, V)].log(), torch.zeros(b, m, HIDDEN)

    def extend(self, tokens, features, step, positions, cache, bits, n_old):
        return self(tokens, features, step, positions, cache)


def _counts(tokens: torch.Tensor, start: int) -> np.ndarray:
    x = tokens[:, start - 1 : start + 2].long().numpy()
    idx = x[:, 0] * V * V + x[:, 1] * V + x[:, 2]
    return np.bincount(idx, minlength=V**3)


def _check(model, tokens, *, expect_pass=True):
    assert tokens.shape[1] == LENGTH
    assert int(tokens.min()) >= 0 and int(tokens.max()) < V
    pvals = [chi2_pvalue(_counts(tokens, s), model.joint(s)) for s in range(1, LENGTH - 1)]
    if expect_pass:
        assert min(pvals) > 1e-3, pvals
    else:
        assert min(pvals) < 1e-6, pvals
    return pvals


@pytest.fixture(scope="module")
def markov():
    return MarkovLM(), MarkovDrafter()


CLASSES = torch.zeros(BATCH, dtype=torch.long)
# SJD-PAC's branch continuation biases only some windows slightly when wired wrong: its test and
# negative control use 4x the samples
CLASSES_PAC = torch.zeros(4 * BATCH, dtype=torch.long)


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


# top-k / top-p sampling: every lossless mode samples the filtered chain ------------------------
def _filtered(m, **sampling):
    """The chain whose rows are the target's rows after top-k / top-p filtering (the exact
    distribution a lossless decoder with these settings must reproduce)."""
    import copy

    f = copy.copy(m)
    f.table = specops.probs_from_logits(m.table.log().float(), **sampling).double()
    return f


_FILTERED_MODES = {
    "ar": lambda m, d, **kw: ar(m, CLASSES, **kw),
    "chain": lambda m, d, **kw: speculative(m, d, CLASSES, tree=None, num_draft=3, **kw),
    "dynamic": lambda m, d, **kw: speculative(
        m, d, CLASSES, tree="dynamic", branch=2, depth=3, num_nodes=6, **kw
    ),
    "confidence": lambda m, d, **kw: speculative(
        m, d, CLASSES, tree="confidence", branch=3, depth=3, num_nodes=8, threshold=0.95, **kw
    ),
    "static-wor": lambda m, d, **kw: speculative(m, d, CLASSES, tree=Tree.kary(2, 3), **kw),
    "sjd": lambda m, d, **kw: sjd(m, CLASSES, window=4, **kw),
    "sjd-pac": lambda m, d, **kw: sjd_pac(m, CLASSES, window=6, branch=2, depth=2, **kw),
}


@pytest.mark.parametrize("sampling", [dict(top_k=2), dict(top_p=0.7)], ids=["top_k", "top_p"])
@pytest.mark.parametrize("mode", list(_FILTERED_MODES))
def test_filtered_sampling_lossless(markov, mode, sampling):
    m, d = markov
    tokens, _ = _FILTERED_MODES[mode](m, d, length=LENGTH, seed=22, **sampling)
    _check(_filtered(m, **sampling), tokens)


def test_filtered_sampling_detects_unfiltered(markov):
    """Negative control: output of the unfiltered chain fails the filtered chain's test."""
    m, _ = markov
    tokens, _ = ar(m, CLASSES, length=LENGTH, seed=22)
    _check(_filtered(m, top_k=2), tokens, expect_pass=False)


# classifier-free guidance: cond + uncond rows share the drafts --------------------------------
class CFGMarkovLM(MarkovLM):
    """MarkovLM whose unconditional rows (prompt = the null class V + 1) follow another chain
    table_u; with guidance scale s the decoders sample the chain with rows
    softmax(log table_u + s (log table - log table_u)) (``cfg_table``)."""

    def __init__(self, seed=0, scale=1.5):
        super().__init__(seed)
        g = np.random.default_rng(seed + 100)
        self.table_u = torch.tensor(g.dirichlet([0.6] * V, size=(V + 2, V + 1)))
        self.cfg = SimpleNamespace(vocab=V, null_class=V + 1, grid=None)
        self.scale = scale

    def _rows(self, kc, b):
        uncond = kc[:b, 0, 0, 0] == self.cfg.null_class + 1  # the row's first cached token
        t = torch.where(uncond[:, None, None, None], self.table_u[None], self.table[None])
        return t

    def cfg_table(self):
        f = MarkovLM.__new__(MarkovLM)
        f.__dict__.update(self.__dict__)
        f.table = specops.probs_from_logits(
            self.table.log().float(), cfg_scale=self.scale, uncond_logits=self.table_u.log().float()
        ).double()
        return f


_CFG_MODES = {
    k: _FILTERED_MODES[k] for k in ("ar", "chain", "dynamic", "confidence", "sjd", "sjd-pac")
}


@pytest.mark.parametrize("mode", list(_CFG_MODES))
def test_cfg_lossless(markov, mode):
    """Every lossless mode under CFG samples the guided chain (cond and uncond rows of the
    target's cache read the same drafts; the drafter sees the cond rows only)."""
    _, d = markov
    m = CFGMarkovLM()
    tokens, _ = _CFG_MODES[mode](m, d, length=LENGTH, seed=23, cfg_scale=m.scale)
    _check(m.cfg_table(), tokens)


def test_cfg_detects_unguided(markov):
    """Negative controls: the unguided cond chain fails the guided chain's test, and so does
    a run whose uncond rows were never read (cfg_scale 1: logits = cond)."""
    m = CFGMarkovLM()
    tokens, _ = ar(m, CLASSES, length=LENGTH, seed=23)
    _check(m.cfg_table(), tokens, expect_pass=False)
    tokens, _ = ar(m, CLASSES, length=LENGTH, seed=23, cfg_scale=1.0)
    _check(m.cfg_table(), tokens, expect_pass=False)


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
