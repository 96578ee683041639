"""Reference attention ops: tree attention over a KV cache, and appending the tree's K/V.

Notation (DESIGN.md, Public API): q [B, N, Hq, D]; a contiguous cache [B, S_max, Hkv, D] or a
paged one [P, page, Hkv, D] addressed through block_table [B, max_pages]; cache_seqlens [B] =
L_b, the committed prefix length; the N tree tokens' K/V sit at positions L_b + j.

Query n of request b attends to the whole committed prefix (s < L_b) and to the tree slots
L_b + j whose bit j of mask row n is set (n and its ancestors), with weights
softmax_s(sm_scale * <q_n, k_s>); GQA, natural-log lse; a query that sees no key gets output 0
and lse -inf.  The rule in full: docs/reference_semantics.md, "Tree attention".
"""

from __future__ import annotations

import math

import torch

from specops.tree import Tree, unpack_bits

__all__ = ["tree_attention", "append_kv", "gather_cache"]


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def gather_cache(cache: torch.Tensor, block_table: torch.Tensor | None) -> torch.Tensor:
    """The logical [B, capacity, Hkv, D] view of a cache: the cache itself when contiguous, else
    the pages of each request concatenated in block-table order (page ids clamped into range,
    so unused block-table entries may hold anything)."""
    if block_table is None:
        return cache
    num_pages, page = cache.shape[0], cache.shape[1]
    pages = block_table.long().clamp(0, num_pages - 1)  # [B, max_pages]
    b, max_pages = pages.shape
    return cache[pages].reshape(b, max_pages * page, *cache.shape[2:])


def tree_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    tree: Tree | torch.Tensor,
    *,
    block_table: torch.Tensor | None = None,
    sm_scale: float | None = None,
    return_lse: bool = False,
):
    """Attention of the N tree queries over prefix + tree (see the module docstring).

    ``tree`` is a :class:`specops.Tree` (batch 1 or B) or its ``mask_bits`` [1 or B, N, W]
    int32.  Float32 math (float64 for float64 inputs), vectorised over the batch; the output
    has q's dtype, the lse is float32 (float64 for float64 inputs).  Scores are formed over
    the whole cache capacity and masked (reading cache_seqlens on the host would sync), so the
    cost grows with S_max, not with the prefix length."""
    mask_bits = tree.mask_bits if isinstance(tree, Tree) else tree
    b, n, hq, d = q.shape
    ct = _compute_dtype(q)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)

    k = gather_cache(k_cache, block_table)  # [B, C, Hkv, D], C = logical capacity
    v = gather_cache(v_cache, block_table)
    cap, hkv = k.shape[1], k.shape[2]
    g = hq // hkv  # queries per KV head

    # visible[b, n, s]: prefix s < L_b, or tree slot j = s - L_b < N with mask bit j of row n
    seqlen = cache_seqlens.long().reshape(b, 1)
    pos = torch.arange(cap, device=q.device).reshape(1, cap)
    in_prefix = pos < seqlen  # [B, C]
    slot = pos - seqlen  # [B, C], tree slot index j
    in_tree = (slot >= 0) & (slot < n)
    tree_mask = unpack_bits(mask_bits, n).expand(b, n, n)  # [B, N (query), N (slot)]
    slot_c = slot.clamp(0, n - 1).unsqueeze(1).expand(b, n, cap)
    tree_vis = torch.gather(tree_mask, 2, slot_c) & in_tree.unsqueeze(1)
    visible = in_prefix.unsqueeze(1) | tree_vis  # [B, N, C]
    readable = in_prefix | in_tree  # [B, C]: positions whose values may be used at all

    # GQA without copies: q [B, N, Hkv, G, D] against k [B, C, Hkv, D]
    qf = q.to(ct).reshape(b, n, hkv, g, d)
    # unread positions are zeroed so garbage (NaN/inf) in unused cache rows cannot leak in
    kf = torch.where(readable[:, :, None, None], k.to(ct), 0.0)
    vf = torch.where(readable[:, :, None, None], v.to(ct), 0.0)
    scores = torch.einsum("bnhgd,bshd->bhgns", qf, kf) * sm_scale  # [B, Hkv, G, N, C]
    scores = scores.masked_fill(~visible[:, None, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [B, Hkv, G, N], -inf where nothing is visible
    w = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse).unsqueeze(-1))
    out = torch.einsum("bhgns,bshd->bnhgd", w, vf).reshape(b, n, hq, d).to(q.dtype)
    if not return_lse:
        return out
    lse = lse.permute(0, 3, 1, 2).reshape(b, n, hq)
    return out, lse if ct == torch.float64 else lse.float()


def append_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache_seqlens: torch.Tensor,
    *,
    block_table: torch.Tensor | None = None,
) -> None:
    """Write k, v [B, N, Hkv, D] into the caches at logical positions cache_seqlens[b] + n, in
    place.  cache_seqlens is not advanced.

    Rows whose position falls outside [0, capacity) are dropped.  Without a host sync, this is
    done by writing every row to its position clamped into range, with the value that slot
    ends up holding anyway (the row's own K/V when in range; else the K/V of the in-range row
    that targets the same slot, or the slot's current content): duplicate writes then agree."""
    b, n = k.shape[:2]
    cap = k_cache.shape[1] if block_table is None else block_table.shape[1] * k_cache.shape[1]
    if cap == 0:
        return  # every row falls outside the cache
    dev = k.device
    pos = cache_seqlens.long().reshape(b, 1) + torch.arange(n, device=dev)  # [B, N]
    ok = (pos >= 0) & (pos < cap)
    tgt = pos.clamp(0, cap - 1)  # slot each row writes
    src = tgt - cache_seqlens.long().reshape(b, 1)  # row n' with pos n' == tgt, if any
    src_ok = (src >= 0) & (src < n)
    src = src.clamp(0, n - 1)
    bi = torch.arange(b, device=dev).reshape(b, 1).expand(b, n)
    if block_table is None:
        index = (bi, tgt)
    else:
        page = k_cache.shape[1]
        phys = block_table.long().gather(1, tgt // page).clamp(0, k_cache.shape[0] - 1)
        index = (phys, tgt % page)
    for cache, new in ((k_cache, k), (v_cache, v)):
        new = new.to(cache.dtype)
        val = torch.where(ok[..., None, None], new, new[bi, src])
        val = torch.where((ok | src_ok)[..., None, None], val, cache[index])
        cache[index] = val
