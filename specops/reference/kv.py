"""Reference kv ops (see DESIGN.md, Public API): committing the accepted path's K/V entries.

After verification the accepted nodes' K/V sit at scattered slots ``cache_seqlens[b] + s_i`` of
the draft region; ``commit_kv`` moves them to the contiguous positions ``cache_seqlens[b] + i``
(i = 0 .. m_b - 1) in every layer, K and V, then advances ``cache_seqlens[b]`` by m_b.
m_b is the length of the longest valid prefix of ``accepted_slots[b]`` (the same rule on every
backend, so fast mode never writes out of bounds); every move reads the pre-call state.

Which entries are valid: docs/reference_semantics.md, "Committing K/V".
"""

from __future__ import annotations

import torch

__all__ = ["commit_kv", "commit_count"]


def _positions(cs: torch.Tensor, slots: torch.Tensor, capacity: int, block_table, num_pages):
    """Per entry: valid-prefix mask, and (page, in-page offset) of source and destination.
    Contiguous caches use page = request, offset = position."""
    b, m = slots.shape
    s = slots.long()
    cs = cs.long()[:, None]
    i = torch.arange(m, device=slots.device)[None, :]
    prev = torch.cat([torch.full_like(s[:, :1], -1), s[:, :-1]], 1)
    src = cs + s
    dst = cs + i
    ok = (s >= 0) & (s > prev) & (cs >= 0) & (src < capacity) & (dst < capacity)
    if block_table is None:
        rows = torch.arange(b, device=slots.device)[:, None].expand(b, m)
        src_pg, src_off, dst_pg, dst_off = rows, src, rows, dst
    else:
        if capacity == 0:  # no pages per request, or pages of size 0: no entry is valid
            bt = torch.full((b, 1), -1, dtype=torch.int64, device=slots.device)
            page = 1
        else:
            bt = block_table.long()
            page = capacity // bt.shape[1]
        src_pg = bt.gather(1, (src // page).clamp(0, bt.shape[1] - 1))
        dst_pg = bt.gather(1, (dst // page).clamp(0, bt.shape[1] - 1))
        ok &= (src_pg >= 0) & (src_pg < num_pages) & (dst_pg >= 0) & (dst_pg < num_pages)
        src_off, dst_off = src % page, dst % page
    # longest valid prefix: an entry counts only when every entry before it is valid
    ok = torch.cumprod(ok.to(torch.int32), 1).bool()
    return ok, src_pg, src_off, dst_pg, dst_off


def commit_count(cache_seqlens, accepted_slots, capacity: int, block_table=None, num_pages=0):
    """m_b [B] int32: the number of entries ``commit_kv`` moves for each request."""
    ok = _positions(cache_seqlens, accepted_slots, capacity, block_table, num_pages)[0]
    return ok.sum(1).to(torch.int32)


def _move(layer_caches, ok, src_pg, src_off, dst_pg, dst_off):
    """cache[dst] <- cache[src] for the valid entries, from the pre-call state.

    Invalid entries repeat a harmless write so that no host sync is needed to drop them:
    entry 0's move when m_b > 0 (the same value to the same place), else the self-move of
    the (clamped) destination of entry 0, which rewrites a value with itself."""
    first = lambda t: t[:, :1].expand_as(t)
    self_pg, self_off = first(dst_pg), first(dst_off)
    has_any = first(ok)
    src_pg = torch.where(ok, src_pg, torch.where(has_any, first(src_pg), self_pg))
    src_off = torch.where(ok, src_off, torch.where(has_any, first(src_off), self_off))
    dst_pg = torch.where(ok, dst_pg, self_pg)
    dst_off = torch.where(ok, dst_off, self_off)
    for cache in layer_caches:  # [P or B, S or page, Hkv, D]
        if cache.numel() == 0:  # no element to move (B, S, P, page, Hkv or D = 0)
            continue
        lead, width = cache.shape[:2]
        spg, soff = src_pg.clamp(0, lead - 1), src_off.clamp(0, width - 1)
        dpg, doff = dst_pg.clamp(0, lead - 1), dst_off.clamp(0, width - 1)
        if cache.stride(0) == width * cache.stride(1):
            # rows as one [lead * width, Hkv * D] matrix: index_select / index_copy_ (fast)
            rows = cache.view(lead * width, -1)
            vals = rows.index_select(0, (spg * width + soff).reshape(-1))  # a copy: read first
            rows.index_copy_(0, (dpg * width + doff).reshape(-1), vals)
        else:
            vals = cache[spg, soff].clone()  # read every source before any write
            cache[dpg, doff] = vals


def commit_kv(
    caches: torch.Tensor | list[tuple[torch.Tensor, torch.Tensor]],
    cache_seqlens: torch.Tensor,
    accepted_slots: torch.Tensor,
    *,
    block_table: torch.Tensor | None = None,
) -> None:
    """Move the accepted entries to ``cache_seqlens + [0, m)`` in every layer, K and V, then
    advance ``cache_seqlens`` (int32 [B]) by m_b in place (see the module docstring).

    ``caches``: a tensor [layers, 2, B, S, Hkv, D] (paged: [layers, 2, P, page, Hkv, D] with
    ``block_table`` [B, pages]) or a list of per-layer (k_cache, v_cache) pairs of
    [B, S, Hkv, D] (paged: [P, page, Hkv, D])."""
    if isinstance(caches, torch.Tensor):
        layer_caches = [caches[layer, c] for layer in range(caches.shape[0]) for c in (0, 1)]
    else:
        layer_caches = [t for pair in caches for t in pair]
    if not layer_caches or accepted_slots.shape[1] == 0:
        return
    first = layer_caches[0]
    if block_table is None:
        capacity, num_pages = first.shape[1], 0
    else:
        capacity, num_pages = block_table.shape[1] * first.shape[1], first.shape[0]
    ok, src_pg, src_off, dst_pg, dst_off = _positions(
        cache_seqlens, accepted_slots, capacity, block_table, num_pages
    )
    _move(layer_caches, ok, src_pg, src_off, dst_pg, dst_off)
    cache_seqlens.add_(ok.sum(1).to(cache_seqlens.dtype))
