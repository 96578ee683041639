"""SJD-PAC (SJD-PAC Algorithm 1): SJD with adaptive continuation and proactive drafting.

The window is a tree of L nodes in ``verify_tree``'s convention: node 0 = the root (last emitted
token), row n of the target/draft probabilities = the distribution of the children of node n.
Normally it is a chain; after an iteration that rejected a token it is
``Tree.kary_chain(K, D, L)``: a K-ary tree of depth D at the rejection point, then a chain.

One iteration (one target pass, one ``verify_jacobi`` call):

1. target pass over the L nodes with tree attention -> p_n for every node;
2. recursive rejection sampling down the tree (siblings drawn without replacement) accepts a
   path of a nodes; t = the correction (or bonus) token; a + 1 tokens are committed, and the KV
   of the root and the accepted nodes;
3. adaptive continuation (AC): below the rejection, every later token on the first-child line is
   verified against its stale p (kept, or resampled from max(p - q, 0)), so it is a sample of
   that p -- the next iteration's draft with q = p;
4. proactive drafting (PD): at every position after the rejection, K distinct draws from the
   stale p (``num_candidates=K``) become the K children of every node of that level of the next
   window's K-ary tree (D - 1 levels below the new root t); the chain below the tree's first
   leaf continues with the AC tokens.  Slots with nothing left to continue get fresh draws from
   the deepest stale distribution (any q is lossless as long as the token is drawn from it).

Losslessness: every draft node's token is a draw from the draft row of its parent (K-ary
siblings without replacement, which verification is told), the tree shape does not depend on the
draws, and verification is exact recursive rejection sampling.
"""

from __future__ import annotations

import torch

import specops
from specops.decode._common import emit_first, prompt_tokens, select_tree, start
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

    def pick(self, pd: torch.Tensor, length: int) -> Tree:
        return select_tree(pd, self.kc, self.ch, length)


@torch.no_grad()
def sjd_pac(
    model,
    classes,
    *,
    window: int = 32,
    branch: int = 3,
    depth: int = 3,
    continuation: bool = True,
    proactive: bool = True,
    length: int | None = None,
    temperature: float = 1.0,
    top_k=None,
    top_p=None,
    cfg_scale=None,
    seed: int = 0,
):
    """SJD-PAC with a window of ``window`` nodes, a ``branch``-ary proactive tree of ``depth``
    levels (counting its root); ``continuation`` / ``proactive`` switch AC / PD off for
    ablations.  -> (tokens [B, length] int32, Stats)."""
    L, K = window, branch
    proactive = proactive and K > 1
    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    prompt = prompt_tokens(model, classes)
    b, dev = prompt.shape[0], prompt.device
    length = length or model.cfg.grid**2
    rec, rng, tgt, out, _ = start(
        "sjd-pac", model, prompt, length, width=L, slack=2 * L + 1, cfg_scale=cfg_scale,
        sampling=sampling,
    )  # fmt: skip
    win = _Windows(K, depth, L, dev)
    rows = torch.arange(b, device=dev)
    rows1 = rows[:, None]
    cols = torch.arange(L, device=dev)[None, :]

    p0, _ = tgt.prefill()
    root, _ = emit_first(p0, out, rec, seed, rng)
    # initial window: a chain drawn from p(s_1) (stale for every later slot)
    pd = torch.zeros(b, dtype=torch.bool, device=dev)
    q = p0[:, None].expand(b, L, -1).contiguous()
    with rec.timer("specops"):
        x = specops.sample(q, seed=seed, offset=rng())
    x[:, 0] = root
    while not out.done():
        active = out.active
        tree = win.pick(pd, L)
        pos = tgt.seqlens.long()[:, None] + tree.depth
        p, _ = tgt.forward(x, pos, tree, charged=active)  # p[:, n] = dist of n's children
        with rec.timer("specops"):
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

        # the old first-child line below the last accepted node m: line[d] = the node whose
        # target row is the stale distribution of position d (d > a); last = its deepest node
        fc = tree.first_child.long()
        m = r.path[rows, a].long()
        line = torch.full((b, 2 * L + 1), -1, dtype=torch.long, device=dev)
        cur, d, last = fc[rows, m], a + 1, m
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
        given = torch.where(in_win, r.next_window.gather(1, old), -1)
        kary = pd[:, None] & win.kc_level[None, :]
        if proactive:
            cand = r.candidates[rows1, old, win.kc_sib[None, :].expand(b, L)]
            given = torch.where(kary, torch.where(in_win, cand, -1), given)
        with rec.timer("specops"):
            fresh = specops.sample(
                q.gather(1, par[..., None].expand_as(q)), seed=seed, offset=rng()
            )
        x = torch.where((given >= 0) | kary, given, fresh).int()
        x[:, 0] = root
    return out.tokens(), rec.finish()
