"""SJD-PAC (SJD-PAC Algorithm 1): SJD with adaptive continuation and proactive drafting.

The window is a tree of L nodes in ``verify_tree``'s convention: node 0 = the root (last emitted
token), row n of the target/draft probabilities = the distribution of the children of node n.
Normally it is a chain; after an iteration that rejected a token it is
``Tree.kary_chain(K, D, L)``: a K-ary tree of depth D at the rejection point, then a chain.
One iteration is one target pass and one ``verify_jacobi`` call.  Defaults are the paper's
(Sec. 5.3): L = 64, K = 4, D = 3, D counting the tree's root.

Lossless: every draft node's token is a draw from the draft row of its parent, the tree shape
does not depend on the draws, and verification is exact recursive rejection sampling.

``coupling="gumbel"`` (MC-SJD) draws the fresh slots -- those with nothing to continue -- by
Gumbel-max with their position's noise, the same in every iteration (specops/decode/_coupling.py);
the continued slots are already maximally coupled: adaptive continuation's keep-or-resample rule
is the maximal coupling of their old and new draft rows.

The iteration step by step (adaptive continuation, proactive drafting, branch continuation),
``init`` and why D counts the root: docs/decoding.md, "SJD-PAC".
"""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode._checks import check_branch, check_int, check_width, prepare
from specops.decode._coupling import PAC_COUPLINGS, check_coupling, draw
from specops.decode._loop import compiled_step, emit_first, init_rows, select_tree, start
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
    seed = sampling.seed
    coupling = check_coupling("sjd_pac", coupling, sampling.greedy, PAC_COUPLINGS)
    L = check_width("sjd_pac", "window", window)
    K = check_branch("sjd_pac", branch, model)
    depth = check_int("sjd_pac", "depth", depth, 1, L, " (the window)")
    proactive = proactive and K > 1
    n_tree = (K**depth - 1) // (K - 1) if K > 1 else depth
    if L < n_tree:
        raise ValueError(
            f"sjd_pac: window must hold the {K}-ary depth-{depth} tree ({n_tree} nodes), got {L}"
        )
    prompt, length = prepare("sjd_pac", model, classes, length)
    b, dev = prompt.shape[0], prompt.device
    rec, rng, tgt, out, _ = start(
        "sjd-pac", model, prompt, length, sampling, width=L, slack=2 * L + 1
    )
    win = _Windows(K, depth, L, dev)
    chain_cont = proactive and branch_continuation and depth > 1 and win.n_kary < L
    rows = torch.arange(b, device=dev)
    rows1 = rows[:, None]
    cols = torch.arange(L, device=dev)[None, :]
    key = torch.tensor(seed, dtype=torch.int64, device=dev)  # the Gumbel noise's Philox key

    nk = win.n_kary
    n_branch = torch.zeros((), dtype=torch.long, device=dev)
    pd = torch.zeros(b, dtype=torch.bool, device=dev)
    with nvtx_range("sjd-pac.prefill"):
        p0, _ = tgt.prefill()
        root, _ = emit_first(p0, out, rec, sampling, rng)
        # initial window: a chain drawn from p(s_1) (stale for every later slot) or uniformly
        q = init_rows(init, p0)[:, None].expand(b, L, -1).contiguous()
        with nvtx_range("draft"), rec.timer("specops"):
            # node n of the chain at position seqlens + n (the root s_1 at seqlens)
            x = draw(coupling, q, tgt.seqlens.long()[:, None] + cols, key, seed, rng())
        x[:, 0] = root

    def step(root, x, q, pd):
        active = out.active
        tree = win.pick(pd, L)
        pos = tgt.seqlens.long()[:, None] + tree.depth
        p, _ = tgt.forward(x, pos, tree, charged=active)  # p[:, n] = dist of n's children
        with nvtx_range("verify"), rec.timer("specops"):
            r = specops.verify_jacobi(
                p,
                x,
                q,
                tree=tree,
                continue_after_reject=continuation,
                num_candidates=K if proactive else 1,
                seed=seed,
                offset=rng(),
            )
        a = r.num_accepted.long()
        n_emit = torch.where(active, a + 1, 0)
        tgt.commit(torch.where(cols < n_emit[:, None], r.path, -1).int())
        out.write(r.next_window, n_emit)
        rec.emitted(n_emit, active)
        root = torch.where(active, r.next_window[rows, a], root)
        with nvtx_range("draft"):
            x, q, pd = draft(tree, r, a, p, x, q, pd, root, active, pos[:, 0] + a + 1)
        return root, x, q, pd

    def draft(tree, r, a, p, x, q, pd, root, active, root_pos):
        """The next window from this iteration's (tree, verification r, a accepted, target rows p,
        window x with draft rows q; the new root at position root_pos): AC, PD and the branch
        continuation.  -> (x, q, pd)."""
        # the old first-child line below the last accepted node m: line[d] = the node whose
        # target row is the stale distribution of position d (d > a); last = its deepest node
        fc = tree.first_child.long()
        m = r.path[rows, a].long()
        nw = r.next_window
        cur = fc[rows, m]
        if chain_cont:
            # a non-first K-ary leaf accepted: the line is the chain below the first leaf, its
            # tokens continued (AC) against the chain's own stale rows
            alt = pd & (r.first_reject < 0) & (m != win.first_leaf)
            alt &= tree.depth[rows, m] == win.leaf_depth
            with rec.timer("specops"):
                rc = specops.verify_jacobi(
                    p[:, nk:],
                    torch.cat([x[:, nk + 1 :], x.new_full((b, 1), -1)], 1),
                    q[:, nk:],
                    continue_after_reject=continuation,
                    seed=seed,
                    offset=rng(),
                )
            j = cols - a[:, None] - 1
            cont = rc.next_window.gather(1, j.clamp(0, L - nk - 1))
            nw = torch.where(alt[:, None] & (j >= 0) & (j < L - nk), cont, nw)
            cur = torch.where(alt, fc[rows, win.first_leaf], cur)
            n_branch.add_((alt & active).sum())  # in place: the closure keeps one tensor
        line = torch.full((b, 2 * L + 1), -1, dtype=torch.long, device=dev)
        d, last = a + 1, m
        for _ in range(L):
            ok = (cur >= 0) & (x[rows, cur.clamp(min=0)] >= 0)
            line[rows, d.clamp(max=2 * L)] = torch.where(ok, cur, line[rows, d.clamp(max=2 * L)])
            last = torch.where(ok, cur, last)
            cur = torch.where(ok, fc[rows, cur.clamp(min=0)], -1)
            d = d + 1

        # next window: PD tree where a token was rejected, else a chain
        pd = torch.full_like(pd, proactive) & (r.first_reject >= 0)
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
        if proactive:
            cand = r.candidates[rows1, old, win.kc_sib[None, :].expand(b, L)]
            given = torch.where(kary, torch.where(in_win, cand, -1), given)
        with rec.timer("specops"):
            # node j's token from its parent's draft row; it sits at position root_pos + e_j
            qp = q.gather(1, par[..., None].expand_as(q))
            fresh = draw(coupling, qp, root_pos[:, None] + e, key, seed, rng())
        x = torch.where((given >= 0) | kary, given, fresh).int()
        x[:, 0] = root
        return x, q, pd

    step = compiled_step(step, compile_step)
    while not out.done():
        with nvtx_range("sjd-pac.step"):
            root, x, q, pd = step(root, x, q, pd)
    stats = rec.finish()
    stats.extra["branch_continuations"] = int(n_branch)
    return out.tokens(), stats
