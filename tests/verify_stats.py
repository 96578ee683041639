"""What the verification tests share (reference and kernels): a Markov target/draft process, the
inputs of chain, tree and Jacobi verification drawn from it, and chi-square checks of what they
emit.  The checks use fixed seeds and pass at p > PASS; each kind is paired with a negative
control (a deliberately broken building block swapped in with monkeypatch must FAIL the same
check), so the checks have power."""

from __future__ import annotations

import torch
from helpers import chi2_pvalue, random_probs

from specops import Tree

PASS = 1e-3


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


# chain
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


# trees
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


# Jacobi
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


def jacobi_slot_pvalue(p, g, tokens, L, groups, sel=None):
    """Chain mode: the tokens [B, L] of jacobi_chain_inputs' slots (those of the flat mask
    ``sel``, all by default) are samples of their rows of p, per (slot, group)."""
    v = p.shape[-1]
    grp, tok, rows = _slot_groups(g, L, groups), tokens.flatten(), p.reshape(-1, v)
    if sel is not None:
        grp, tok, rows = grp[sel], tok[sel], rows[sel]
    return grouped_pvalue(grp, tok, rows, L * groups)


def jacobi_chain_pvalue(verify, *, b, L=4, groups=3, one_hot=False, **kw):
    """Every slot of ``verify(p, x, q, **kw).next_window`` is a sample of its p, on
    jacobi_chain_inputs drawn from seed 300."""
    gen = torch.Generator().manual_seed(300)
    p, x, q, g = jacobi_chain_inputs(b, gen, L=L, groups=groups, one_hot=one_hot)
    r = verify(p, x, q, **kw)
    return jacobi_slot_pvalue(p, g, r.next_window, L, groups)


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


def jacobi_stale_rows(t, r, tp, tok):
    """Tree mode's continuation, for verify_jacobi's result r on tree t: each position's stale
    target row l_d [B, L] (``_line``: -1 where none), those rows of tp [B * L, V], and each
    position's chi-square group: d * V + the window token at l_d (the stale row is T[d][token])."""
    b, L, v = tp.shape
    line = _line(t, r.path, r.num_accepted.long(), r.first_reject >= 0, L)
    rows_p = tp[torch.arange(b)[:, None], line.clamp(min=0)].reshape(-1, v)
    ctx = tok.gather(1, line.clamp(min=0)).flatten()
    grp = torch.arange(L).expand(b, L).flatten() * v + ctx
    return line, rows_p, grp
