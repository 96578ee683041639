"""Triton commit_kv (maths and the alias-safety argument: csrc/include/specops/kv.h).

Grid (row chunks, 2 * layers, B): a program owns one (request, layer, K/V) slab and BLOCK
elements of the [Hkv * D] row, moving raw bits (the cache viewed as int16 / int32).

1. The valid prefix: entry i is valid when s_i >= 0, s_i > s_{i-1}, 0 <= cs, cs + s_i < CAP,
   cs + i < CAP and (paged) both page ids lie in [0, P); m = the first invalid i.
2. cache_seqlens[b] advances once every program of b has read it: the last one to bump
   counters[b] writes cs + m and resets the counter to 0.
3. Moves go in tiles of TILE in increasing i: the tile's loads, a block barrier, the tile's
   stores.  Valid slots are strictly increasing, so s_j >= j: a tile reads positions >= its first
   i, which earlier tiles (positions < it) never wrote, and inside a tile every load precedes
   every store (the barrier orders them across the program's threads).
"""

from __future__ import annotations

import triton
import triton.language as tl
from specops.triton_kernels._args import Strided, launch

__all__ = ["commit_kv_triton"]


@triton.jit
def _pos_offset(
    pos, live, b, bt, s_btb, s_lead, s_pos, CAP, PAGE: tl.constexpr, PAGED: tl.constexpr
):
    """Element offset of (request b, position pos) in a slab, and its page (-1 where not live).
    The block table is read only for live lanes with pos in [0, CAP): the lanes past the moves
    (pos = cs + t for t >= m may lie past the table) read nothing."""
    if PAGED:
        inb = live & (pos >= 0) & (pos < CAP)
        page = tl.load(bt + b * s_btb + pos // PAGE, mask=inb, other=-1).to(tl.int64)
        return page * s_lead + (pos % PAGE) * s_pos, page
    else:
        return b * s_lead + pos * s_pos, pos * 0


@triton.jit
def _commit_kv_kernel(
    cache,
    slab_offsets,
    seqlens,
    slots,
    bt,
    counters,
    s_layer,
    s_kv,
    s_lead,
    s_pos,
    s_slots,
    s_btb,
    M,
    CAP,
    NUM_PAGES,
    ROW,
    PROGRAMS_PER_REQUEST,
    PAGE: tl.constexpr,
    PAGED: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    chunk = tl.program_id(0)
    lk = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    if HAS_OFFSETS:
        slab = cache + tl.load(slab_offsets + lk)
    else:
        slab = cache + (lk // 2).to(tl.int64) * s_layer + (lk % 2).to(tl.int64) * s_kv
    cs = tl.load(seqlens + b).to(tl.int64)

    # 1. the valid prefix
    j = tl.arange(0, BLOCK_M).to(tl.int64)
    row = slots + b * s_slots
    s = tl.load(row + j, mask=j < M, other=-1).to(tl.int64)
    prev = tl.load(row + j - 1, mask=(j > 0) & (j < M), other=-1).to(tl.int64)
    src = cs + s
    dst = cs + j
    # (dst >= j: cs >= 0, written on the vector: the interpreter rejects vector & scalar masks)
    ok = (j < M) & (s >= 0) & (s > prev) & (dst >= j) & (src < CAP) & (dst < CAP)
    if PAGED:
        src_pg = tl.load(bt + b * s_btb + src // PAGE, mask=ok, other=-1)
        dst_pg = tl.load(bt + b * s_btb + dst // PAGE, mask=ok, other=-1)
        ok = ok & (src_pg >= 0) & (src_pg < NUM_PAGES) & (dst_pg >= 0) & (dst_pg < NUM_PAGES)
    m = tl.min(tl.where(ok, M, j), axis=0)

    # 2. the last program of request b to get here advances its length; the barrier makes every
    # thread's read of cs precede this program's (release) increment
    tl.debug_barrier()
    old = tl.atomic_add(counters + b, 1, sem="acq_rel")
    if old == PROGRAMS_PER_REQUEST - 1:
        tl.store(seqlens + b, (cs + m).to(tl.int32))
        tl.atomic_xchg(counters + b, 0)

    # 3. the moves, TILE at a time
    lanes = chunk * BLOCK + tl.arange(0, BLOCK)
    lane_ok = (lanes < ROW)[None, :]
    t0 = tl.arange(0, TILE).to(tl.int64)
    for i0 in range(0, m, TILE):
        t = i0 + t0
        live = t < m
        st = tl.load(row + t, mask=live, other=0).to(tl.int64)
        src_off, _sp = _pos_offset(cs + st, live, b, bt, s_btb, s_lead, s_pos, CAP, PAGE, PAGED)
        dst_off, _dp = _pos_offset(cs + t, live, b, bt, s_btb, s_lead, s_pos, CAP, PAGE, PAGED)
        move = (live & (src_off != dst_off))[:, None] & lane_ok
        v = tl.load(slab + src_off[:, None] + lanes[None, :], mask=move)
        tl.debug_barrier()
        tl.store(slab + dst_off[:, None] + lanes[None, :], v, mask=move)


def commit_kv_triton(cache, slab_offsets, layers, shape, strides, cs, slots, block_table,
                     counters) -> None:  # fmt: skip
    """cache: the (0, 0) slab's first element, viewed as int16 / int32 (raw bits); slab (l, kv)
    starts at cache + slab_offsets[2 l + kv] (list form) or + l * strides[0] + kv * strides[1];
    shape: one slab's, [B, S, Hkv, D] or paged [P, page, Hkv, D]; strides (elements): (layer,
    kv, lead, position).  counters: [>= B] int32 zeros.  cs [B] int32, slots [B, M] int32 and
    block_table [B, pages] int32 contiguous (``launch`` checks).  Caches without elements are
    not launched: specops.ops.kv advances ``cs`` for them (``_advance_only``)."""
    b, m = slots.shape
    row = shape[2] * shape[3]  # the elements of one position's [Hkv, D] row
    if b == 0 or m == 0 or layers == 0 or row == 0:
        return
    if block_table is None:
        page, num_pages, capacity = None, 0, shape[1]
    else:
        page, num_pages, capacity = shape[1], shape[0], block_table.shape[1] * shape[1]
    block = min(triton.next_power_of_2(row), 1024)
    chunks = triton.cdiv(row, block)
    paged = block_table is not None
    launch(
        _commit_kv_kernel,
        (chunks, 2 * layers, b),
        Strided(cache),
        slab_offsets if slab_offsets is not None else cs,
        cs,
        slots,
        block_table if paged else cs,
        counters,
        strides[0],
        strides[1],
        strides[2],
        strides[3],
        slots.stride(0),
        block_table.stride(0) if paged else 0,
        m,
        capacity,
        num_pages,
        row,
        chunks * 2 * layers,
        PAGE=page if paged else 1,
        PAGED=paged,
        HAS_OFFSETS=slab_offsets is not None,
        BLOCK_M=max(2, triton.next_power_of_2(m)),
        TILE=8,
        BLOCK=block,
    )
