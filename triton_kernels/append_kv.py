"""Triton append_kv: write k, v [B, N, Hkv, D] at logical positions cache_seqlens[b] + n.

One program per (b, n) row writes its Hkv x D block of K and of V (one launch for both).
Position s = L_b + n goes to row s of request b (contiguous cache) or to row s % page of page
block_table[b, s // page] (paged; page ids clamped into [0, P)).  Rows with s outside
[0, capacity) are dropped, so no value of cache_seqlens writes out of bounds.
"""

from __future__ import annotations

import triton
import triton.language as tl
from specops.triton_kernels._args import Strided, cache_pages, launch, vec

__all__ = ["append_kv_triton"]


@triton.jit
def _append_kv(
    KC,
    VC,
    K,
    V,
    SEQLENS,
    BT,
    s_kcp,
    s_kcs,
    s_kch,
    s_kcd,
    s_vcp,
    s_vcs,
    s_vch,
    s_vcd,
    s_kb,
    s_kn,
    s_kh,
    s_kd,
    s_vb,
    s_vn,
    s_vh,
    s_vd,
    s_sl,
    s_btb,
    s_btp,
    N,
    CAP,
    NUM_PAGES,
    HKV: tl.constexpr,
    D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PAGED: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // N).to(tl.int64)
    n = pid % N
    pos = tl.load(SEQLENS + b * s_sl).to(tl.int64) + n
    ok = (pos >= 0) & (pos < CAP)
    pos = tl.minimum(tl.maximum(pos, 0), CAP - 1)
    if PAGED:
        # the block table is read only for rows that are written (CAP >= 1, NUM_PAGES >= 1: the
        # launcher returns early otherwise)
        page = tl.load(BT + b * s_btb + (pos // PAGE_SIZE) * s_btp, mask=ok, other=0)
        page = tl.minimum(tl.maximum(page, 0), NUM_PAGES - 1).to(tl.int64)
        row = pos % PAGE_SIZE
    else:
        page = b
        row = pos
    hh = tl.arange(0, BLOCK_H)[:, None]
    dd = tl.arange(0, BLOCK_D)[None, :]
    # mask: in-range head/dim and an in-range position (broadcast as a block, not a scalar)
    m = (hh < HKV) & (dd < D) & ((tl.zeros([BLOCK_H, BLOCK_D], tl.int32) + ok.to(tl.int32)) != 0)
    k = tl.load(K + b * s_kb + n * s_kn + hh * s_kh + dd * s_kd, mask=m)
    v = tl.load(V + b * s_vb + n * s_vn + hh * s_vh + dd * s_vd, mask=m)
    kc = KC + page * s_kcp + row * s_kcs + hh * s_kch + dd * s_kcd
    vc = VC + page * s_vcp + row * s_vcs + hh * s_vch + dd * s_vcd
    tl.store(kc, k.to(KC.dtype.element_ty), mask=m)
    tl.store(vc, v.to(VC.dtype.element_ty), mask=m)


def append_kv_triton(k_cache, v_cache, k, v, cache_seqlens, block_table) -> None:
    """Every tensor is read (and the caches written) with its own strides.  Nothing is written
    when there is nothing to write: B, N, Hkv or D = 0, a capacity of 0, or a paged cache
    without pages (specops.append_kv rejects P = 0 with a capacity > 0)."""
    b, n, hkv, d = k.shape
    num_pages, page, cap, bt, s_btb, s_btp = cache_pages(k_cache, cache_seqlens, block_table)
    if b * n * hkv * d == 0 or cap == 0 or num_pages == 0:
        return
    sl, s_sl = vec(cache_seqlens, k)
    launch(
        _append_kv, (b * n,),
        Strided(k_cache), Strided(v_cache), Strided(k), Strided(v), sl, bt,
        *k_cache.stride(), *v_cache.stride(), *k.stride(), *v.stride(), s_sl, s_btb, s_btp,
        n, cap, num_pages,
        HKV=hkv, D=d, BLOCK_H=triton.next_power_of_2(hkv), BLOCK_D=triton.next_power_of_2(d),
        PAGED=block_table is not None, PAGE_SIZE=page, num_warps=4,
    )  # fmt: skip
