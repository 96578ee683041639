"""The reference verification ops against their contract (DESIGN.md, reference/verify.py).

Statistical tests use fixed seeds and chi-square goodness of fit (p > 1e-3 to pass); each kind of
check is paired with a negative control: a deliberately broken variant of one building block
(swapped in with monkeypatch) must FAIL the same check, so the checks have power."""

from __future__ import annotations

import pytest
import torch
from helpers import chi2_pvalue, random_probs
from helpers import gen as _gen

from specops import Tree
from specops.reference import verify as rv
from specops.reference.philox import row_uniforms

PASS = 1e-3


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _draw(rows: torch.Tensor, gen, n=1, replacement=True) -> torch.Tensor:
    """n draws per row of rows [B, V] (torch's sampler: independent of the code under test)."""
    return torch.multinomial(rows.double(), n, replacement=replacement, generator=gen)


class Markov:
    """A fixed target process over positions 0, 1, 2, ...: P(y_0) = p0,
    P(y_d | y_{d-1}) = T[d][y_{d-1}]; and a draft process of the same shape (q0, Q)."""

    def __init__(self, v, depth, gen, *, zero_frac=0.15):
        self.v = v
        self.p0 = random_probs(v, generator=gen, sharpness=1.5, zero_frac=zero_frac)
        self.T = [None] + [
            random_probs(v, v, generator=gen, sharpness=1.5, zero_frac=zero_frac)
            for _ in range(depth)
        ]
        self.q0 = random_probs(v, generator=gen, sharpness=1.5)
        self.Q = [None] + [random_probs(v, v, generator=gen, sharpness=1.5) for _ in range(depth)]

    def target_row(self, d, prev):  # dist of position d given the token at d - 1 ([B] ids)
        return self.p0.expand(prev.shape[0], -1) if d == 0 else self.T[d][prev]

    def draft_row(self, d, prev):
        return self.q0.expand(prev.shape[0], -1) if d == 0 else self.Q[d][prev]

    def joint(self, length):
        j = self.p0
        for d in range(1, length):
            j = j[..., None] * self.T[d][(None,) * (d - 1)]
        return j

    def complete(self, tokens, emitted, length, gen):
        """Sequences of ``length``: the emitted tokens, then the true conditionals (what the next
        decoding steps would produce).  tokens [B, W], emitted [B] >= 1."""
        b = tokens.shape[0]
        out = torch.full((b, length), -1, dtype=torch.long)
        w = min(length, tokens.shape[1])
        out[:, :w] = tokens[:, :w].long()
        for d in range(length):
            fill = emitted <= d
            if d == 0:
                assert not fill.any()
                continue
            new = _draw(self.T[d][out[:, d - 1].clamp(min=0)], gen)[:, 0]
            out[:, d] = torch.where(fill, new, out[:, d])
        return out


def random_parents(b, n, gen, window=None):
    """[b, n] random topological parent arrays (parent within ``window`` nodes before, if set)."""
    rows = []
    for _ in range(b):
        par = [-1]
        for i in range(1, n):
            lo = 0 if window is None else max(0, i - window)
            par.append(int(torch.randint(lo, i, (1,), generator=gen)))
        rows.append(par)
    return torch.tensor(rows)


def joint_pvalue(seqs: torch.Tensor, m: Markov) -> float:
    length = seqs.shape[1]
    idx = torch.zeros(seqs.shape[0], dtype=torch.long)
    for d in range(length):
        idx = idx * m.v + seqs[:, d]
    counts = torch.bincount(idx, minlength=m.v**length)
    return chi2_pvalue(counts.numpy(), m.joint(length).flatten().numpy())


def grouped_pvalue(groups: torch.Tensor, tokens: torch.Tensor, probs: torch.Tensor, ngroups: int):
    """Goodness of fit of tokens [M] against their own rows probs [M, V], pooled per group:
    cell (g, v) observed = #(group g, token v), expected = sum of probs[., v] over group g."""
    v = probs.shape[-1]
    cell = groups * v + tokens.long()
    counts = torch.bincount(cell, minlength=ngroups * v).double()
    exp = torch.zeros(ngroups * v, dtype=torch.float64)
    exp.index_add_(0, (groups[:, None] * v + torch.arange(v)).flatten(), probs.double().flatten())
    return chi2_pvalue(counts.numpy(), exp.numpy())


# --------------------------------------------------------------------------------------------
# chain
# --------------------------------------------------------------------------------------------
def chain_inputs(b, gen, *, deterministic=False, k=2, v=4):
    m = Markov(v, k + 1, gen)
    rows0 = torch.zeros(b, dtype=torch.long)
    x, tp, dp = [], [], []
    prev = rows0
    for i in range(k):
        q = m.draft_row(i, prev)
        xi = _draw(q, gen)[:, 0]  # deterministic: the same tokens, verified with q = one-hot
        tp.append(m.target_row(i, prev))
        dp.append(q)
        x.append(xi)
        prev = xi
    tp.append(m.target_row(k, prev))
    draft = None if deterministic else torch.stack(dp, 1)
    return m, torch.stack(tp, 1), torch.stack(x, 1), draft


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


# --------------------------------------------------------------------------------------------
# trees
# --------------------------------------------------------------------------------------------
TREE_PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4]  # root: 3 children; node 1: 2; node 2: 1; node 4: 1


def tree_inputs(b, gen, parents, *, mode, v=4, zero_frac=0.15):
    """Drafts for every node: the children of node n are drawn from the draft row of n (i.i.d.,
    sequentially without replacement, or arbitrary fixed tokens when mode == 'det'); target
    row n = the Markov conditional given node n's token."""
    t = Tree.from_parents(parents)
    depth = t.depth[0].tolist()
    n = len(parents)
    m = Markov(v, max(depth) + 1, gen, zero_frac=zero_frac)
    tok = torch.zeros(b, n, dtype=torch.long)
    tp = torch.zeros(b, n, v)
    dp = torch.zeros(b, n, v)
    for node in range(n):
        prev = tok[:, node]
        tp[:, node] = m.target_row(depth[node], prev)
        dp[:, node] = m.draft_row(depth[node], prev)
        kids = [c for c in range(n) if parents[c] == node]
        if not kids:
            continue
        # 'det' drafts are drawn like 'iid' ones but verified as fixed tokens (q = one-hot):
        # lossless for any tokens; non-uniform tokens give the negative control power
        draws = _draw(dp[:, node], gen, len(kids), replacement=(mode != "wor"))
        for j, c in enumerate(kids):
            tok[:, c] = draws[:, j]
    return m, t, tp, tok, (None if mode == "det" else dp)


def tree_joint_pvalue(mode, *, seed=0, b=20000, wor=None):
    gen = _gen(200 + seed)
    m, t, tp, tok, dp = tree_inputs(b, gen, TREE_PARENTS, mode=mode)
    wor = (mode == "wor") if wor is None else wor
    r = rv.verify_tree(tp, t, tok, dp, without_replacement=wor, seed=seed, offset=3)
    seqs = m.complete(r.tokens, r.num_accepted.long() + 1, 3, gen)
    return joint_pvalue(seqs, m)


@pytest.mark.parametrize("mode,wor", [("iid", False), ("wor", True), ("det", False), ("det", True)])
def test_tree_is_lossless(mode, wor):
    assert tree_joint_pvalue(mode, wor=wor) > PASS


def test_tree_negative_control_residual_without_q(monkeypatch):
    monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    assert tree_joint_pvalue("iid") < PASS


def test_tree_negative_control_det_residual_keeps_rejected_token(monkeypatch):
    # deterministic drafts must zero p(x) of a rejected child (q = one-hot)
    monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    assert tree_joint_pvalue("det") < PASS


def test_tree_negative_control_no_renormalisation(monkeypatch):
    # without replacement, the next sibling's q must be renormalised after dropping x
    def drop_only(q, x):
        return torch.where(torch.arange(q.shape[-1])[None, :] == x[:, None], 0.0, q)

    monkeypatch.setattr(rv, "_drop_and_renormalise", drop_only)
    assert tree_joint_pvalue("wor") < PASS


def test_tree_negative_control_wor_drafts_verified_as_iid():
    # siblings drawn without replacement but verified as i.i.d. draws: biased
    gen = _gen(200)
    m, t, tp, tok, dp = tree_inputs(20000, gen, TREE_PARENTS, mode="wor")
    r = rv.verify_tree(tp, t, tok, dp, without_replacement=False, seed=0, offset=3)
    seqs = m.complete(r.tokens, r.num_accepted.long() + 1, 3, gen)
    assert joint_pvalue(seqs, m) < PASS


def _greedy_walk(p, parents, tok):
    n = len(parents)
    cur, path, out = 0, [0], []
    while True:
        g = int(p[cur].argmax())
        kids = [c for c in range(n) if parents[c] == cur and int(tok[c]) != -1]
        hit = [c for c in kids if int(tok[c]) == g]
        if not hit:
            return path, out + [g]
        cur = hit[0]
        path.append(cur)
        out.append(g)


def test_tree_greedy_matches_argmax_decoding():
    gen = _gen(7)
    b, n, v = 120, 12, 6
    parents = random_parents(b, n, gen)
    t = Tree.from_parents(parents)
    p = random_probs(b, n, v, generator=gen)
    am = p.argmax(-1)
    tok = torch.randint(0, v, (b, n), generator=gen)
    tok = torch.where(
        torch.rand(b, n, generator=gen) < 0.5, am.gather(1, parents.clamp(min=0)), tok
    )
    tok[:, 5] = -1  # a padding node
    r = rv.verify_tree(p, t, tok, None, greedy=True)
    w = r.path.shape[1]
    assert w == t.max_depth() + 1
    for i in range(b):
        path, out = _greedy_walk(p[i], parents[i].tolist(), tok[i])
        assert r.path[i].tolist() == path + [-1] * (w - len(path))
        assert r.tokens[i].tolist() == out + [-1] * (w - len(out))
        assert int(r.num_accepted[i]) == len(path) - 1


def test_tree_one_hot_targets_are_exact(device):
    gen = _gen(8)
    b, v = 400, 7
    parents = TREE_PARENTS
    n = len(parents)
    hot = torch.randint(0, v, (b, n), generator=gen)
    p = torch.nn.functional.one_hot(hot, v).float()
    tok = torch.randint(0, v, (b, n), generator=gen)
    par = torch.tensor(parents).clamp(min=0)
    tok = torch.where(torch.rand(b, n, generator=gen) < 0.6, hot[:, par], tok)
    q = random_probs(b, n, v, generator=gen)
    t = Tree.from_parents(parents).to(device)
    p, tok, q = p.to(device), tok.to(device), q.to(device)
    want = rv.verify_tree(p, t, tok, None, greedy=True)
    for seed in range(3):
        for dp in (q, None):
            for wor in (False, True):
                got = rv.verify_tree(p, t, tok, dp, seed=seed, without_replacement=wor)
                assert torch.equal(got.tokens, want.tokens) and torch.equal(got.path, want.path)


@pytest.mark.parametrize("relaxed", [False, True])
def test_tree_on_a_chain_equals_verify_chain(relaxed):
    gen = _gen(9)
    b, k, v = 2000, 5, 8
    p = random_probs(b, k + 1, v, generator=gen, zero_frac=0.2)
    q = random_probs(b, k, v, generator=gen)
    x = _draw(q.reshape(-1, v), gen).reshape(b, k)
    relax = rv.Relaxation(torch.randint(-1, v, (v, 3), generator=gen), 0.2) if relaxed else None
    seeds = torch.randint(0, 1000, (b,), generator=gen)
    tok = torch.cat([torch.full((b, 1), 77), x], 1)
    qt = torch.cat([q, torch.rand(b, 1, v, generator=gen)], 1)  # row K: never used
    for dp, dpt in ((q, qt), (None, None)):
        c = rv.verify_chain(p, x, dp, seed=seeds, offset=5, relax=relax)
        t = rv.verify_tree(p, Tree.chain(k + 1), tok, dpt, seed=seeds, offset=5, relax=relax)
        assert torch.equal(c.tokens, t.tokens) and torch.equal(c.num_accepted, t.num_accepted)
        acc = torch.arange(k)[None, :] < c.num_accepted[:, None]
        assert torch.equal(t.path[:, 1:] >= 0, acc)


def test_tree_path_and_tokens_consistent(device):
    gen = _gen(10)
    b, n, v = 600, 16, 5
    parents = random_parents(b, n, gen, window=3)
    t = Tree.from_parents(parents).to(device)
    p = random_probs(b, n, v, generator=gen).to(device)
    q = random_probs(b, n, v, generator=gen).to(device)
    tok = torch.randint(-1, v, (b, n), generator=gen).to(device)
    r = rv.verify_tree(p, t, tok, q, seed=1, without_replacement=True)
    a = r.num_accepted.long()
    w = r.path.shape[1]
    col = torch.arange(w, device=device)
    assert (r.path[:, 0] == 0).all()
    assert ((r.path >= 0) == (col <= a[:, None])).all()
    assert ((r.tokens >= 0) == (col <= a[:, None])).all()
    par = t.parents.long()
    pth = r.path.long()
    for i in range(1, w):
        ok = col[i] <= a
        node = pth[:, i].clamp(min=0)
        assert torch.where(ok, par.gather(1, node[:, None])[:, 0] == pth[:, i - 1], True).all()
        assert torch.where(ok, tok.gather(1, node[:, None])[:, 0] == r.tokens[:, i - 1], True).all()
    # padding nodes (-1) are never on the path
    onpath = tok.gather(1, pth.clamp(min=0))
    assert torch.where((col >= 1) & (col <= a[:, None]), onpath != -1, True).all()


def test_tree_batch_one_tree_broadcasts_and_uniforms():
    gen = _gen(11)
    b, v = 50, 6
    n = len(TREE_PARENTS)
    p = random_probs(b, n, v, generator=gen)
    q = random_probs(b, n, v, generator=gen)
    tok = torch.randint(0, v, (b, n), generator=gen)
    t1 = Tree.from_parents(TREE_PARENTS)
    tb = Tree.from_parents(torch.tensor(TREE_PARENTS).expand(b, -1))
    r1 = rv.verify_tree(p, t1, tok, q, seed=4)
    rb = rv.verify_tree(p, tb, tok, q, seed=4)
    ru = rv.verify_tree(p, t1, tok, q, uniforms=row_uniforms(4, 0, b, n))
    assert torch.equal(r1.tokens, rb.tokens) and torch.equal(r1.tokens, ru.tokens)


def test_tree_root_only():
    p = random_probs(7, 1, 5, generator=_gen(12))
    r = rv.verify_tree(p, Tree.chain(1), torch.zeros(7, 1, dtype=torch.long), None, seed=1)
    assert r.path.tolist() == [[0]] * 7 and (r.num_accepted == 0).all()
    assert (r.tokens >= 0).all()


# --------------------------------------------------------------------------------------------
# Jacobi
# --------------------------------------------------------------------------------------------
def jacobi_chain_inputs(b, gen, *, L=4, v=6, groups=3, one_hot=False):
    """Slot i of row b uses the (p, q) pair of group b % groups (fixed per slot), so the
    per-(slot, group) chi-square check has power; window tokens are drawn from q."""
    P = random_probs(groups, L, v, generator=gen, sharpness=1.5, zero_frac=0.2)
    Q = random_probs(groups, L, v, generator=gen, sharpness=1.5)
    g = torch.arange(b) % groups
    p, q = P[g], Q[g]
    x = _draw(q.reshape(-1, v), gen).reshape(b, L)
    if one_hot:
        x = torch.randint(0, v, (b, L), generator=gen)
    return p, x, (None if one_hot else q), g


def _slot_groups(g, L, groups):
    return (torch.arange(L)[None, :] * groups + g[:, None]).flatten()


def jacobi_chain_pvalue(cont, *, one_hot=False, b=10000, L=4, groups=3):
    gen = _gen(300)
    p, x, q, g = jacobi_chain_inputs(b, gen, L=L, groups=groups, one_hot=one_hot)
    r = rv.verify_jacobi(p, x, q, continue_after_reject=cont, seed=3, offset=1)
    v = p.shape[-1]
    grp = _slot_groups(g, L, groups)
    return grouped_pvalue(grp, r.next_window.flatten(), p.reshape(-1, v), L * groups)


@pytest.mark.parametrize("cont,one_hot", [(True, False), (False, False), (True, True)])
def test_jacobi_chain_every_slot_is_a_sample_of_its_p(cont, one_hot):
    assert jacobi_chain_pvalue(cont, one_hot=one_hot) > PASS


def test_jacobi_chain_negative_control(monkeypatch):
    monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    assert jacobi_chain_pvalue(True) < PASS


@pytest.mark.parametrize("cont", [True, False])
def test_jacobi_chain_structure(cont):
    gen = _gen(301)
    b, L, v = 3000, 6, 5
    p, x, q, _ = jacobi_chain_inputs(b, gen, L=L, v=v)
    x[:7, 2] = -1  # no draft: always resampled
    r = rv.verify_jacobi(p, x, q, continue_after_reject=cont, num_candidates=3, seed=8)
    a = r.num_accepted.long()
    pos = torch.arange(L)
    assert (r.next_window >= 0).all() and r.path is None
    assert (r.first_reject == torch.where(a < L, a, -1)).all()
    assert (a[:7] <= 2).all()
    assert torch.where(pos < a[:, None], r.next_window == x, True).all()
    # candidates only after the first rejection
    c = r.candidates
    assert c.shape == (b, L, 3) and c.dtype == torch.int32
    after = (r.first_reject[:, None] >= 0) & (pos > r.first_reject[:, None])
    assert ((c[..., 0] >= 0) == after).all()
    pos_mass = (p > 0).sum(-1)  # candidates need positive mass; -1 where fewer than 3
    valid = c >= 0
    assert (valid.sum(-1) == torch.where(after, pos_mass.clamp(max=3), 0)).all()
    assert (p.gather(-1, c.long().clamp(min=0)) > 0)[valid].all()
    s = torch.sort(torch.where(valid, c, -1 - torch.arange(3)), -1).values
    assert (s[..., 1:] != s[..., :-1]).all()  # distinct
    # and with num_candidates = 1 the rest of the result does not change
    r1 = rv.verify_jacobi(p, x, q, continue_after_reject=cont, seed=8)
    assert torch.equal(r1.next_window, r.next_window) and r1.candidates is None


def test_jacobi_candidates_first_draw_is_a_sample_of_p():
    gen = _gen(302)
    b, L, groups = 10000, 4, 3
    p, x, q, g = jacobi_chain_inputs(b, gen, L=L, groups=groups)
    r = rv.verify_jacobi(p, x, q, num_candidates=2, seed=5)
    sel = (r.candidates[..., 0] >= 0).flatten()
    grp = _slot_groups(g, L, groups)
    v = p.shape[-1]
    c0 = r.candidates[..., 0].flatten()
    pv = grouped_pvalue(grp[sel], c0[sel], p.reshape(-1, v)[sel], L * groups)
    assert pv > PASS


def test_jacobi_explicit_uniforms_known_answer():
    p = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.6, 0.2, 0.2]]])
    q = torch.tensor([[[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]]])
    x = torch.tensor([[1, 2, 2]])
    # slot 0: u*0.5 < 0.3 iff u < 0.6; slot 1: p = q, always; slot 2: u*0.6 < 0.2 iff u < 1/3
    u = torch.tensor([[0.7, 0.99, 0.5, 0.1, 0.15, 0.9]])
    r = rv.verify_jacobi(p, x, q, uniforms=u)
    # slot 0 -> residual (0.3, 0, 0) = token 0; slot 2 -> residual (0.4, 0, 0) = token 0
    assert r.next_window.tolist() == [[0, 2, 0]] and r.num_accepted.tolist() == [0]
    assert r.first_reject.tolist() == [0]
    r = rv.verify_jacobi(p, x, q, uniforms=u, continue_after_reject=False)
    # slots 1, 2 sampled afresh from p with u = 0.15, 0.9: tokens 1, 2
    assert r.next_window.tolist() == [[0, 1, 2]]


KARY = (2, 3, 9)  # Tree.kary_chain: 7-node binary tree of depth 3, first path extended to 9


def jacobi_tree_inputs(b, gen, v=4):
    parents = Tree.kary_chain(*KARY).parents[0].tolist()
    m, t, tp, tok, dp = tree_inputs(b, gen, parents, mode="wor", v=v)
    return m, Tree.kary_chain(*KARY), tp, tok, dp


def _line(t, path, a, rejected, L):
    """l_d for d = a+1 ... (first-child line below the last accepted node), -1 elsewhere."""
    b = path.shape[0]
    fc = t.first_child.expand(b, -1).long()
    rows = torch.arange(b)
    line = torch.full((b, L), -1, dtype=torch.long)
    prev = fc[rows, path.long()[rows, a]]
    d = a + 1
    alive = rejected & (prev >= 0) & (d < L)
    for _ in range(L):
        line[rows[alive], d[alive]] = prev[alive]
        nxt = fc[rows, prev.clamp(min=0)]
        alive = alive & (nxt >= 0)
        prev = torch.where(alive, nxt, prev)
        d = d + alive.long()
        alive = alive & (d < L)
    return line


@pytest.mark.parametrize("cont", [True, False])
def test_jacobi_tree_mode(cont):
    gen = _gen(400)
    b = 15000
    m, t, tp, tok, dp = jacobi_tree_inputs(b, gen)
    L, v = tp.shape[1], tp.shape[2]
    k = 2 if cont else 1  # candidates do not depend on cont: check them once
    r = rv.verify_jacobi(
        tp, tok, dp, tree=t, continue_after_reject=cont, num_candidates=k, seed=6, offset=2
    )
    # 1. the accepted prefix is verify_tree without replacement, with the same draws (t: from
    # the unnormalised residual, equal but at rounding ties, none among these inputs)
    vt = rv.verify_tree(tp, t, tok, dp, without_replacement=True, seed=6, offset=2)
    w = vt.path.shape[1]
    assert torch.equal(r.path[:, :w], vt.path) and (r.path[:, w:] == -1).all()
    assert torch.equal(r.num_accepted, vt.num_accepted)
    a = r.num_accepted.long()
    pos = torch.arange(L)
    assert torch.equal(torch.where(pos[:w] <= a[:, None], r.next_window[:, :w], -1), vt.tokens)
    # 2. lossless: the committed tokens follow the target process
    seqs = m.complete(r.next_window, a + 1, 3, gen)
    assert joint_pvalue(seqs, m) > PASS
    # 3. continuation: every later position holds a sample of its stale target row l_d
    rej = r.first_reject >= 0
    assert (r.first_reject == torch.where(rej, a, -1)).all()
    line = _line(t, r.path, a, rej, L)
    nodes_here = line >= 0
    has_tok = r.next_window >= 0
    child = t.first_child[0].long()[line.clamp(min=0)]
    assert torch.equal(has_tok & (pos > a[:, None]), nodes_here & (child >= 0))
    sel = (has_tok & (pos > a[:, None])).flatten()
    assert sel.sum() > 5000
    rows_p = tp[torch.arange(b)[:, None], line.clamp(min=0)].reshape(-1, v)
    ctx = tok.gather(1, line.clamp(min=0)).flatten()
    grp = pos.expand(b, L).flatten() * v + ctx  # the stale row is T[d][token of l_d]
    pv = grouped_pvalue(grp[sel], r.next_window.flatten()[sel], rows_p[sel], L * v)
    assert pv > PASS
    # 4. candidates after the first rejection, from the same stale rows
    if not cont:
        assert r.candidates is None
        return
    c0 = r.candidates[..., 0].flatten()
    csel = c0 >= 0
    assert torch.equal(csel, nodes_here.flatten() & (rows_p > 0).any(-1))
    assert grouped_pvalue(grp[csel], c0[csel], rows_p[csel], L * v) > PASS


def test_jacobi_tree_negative_control(monkeypatch):
    gen = _gen(400)
    b = 15000
    m, t, tp, tok, dp = jacobi_tree_inputs(b, gen)
    monkeypatch.setattr(rv, "_drop_and_renormalise", lambda q, x: q)  # with replacement
    r = rv.verify_jacobi(tp, tok, dp, tree=t, seed=6, offset=2)
    seqs = m.complete(r.next_window, r.num_accepted.long() + 1, 3, gen)
    assert joint_pvalue(seqs, m) < PASS


# --------------------------------------------------------------------------------------------
# path acceptance (VSD)
# --------------------------------------------------------------------------------------------
def test_path_acceptance_matches_brute_force():
    gen = _gen(13)
    b, n, v = 6, 11, 5
    parents = random_parents(b, n, gen)
    t = Tree.from_parents(parents)
    p = random_probs(b, n, v, generator=gen, zero_frac=0.2)
    q = random_probs(b, n, v, generator=gen, zero_frac=0.2)
    tok = torch.randint(0, v, (b, n), generator=gen)
    paths = t.paths()
    for dp in (q, None):
        kappa, el = rv.path_acceptance(p, dp, t, tok)
        assert kappa.shape == paths.shape[:2] == el.shape
        for i in range(b):
            for j in range(paths.shape[1]):
                nodes = [x for x in paths[i, j].tolist() if x >= 0]
                s, e = 1.0, 0.0
                for par, node in zip(nodes[:-1], nodes[1:]):
                    pp = float(p[i, par, tok[i, node]])
                    qq = 1.0 if dp is None else float(q[i, par, tok[i, node]])
                    alpha = min(1.0, pp / qq) if qq > 0 else float(pp > 0)
                    s *= alpha
                    e += s
                if not nodes:
                    s, e = 0.0, 0.0
                assert kappa[i, j].item() == pytest.approx(s, abs=1e-6)
                assert el[i, j].item() == pytest.approx(e, abs=1e-5)


def test_path_acceptance_predicts_mean_accepted_length():
    # E[num_accepted] of verify_chain for fixed drafts = sum_k S_k (VSD Eq. 10)
    gen = _gen(14)
    k, v, b = 5, 6, 40000
    p = random_probs(1, k + 1, v, generator=gen)
    q = random_probs(1, k, v, generator=gen)
    x = _draw(q[0], gen)[:, 0][None]
    kappa, el = rv.path_acceptance(
        p, torch.cat([q, q[:, :1]], 1), Tree.chain(k + 1), torch.cat([x[:, :1], x], 1)
    )
    r = rv.verify_chain(p.expand(b, -1, -1), x.expand(b, -1), q.expand(b, -1, -1), seed=1)
    a = r.num_accepted.double()
    assert abs(a.mean().item() - el.item()) < 5 * a.std().item() / b**0.5 + 1e-6
    assert abs((a == k).double().mean().item() - kappa.item()) < 5 * (0.25 / b) ** 0.5
