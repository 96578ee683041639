"""SJD-PAC (SJD-PAC Algorithm 1): SJD with adaptive continuation and proactive drafting.

The window is a tree of L nodes in ``verify_tree``'s convention: normally a chain, after an
iteration that rejected a token ``Tree.kary_chain(K, D, L)`` (a K-ary tree of depth D at the
rejection point, then a chain).  One iteration is one target pass and one ``verify_jacobi`` call.
Defaults are the paper's (Sec. 5.3): L = 64, K = 4, D = 3, D counting the tree's root.  Lossless.
``coupling="gumbel"`` (MC-SJD) draws the fresh slots with their position's Gumbel noise.

The iteration step by step (adaptive continuation, proactive drafting, branch continuation),
``init``, why D counts the root and why it is lossless: docs/decoding.md, "SJD-PAC".
"""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode._checks import check_branch, check_int, check_width, prepare
from specops.decode._coupling import PAC_COUPLINGS, check_coupling, draw
from specops.decode._loop import (
    begin,
    commit,
    finish,
    first_n,
    init_rows,
    prefill,
    run_steps,
    select_tree,
)  # fmt: skip
from specops.decode.sampling import Sampling
from specops.tree import Tree

__all__ = ["sjd_pac"]


class _Windows:
    """The two window shapes with per-node constants: depth, parent, sibling index, K-ary level."""

    def __init__(self, k: int, depth: int, length: int, device):
        self.kc = Tree.kary_chain(k, depth, length, device=device)
        self.ch = Tree.chain(length, device=device)
        n_kary = (k**depth - 1) // (k - 1) if k > 1 else depth
        ids = torch.arange(length, device=device)
        d = self.kc.depth[0].long()
        self.kc_level = (ids >= 1) & (ids < n_kary)  # nodes of the K-ary part (below the root)
        # breadth-first: level l starts at (k^l - 1)/(k - 1), children of a node are consecutive
        start = ((k**d) - 1) // max(k - 1, 1) if k > 1 else d
        self.kc_sib = torch.where(self.kc_level, (ids - start) % k, 0)
        self.n_kary = n_kary
        self.leaf_depth = depth - 1
        leaf = 0  # the first leaf of the K-ary part, the chain's parent (Tree.kary_chain)
        for _ in range(depth - 1):
            leaf = k * leaf + 1
        self.first_leaf = leaf

    def pick(self, pd: torch.Tensor, length: int) -> Tree:
        return select_tree(pd, self.kc, self.ch, length)


@torch.no_grad()
def sjd_pac(
    model,
    classes,
    *,
    window: int = 64,
    branch: int = 4,
    depth: int = 3,
    continuation: bool = True,
    proactive: bool = True,
    branch_continuation: bool = True,
    init="target",
    coupling: str = "none",
    length: int | None = None,
    compile_step=None,
    **sampling_kwargs,
):
    """SJD-PAC with a window of ``window`` nodes, a ``branch``-ary proactive tree of ``depth``
    levels (counting its root); ``continuation`` / ``proactive`` / ``branch_continuation`` switch
    AC / PD / the chain continuation after a non-first leaf off for ablations; ``init``: "target"
    (p(s_1)), "uniform" (the authors': uniform over the vocabulary) or a [V] bool mask of the
    image tokens to draw the first window uniformly from.  ``coupling``: "none" or "gumbel", how
    the fresh slots are drawn (the continued ones are maximally coupled by AC already).
    ``sampling_kwargs``: the ``Sampling`` settings.  ``compile_step``: see
    ``specops.decode.compiled_step``.  -> (tokens [B, length] int32, Stats with
    extra["branch_continuations"])."""
    sampling = Sampling.of("sjd_pac", sampling_kwargs)
    coupling = check_coupling("sjd_pac", coupling, sampling.greedy, PAC_COUPLINGS)
    L = check_width("sjd_pac", "window", window)
    K = check_branch("sjd_pac", branch, model)
    depth = check_int("sjd_pac", "depth", depth, 1, L, " (the window)")
    n_tree = (K**depth - 1) // (K - 1) if K > 1 else depth
    if L < n_tree:
        raise ValueError(
            f"sjd_pac: window must hold the {K}-ary depth-{depth} tree ({n_tree} nodes), got {L}"
        )
    prompt, length = prepare("sjd_pac", model, classes, length)
    run = begin("sjd-pac", model, prompt, length, sampling, width=L, slack=2 * L + 1)
    pac = _Pac(run, K, depth, L, continuation, proactive and K > 1, branch_continuation, coupling)
    root, (x, q) = prefill(run, pac.first_window(init))
    pd = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    run_steps(run, pac.step, (root, x, q, pd), compile_step=compile_step)
    return finish(run, branch_continuations=int(pac.n_branch))


class _Pac:
    """One SJD-PAC run: its windows, switches and Gumbel key, the step and the next window."""

    def __init__(self, run, K, depth, L, continuation, proactive, branch_continuation, coupling):
        self.run, self.K, self.L = run, K, L
        self.continuation, self.proactive, self.coupling = continuation, proactive, coupling
        dev = run.prompt.device
        self.win = _Windows(K, depth, L, dev)
        self.chain_cont = proactive and branch_continuation and depth > 1 and self.win.n_kary < L
        self.rows = run.rows
        self.cols = torch.arange(L, device=dev)[None, :]
        self.seed = run.sampling.seed
        self.key = torch.tensor(self.seed, dtype=torch.int64, device=dev)  # the Gumbel noise's
        self.n_branch = torch.zeros((), dtype=torch.long, device=dev)

    def first_window(self, init):
        """-> ``prefill``'s ``then``: the initial window, a chain drawn from p(s_1) (stale for
        every later slot) or uniformly (``init``)."""

        def then(p0, hidden, root, ones):
            run, b = self.run, root.shape[0]
            q = init_rows(init, p0)[:, None].expand(b, self.L, -1).contiguous()
            with nvtx_range("draft"), run.rec.timer("specops"):
                # node n of the chain at position seqlens + n (the root s_1 at seqlens)
                pos = run.tgt.seqlens.long()[:, None] + self.cols
                x = draw(self.coupling, q, pos, self.key, self.seed, run.rng())
            x[:, 0] = root
            return x, q

        return then

    def step(self, root, x, q, pd):
        run, tgt, L = self.run, self.run.tgt, self.L
        active = run.out.active
        tree = self.win.pick(pd, L)
        pos = tgt.seqlens.long()[:, None] + tree.depth
        p, _ = tgt.forward(x, pos, tree, charged=active)  # p[:, n] = dist of n's children
        with nvtx_range("verify"), run.rec.timer("specops"):
            r = specops.verify_jacobi(
                p,
                x,
                q,
                tree=tree,
                continue_after_reject=self.continuation,
                num_candidates=self.K if self.proactive else 1,
                seed=self.seed,
                offset=run.rng(),
            )
        a = r.num_accepted.long()
        n_emit = torch.where(active, a + 1, 0)
        commit(run, first_n(r.path, n_emit), r.next_window, n_emit, active)
        root = torch.where(active, r.next_window[self.rows, a], root)
        with nvtx_range("draft"):
            x, q, pd = self.draft(tree, r, a, p, x, q, pd, root, active, pos[:, 0] + a + 1)
        return root, x, q, pd

    def branch_line(self, tree, r, a, p, x, q, pd, active, nw, cur, m):
        """Branch continuation: where a non-first K-ary leaf was accepted, the line is the chain
        below the first leaf, its tokens continued (AC) against the chain's own stale rows.
        -> (next window tokens nw, the line's first node cur)."""
        b, L, nk, rows, win = x.shape[0], self.L, self.win.n_kary, self.rows, self.win
        fc = tree.first_child.long()
        alt = pd & (r.first_reject < 0) & (m != win.first_leaf)
        alt &= tree.depth[rows, m] == win.leaf_depth
        with self.run.rec.timer("specops"):
            rc = specops.verify_jacobi(
                p[:, nk:],
                torch.cat([x[:, nk + 1 :], x.new_full((b, 1), -1)], 1),
                q[:, nk:],
                continue_after_reject=self.continuation,
                seed=self.seed,
                offset=self.run.rng(),
            )
        j = self.cols - a[:, None] - 1
        cont = rc.next_window.gather(1, j.clamp(0, L - nk - 1))
        nw = torch.where(alt[:, None] & (j >= 0) & (j < L - nk), cont, nw)
        cur = torch.where(alt, fc[rows, win.first_leaf], cur)
        self.n_branch.add_((alt & active).sum())  # in place: the closure keeps one tensor
        return nw, cur

    def draft(self, tree, r, a, p, x, q, pd, root, active, root_pos):
        """The next window from this iteration's (tree, verification r, a accepted, target rows p,
        window x with draft rows q; the new root at position root_pos): AC, PD and the branch
        continuation.  -> (x, q, pd)."""
        b, L, rows, win = x.shape[0], self.L, self.rows, self.win
        rows1, dev = rows[:, None], x.device
        # the old first-child line below the last accepted node m: line[d] = the node whose
        # target row is the stale distribution of position d (d > a); last = its deepest node
        fc = tree.first_child.long()
        m = r.path[rows, a].long()
        nw, cur = r.next_window, fc[rows, m]
        if self.chain_cont:
            nw, cur = self.branch_line(tree, r, a, p, x, q, pd, active, nw, cur, m)
        line = torch.full((b, 2 * L + 1), -1, dtype=torch.long, device=dev)
        d, last = a + 1, m
        for _ in range(L):
            ok = (cur >= 0) & (x[rows, cur.clamp(min=0)] >= 0)
            line[rows, d.clamp(max=2 * L)] = torch.where(ok, cur, line[rows, d.clamp(max=2 * L)])
            last = torch.where(ok, cur, last)
            cur = torch.where(ok, fc[rows, cur.clamp(min=0)], -1)
            d = d + 1

        # next window: PD tree where a token was rejected, else a chain
        pd = torch.full_like(pd, self.proactive) & (r.first_reject >= 0)
        nxt = win.pick(pd, L)
        e = nxt.depth.long()  # [B, L] new depth of each node
        par = nxt.parents.long().clamp(min=0)
        # draft row of node j = stale p of old position a + e_j + 1, else the fresh dist
        src = line.gather(1, (a[:, None] + e + 1).clamp(max=2 * L))
        fresh_q = p[rows, last]
        q = torch.where((src >= 0)[..., None], p[rows1, src.clamp(min=0)], fresh_q[:, None])
        # tokens: K-ary levels from the PD candidates, the rest from continuation (old position
        # a + e_j), drawn fresh from the parent's draft row where nothing is left
        old = (a[:, None] + e).clamp(max=L - 1)
        in_win = a[:, None] + e < L
        given = torch.where(in_win, nw.gather(1, old), -1)
        kary = pd[:, None] & win.kc_level[None, :]
        if self.proactive:
            cand = r.candidates[rows1, old, win.kc_sib[None, :].expand(b, L)]
            given = torch.where(kary, torch.where(in_win, cand, -1), given)
        with self.run.rec.timer("specops"):
            # node j's token from its parent's draft row; it sits at position root_pos + e_j
            qp = q.gather(1, par[..., None].expand_as(q))
            fresh = draw(self.coupling, qp, root_pos[:, None] + e, self.key, self.seed,
                         self.run.rng())  # fmt: skip
        x = torch.where((given >= 0) | kary, given, fresh).int()
        x[:, 0] = root
        return x, q, pd
