"""SGLang-compatible EAGLE verification helpers (sgl_kernel's signatures), on device tensors.

``verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrieve_index,
retrieve_next_token, retrieve_next_sibling, target_predict)``: greedy tree verification over
SGLang's linked-list trees, writing its outputs in place as sgl_kernel's kernel does.  Per request
b, node 0 is the root (the last verified token), node i carries ``candidates[b, i]``, its first
child is ``retrieve_next_token[b, i]`` and its next sibling ``retrieve_next_sibling[b, i]`` (-1:
none), its flat output slot is ``retrieve_index[b, i]``, and ``target_predict[b, i]`` is the
target's argmax after node i.  From the root, for steps 1 .. S-1 (S = accept_index.shape[1]):
the first child (in sibling order) whose candidate equals the target's prediction at the current
node is accepted; the walk stops at the first step with no such child.  Written:
``accept_index[b, 0..a]`` = the flat slots of the root and the a accepted nodes (the rest left as
given), ``accept_token_num[b]`` = a, ``predicts[slot of each accepted-path node]`` = the token
that follows it (the accepted child's candidate, and for the last node the target's prediction:
the bonus token).  Other entries of ``predicts`` are left as given.  No host sync: the walk is
S - 1 steps of at most N sibling hops each, as tensor operations.

Nothing here imports SGLang; ``specops.sglang.install()`` (not written yet) will put these in
place of sgl_kernel's."""

from __future__ import annotations

import torch

__all__ = ["verify_tree_greedy"]


def verify_tree_greedy(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """sgl_kernel.verify_tree_greedy's contract (module docstring); outputs written in place."""
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    for name, t in (("retrieve_index", retrieve_index), ("retrieve_next_token",
                    retrieve_next_token), ("retrieve_next_sibling", retrieve_next_sibling),
                    ("target_predict", target_predict)):  # fmt: skip
        if tuple(t.shape) != (bs, n):
            raise ValueError(
                f"specops.compat.sglang.verify_tree_greedy: {name} must have the shape of "
                f"candidates {[bs, n]}, got {list(t.shape)}"
            )
    dev = candidates.device
    rows = torch.arange(bs, device=dev)
    cand, nxt, sib = candidates.long(), retrieve_next_token.long(), retrieve_next_sibling.long()
    slot, want_all = retrieve_index.long(), target_predict.long()
    last = torch.zeros(bs, dtype=torch.long, device=dev)
    alive = torch.ones(bs, dtype=torch.bool, device=dev)
    num = torch.zeros(bs, dtype=torch.long, device=dev)
    if steps > 0:
        accept_index[:, 0] = slot[:, 0].to(accept_index.dtype)
    flat = predicts.view(-1)
    for step in range(1, steps):
        want = want_all[rows, last]
        cur = nxt[rows, last]
        hit = torch.full_like(last, -1)
        for _ in range(n):  # the sibling list of the current node, n hops at most
            valid = alive & (hit < 0) & (cur >= 0) & (cur < n)
            match = valid & (cand[rows, cur.clamp(0, n - 1)] == want)
            hit = torch.where(match, cur, hit)
            cur = torch.where(valid & ~match, sib[rows, cur.clamp(0, n - 1)], -1)
        found = hit >= 0
        # the current node's slot gets the accepted child's token (rows without one: unchanged)
        at = slot[rows, last]
        flat.scatter_(0, at, torch.where(found, want, flat.gather(0, at).long()).to(flat.dtype))
        col = accept_index[:, step]
        accept_index[:, step] = torch.where(found, slot[rows, hit.clamp(min=0)], col.long()).to(
            accept_index.dtype
        )
        last = torch.where(found, hit, last)
        num += found.long()
        alive &= found
    at = slot[rows, last]  # the bonus: the target's prediction after the last accepted node
    flat.scatter_(0, at, want_all[rows, last].to(flat.dtype))
    accept_token_num.copy_(num.to(accept_token_num.dtype))
