"""Triton tree attention: N tree queries against a committed prefix plus their own ancestors.

Semantics: specops/reference/attention.py.  For request b, KV head h and a query row r of the
GQA group (query n = r // G, head h * G + r % G):

    o_r = sum_s softmax_s(c * <q_r, k_s>) v_s,  s over the prefix [0, L_b) and the tree slots
    j (position L_b + j) whose bit j is set in mask row n;  c = sm_scale.

Design: GQA heads packed with the tree tokens into N * G rows; unmasked prefix tiles and
bitmask-masked tree tiles; split-KV over the prefix (NUM_SPLITS from static shapes only, so
CUDA-graph safe) merged by a second kernel; contiguous or paged caches with clamped positions;
a tree-only mode for the cascade backend; any head_dim <= 256.  Each design point, the merge
formulas and the tile configs: docs/triton_kernels.md, "Tree attention".
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from specops.triton_kernels._args import (
    Strided,
    cache_pages,
    check_unit_last,
    launch,
    out_buffer,
    overlapping,
    vec,
)

__all__ = ["tree_attention_triton", "merge_states_triton", "choose_num_splits", "MAX_HEAD_DIM"]

MAX_HEAD_DIM = 256
_LOG2E = 1.4426950408889634


@triton.jit
def _load_kv_tile(
    base,  # pointer to element [b or page 0, row 0, h, 0] of the cache
    bt_row,  # pointer to block_table[b, 0] (paged only)
    kpos,  # [BLOCK_N] logical positions
    col_ok,  # [BLOCK_N] bool, positions to load (others read as 0)
    offs_d,
    s_page,
    s_row,
    s_d,
    s_btp,
    NUM_PAGES,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PAGED: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
):
    if PAGED:
        page = tl.load(bt_row + (kpos // PAGE_SIZE) * s_btp, mask=col_ok, other=0)
        page = tl.minimum(tl.maximum(page, 0), NUM_PAGES - 1).to(tl.int64)
        row_off = page * s_page + (kpos % PAGE_SIZE) * s_row
    else:
        row_off = kpos.to(tl.int64) * s_row
    ptrs = base + row_off[:, None] + offs_d[None, :] * s_d
    if MASKED:
        mask = col_ok[:, None]
        if BLOCK_D != D:
            mask = mask & (offs_d[None, :] < D)
        return tl.load(ptrs, mask=mask, other=0.0)
    elif BLOCK_D != D:
        return tl.load(ptrs, mask=offs_d[None, :] < D, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def _load_kv_tiles(k_base, v_base, bt_row, kpos, col_ok, offs_d, s_kp, s_ks, s_kd, s_vp, s_vs,
                   s_vd, s_btp, NUM_PAGES, D: tl.constexpr, BLOCK_D: tl.constexpr,
                   PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """The K and the V tile of positions ``kpos`` (``_load_kv_tile`` twice)."""
    k = _load_kv_tile(k_base, bt_row, kpos, col_ok, offs_d, s_kp, s_ks, s_kd, s_btp, NUM_PAGES,
                      D, BLOCK_D, PAGED, PAGE_SIZE, MASKED)  # fmt: skip
    v = _load_kv_tile(v_base, bt_row, kpos, col_ok, offs_d, s_vp, s_vs, s_vd, s_btp, NUM_PAGES,
                      D, BLOCK_D, PAGED, PAGE_SIZE, MASKED)  # fmt: skip
    return k, v


@triton.jit
def _online_softmax_step(acc, l_i, m_i, q, k, v, qk_scale, vis, USE_VIS: tl.constexpr, PREC):
    # x = c log2(e) <q, k>; masked entries -inf; a fully masked row keeps m = -inf, l = 0.
    x = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
    if USE_VIS:
        x = tl.where(vis, x, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(x, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(x - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return acc, l_i, m_new


@triton.jit
def _tree_attn_fwd(
    Q,
    K,
    V,
    SEQLENS,
    MASK,
    BT,
    OUT,
    LSE,
    qk_scale,
    s_qb,
    s_qn,
    s_qh,
    s_qd,
    s_kp,
    s_ks,
    s_kh,
    s_kd,
    s_vp,
    s_vs,
    s_vh,
    s_vd,
    s_mb,
    s_mn,
    s_mw,
    s_sl,
    s_btb,
    s_btp,
    s_osplit,
    s_ob,
    s_on,
    s_oh,
    s_lsplit,
    s_lb,
    s_ln,
    N,
    HKV,
    CAP,
    NUM_PAGES,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    PAGED: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    PREC: tl.constexpr,
    TREE_ONLY: tl.constexpr,
):
    pid_m = tl.program_id(0)
    split = tl.program_id(1)
    bh = tl.program_id(2)
    b = bh // HKV
    h = bh % HKV
    b64 = b.to(tl.int64)

    # packed GQA rows: r = n * G + g  ->  query n, head h * G + g
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < N * G
    row_n = rows // G
    head = h * G + rows % G
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    q_ptrs = Q + b64 * s_qb + row_n[:, None] * s_qn + head[:, None] * s_qh + offs_d[None, :] * s_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    # clamped in its own dtype (an int64 never wraps into range) to [-N, CAP]: the tree slots
    # sit at seqlen + j, visible only inside [0, CAP) (a negative length hides the slots below
    # 0, as in the reference); the prefix is [0, max(seqlen, 0))
    seqlen = tl.load(SEQLENS + b64 * s_sl)
    seqlen = tl.minimum(tl.maximum(seqlen, -N), CAP).to(tl.int32)
    prefix_len = tl.maximum(seqlen, 0)

    if PAGED:
        k_base = K + h.to(tl.int64) * s_kh
        v_base = V + h.to(tl.int64) * s_vh
        bt_row = BT + b64 * s_btb
    else:
        k_base = K + b64 * s_kp + h.to(tl.int64) * s_kh
        v_base = V + b64 * s_vp + h.to(tl.int64) * s_vh
        bt_row = BT

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    no_vis = tl.zeros([BLOCK_M, BLOCK_N], tl.int1)

    if not TREE_ONLY:  # tree-only mode (the cascade's tree part) skips the prefix
        # prefix chunk of this split: [lo, hi), chunk a multiple of BLOCK_N
        chunk = tl.cdiv(tl.cdiv(prefix_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
        lo = split * chunk
        hi = tl.minimum(lo + chunk, prefix_len)
        full_end = lo + tl.maximum(hi - lo, 0) // BLOCK_N * BLOCK_N
        for start in range(lo, full_end, BLOCK_N):  # full prefix tiles: no mask
            kpos = start + offs_n
            k, v = _load_kv_tiles(
                k_base, v_base, bt_row, kpos, kpos < CAP, offs_d, s_kp, s_ks, s_kd, s_vp, s_vs,
                s_vd, s_btp, NUM_PAGES, D, BLOCK_D, PAGED, PAGE_SIZE, False,
            )  # fmt: skip
            acc, l_i, m_i = _online_softmax_step(
                acc, l_i, m_i, q, k, v, qk_scale, no_vis, False, PREC
            )
        if full_end < hi:  # the partial last prefix tile: columns s < hi
            kpos = full_end + offs_n
            col_ok = kpos < hi
            k, v = _load_kv_tiles(
                k_base, v_base, bt_row, kpos, col_ok, offs_d, s_kp, s_ks, s_kd, s_vp, s_vs, s_vd,
                s_btp, NUM_PAGES, D, BLOCK_D, PAGED, PAGE_SIZE, True,
            )  # fmt: skip
            vis = tl.broadcast_to(col_ok[None, :], (BLOCK_M, BLOCK_N))
            acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, q, k, v, qk_scale, vis, True, PREC)

    if split == NUM_SPLITS - 1:
        # tree slots j at positions seqlen + j: visible iff bit j of mask row n (and in range)
        mask_row = MASK + b64 * s_mb + row_n * s_mn
        for t0 in range(0, N, BLOCK_N):
            j = t0 + offs_n
            kpos = seqlen + j
            col_ok = (j < N) & (kpos >= 0) & (kpos < CAP)
            k, v = _load_kv_tiles(
                k_base, v_base, bt_row, kpos, col_ok, offs_d, s_kp, s_ks, s_kd, s_vp, s_vs, s_vd,
                s_btp, NUM_PAGES, D, BLOCK_D, PAGED, PAGE_SIZE, True,
            )  # fmt: skip
            # bit j of row n: one [BLOCK_M] word vector per 32 columns (t0 is a multiple of 32)
            vis = tl.zeros([BLOCK_M, BLOCK_N], tl.int1)
            for w in tl.static_range(BLOCK_N // 32):
                w_ok = row_ok & (t0 + 32 * w + 0 * row_n < N)  # a vector mask
                word = tl.load(mask_row + (t0 // 32 + w) * s_mw, mask=w_ok, other=0)
                bit = (word[:, None] >> ((offs_n[None, :] - 32 * w) & 31)) & 1
                in_word = (offs_n[None, :] >= 32 * w) & (offs_n[None, :] < 32 * w + 32)
                vis = vis | ((bit != 0) & in_word)
            vis = vis & col_ok[None, :]
            acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, q, k, v, qk_scale, vis, True, PREC)

    # o = acc / l, lse = ln2 * (m + log2 l); rows that saw nothing (l = 0): o = 0, lse = -inf.
    # A NaN l (NaN scores) is not "nothing": o and lse stay NaN (IEEE, as the reference)
    has = ~(l_i <= 0.0)
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    log2_l = tl.math.log2(tl.where(has, l_i, 1.0))
    lse = tl.where(has, (m_i + log2_l) * 0.6931471805599453, -float("inf"))
    o_ptrs = (
        OUT
        + split.to(tl.int64) * s_osplit
        + b64 * s_ob
        + row_n[:, None] * s_on
        + head[:, None] * s_oh
        + offs_d[None, :]
    )
    tl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    l_ptrs = LSE + split.to(tl.int64) * s_lsplit + b64 * s_lb + row_n * s_ln + head
    tl.store(l_ptrs, lse, mask=row_ok)


@triton.jit
def _merge_splits(
    O_PART,
    LSE_PART,
    OUT,
    LSE,
    R,
    s_osplit,
    s_lsplit,
    D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # lse = log sum_s e^lse_s,  o = sum_s e^(lse_s - lse) o_s   (online over s; rows flat)
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < R
    offs_d = tl.arange(0, BLOCK_D)
    ok2 = row_ok[:, None] & (offs_d[None, :] < D)
    m = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, BLOCK_D], tl.float32)
    rows64 = rows.to(tl.int64)
    for s in range(NUM_SPLITS):
        lse_s = tl.load(LSE_PART + s * s_lsplit + rows64, mask=row_ok, other=float("-inf"))
        o_s = tl.load(O_PART + s * s_osplit + rows64[:, None] * D + offs_d[None, :], mask=ok2)
        m_new = tl.maximum(m, lse_s)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_use)
        w = tl.exp(lse_s - m_use)
        acc = acc * alpha[:, None] + w[:, None] * o_s
        l_i = l_i * alpha + w
        m = m_new
    has = ~(l_i <= 0.0)  # NaN stays NaN, only an empty row (l = 0) gives 0 / -inf
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m + tl.log(tl.where(has, l_i, 1.0)), -float("inf"))
    tl.store(OUT + rows64[:, None] * D + offs_d[None, :], o.to(OUT.dtype.element_ty), mask=ok2)
    tl.store(LSE + rows64, lse, mask=row_ok)


@triton.jit
def _merge_two_states(
    OA,
    LA,
    OB,
    LB,
    OUT,
    LSE,
    R,
    N,
    H,
    s_oab,
    s_oan,
    s_oah,
    s_lab,
    s_lan,
    s_lah,
    s_obb,
    s_obn,
    s_obh,
    s_lbb,
    s_lbn,
    s_lbh,
    s_ob,
    s_on,
    s_oh,
    s_lb,
    s_ln,
    s_lh,
    D: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # two softmax states of the same rows (b, n, h): m = max(lse_a, lse_b),
    # w_x = e^(lse_x - m), o = (w_a o_a + w_b o_b) / (w_a + w_b), lse = m + log(w_a + w_b).
    # An lse of +inf or NaN (flash-attn's value for a row with no key) counts as -inf: no keys.
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_ok = rows < R
    b = rows // (N * H)
    n = (rows // H) % N
    h = rows % H
    offs_d = tl.arange(0, BLOCK_D)
    ok2 = row_ok[:, None] & (offs_d[None, :] < D)
    la = tl.load(LA + b * s_lab + n * s_lan + h * s_lah, mask=row_ok, other=float("-inf"))
    lb = tl.load(LB + b * s_lbb + n * s_lbn + h * s_lbh, mask=row_ok, other=float("-inf"))
    la = tl.where(la < float("inf"), la, float("-inf")).to(tl.float32)
    lb = tl.where(lb < float("inf"), lb, float("-inf")).to(tl.float32)
    m = tl.maximum(la, lb)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    wa = tl.exp(la - m_use)
    wb = tl.exp(lb - m_use)
    oa = tl.load(OA + (b * s_oab + n * s_oan + h * s_oah)[:, None] + offs_d[None, :], mask=ok2)
    ob = tl.load(OB + (b * s_obb + n * s_obn + h * s_obh)[:, None] + offs_d[None, :], mask=ok2)
    # an empty state's o may hold anything: it enters only where its weight is > 0
    acc = tl.where(wa[:, None] > 0.0, wa[:, None] * oa.to(tl.float32), 0.0)
    acc += tl.where(wb[:, None] > 0.0, wb[:, None] * ob.to(tl.float32), 0.0)
    l_i = wa + wb
    has = l_i > 0.0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_use + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    o_ptrs = OUT + (b * s_ob + n * s_on + h * s_oh)[:, None] + offs_d[None, :]
    tl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=ok2)
    tl.store(LSE + b * s_lb + n * s_ln + h * s_lh, lse, mask=row_ok)


_SM_COUNT: dict = {}


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: a few splits, so tests exercise the merge
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


# The GPU generation the interpreter (CPU tensors) picks tiles for; tests/triton_specs.py sets it
# to record each target's launches.
INTERPRETER_ARCH = 90


@functools.cache
def _arch_of(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor


def device_arch(device: torch.device) -> int:
    if device.type != "cuda":
        return INTERPRETER_ARCH
    return _arch_of(device.index if device.index is not None else torch.cuda.current_device())


def _config(
    n: int, g: int, d: int, dtype: torch.dtype, arch: int = 90
) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D, num_warps, num_stages) from static shapes and the target.
    Chosen so that ptxas reports no register spills for fp16/bf16 at D <= 256 on sm_80 and
    sm_90 (every served shape is compiled for both without a GPU by tests/triton_specs.py,
    docs/triton_resources.md; not tuned by timing).  float32 (for tests) takes the exact
    ("ieee") dot without tensor cores and small tiles."""
    block_d = max(16, triton.next_power_of_2(d))
    block_m = max(16, triton.next_power_of_2(n * g))
    if dtype == torch.float32:
        block_m = min(block_m, 64)
        return block_m, 32, block_d, 8 if block_m == 64 else 4, 2
    if block_d <= 128:
        if arch < 90 and block_d == 128:
            # mma.sync (sm_80) at D = 128: 128-row tiles spill 44 B at 8 warps, 64-row tiles
            # at 4 warps 304 B; 64 rows at 8 warps spill nothing
            block_m = min(block_m, 64)
            return block_m, 64, block_d, 8 if block_m == 64 else 4, 3
        block_m = min(block_m, 128)  # one warpgroup per 64 rows (wgmma M = 64)
        return block_m, 64, block_d, 8 if block_m == 128 else 4, 3
    block_m = 16 if block_m <= 16 else 64
    return block_m, 32, block_d, 4 if block_m == 16 else 8, 2


def choose_num_splits(
    batch: int,
    hkv: int,
    hq: int,
    n: int,
    m_blocks: int,
    capacity: int,
    block_n: int,
    elem_bytes: int,
    device,
) -> int:
    """Prefix splits from static shapes only (never from cache_seqlens): enough programs for
    about two waves of SMs, but each split at least 4 K/V tiles of a full cache, the partial
    outputs (4-byte o and lse per split, written and read back) at most the K/V bytes of a
    full cache (cap * Hkv * D * 2 tensors * elem per request vs splits * N * Hq * D * 4 * 2),
    and at most 64 splits."""
    progs = batch * hkv * m_blocks
    sms = _sm_count(torch.device(device))
    if progs >= sms:
        return 1
    want = triton.cdiv(2 * sms, progs)
    by_len = capacity // (4 * block_n)
    by_traffic = (capacity * hkv * elem_bytes) // (4 * n * hq)
    return max(1, min(want, by_len, by_traffic, 64))


def tree_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    mask_bits: torch.Tensor,
    block_table: torch.Tensor | None,
    sm_scale: float,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    num_splits: int | None = None,
    tree_only: bool = False,
) -> None:
    """Fill ``out`` [B, N, Hq, D] (q's dtype or float32) and ``lse`` [B, N, Hq] float32 (written
    in place when contiguous, else through a temporary).  Inputs are checked by
    specops.ops.attention and read with their strides (q, caches, cache_seqlens, mask_bits,
    block_table: any layout).  ``tree_only``: attend only to the N tree slots at L_b + j (with
    the ancestor mask), not to the prefix [0, L_b) (one split; the cascade backend merges this
    with a prefix computed elsewhere).  A cache of capacity 0 shows no key to any query: out 0,
    lse -inf."""
    b, n, hq, d = q.shape
    hkv = k_cache.shape[2]
    g = hq // hkv if hkv else 0
    paged = block_table is not None
    num_pages, page, cap, bt, s_btb, s_btp = cache_pages(k_cache, cache_seqlens, block_table)
    if b * n * hq == 0:
        return
    if cap == 0 or (paged and num_pages == 0):
        # nothing to attend to (specops.tree_attention rejects P = 0 with cap > 0)
        out.zero_()
        lse.fill_(float("-inf"))
        return
    o_res, o_back = out_buffer("tree_attention", "out", out)
    l_res, l_back = out_buffer("tree_attention", "lse", lse)
    sl, s_sl = vec(cache_seqlens, q)
    block_m, block_n, block_d, num_warps, num_stages = _config(
        n, g, d, q.dtype, device_arch(q.device)
    )
    m_blocks = triton.cdiv(n * g, block_m)
    if tree_only:
        num_splits = 1
    elif num_splits is None:
        num_splits = choose_num_splits(
            b, hkv, hq, n, m_blocks, cap, block_n, q.element_size(), q.device
        )
    s_mb = mask_bits.stride(0) if mask_bits.shape[0] > 1 else 0
    prec = "ieee" if q.dtype == torch.float32 else "tf32"
    qk_scale = sm_scale * _LOG2E
    if num_splits == 1:
        o_t, l_t = o_res, l_res
        o_strides = (0, o_t.stride(0), o_t.stride(1), o_t.stride(2))
        l_strides = (0, l_t.stride(0), l_t.stride(1))
    else:
        o_t = torch.empty((num_splits, b, n, hq, d), dtype=torch.float32, device=q.device)
        l_t = torch.empty((num_splits, b, n, hq), dtype=torch.float32, device=q.device)
        o_strides = o_t.stride()[:4]
        l_strides = l_t.stride()[:3]
    grid = (m_blocks, num_splits, b * hkv)
    launch(
        _tree_attn_fwd, grid,
        Strided(q), Strided(k_cache), Strided(v_cache), sl, Strided(mask_bits), bt, o_t, l_t,
        qk_scale,
        *q.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        s_mb, mask_bits.stride(1), mask_bits.stride(2),
        s_sl,
        s_btb, s_btp,
        *o_strides,
        *l_strides,
        n, hkv, cap, num_pages,
        G=g, D=d, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        NUM_SPLITS=num_splits, PAGED=paged, PAGE_SIZE=page, PREC=prec, TREE_ONLY=tree_only,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    if num_splits > 1:
        rows = b * n * hq
        merge_rows = 16
        launch(
            _merge_splits, (triton.cdiv(rows, merge_rows),),
            o_t, l_t, o_res, l_res, rows, o_t.stride(0), l_t.stride(0),
            D=d, NUM_SPLITS=num_splits, ROWS=merge_rows, BLOCK_D=block_d, num_warps=4,
        )  # fmt: skip
    if o_back is not None:
        o_back.copy_(o_res)
    if l_back is not None:
        l_back.copy_(l_res)


def merge_states_triton(
    out_a: torch.Tensor,
    lse_a: torch.Tensor,
    out_b: torch.Tensor,
    lse_b: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
) -> None:
    """Merge two attention states of the same rows into ``out`` / ``lse`` (one launch).

    out_* [B, N, H, D] (any float dtype, last dim contiguous, other strides free), lse_*
    [B, N, H] (any strides: flash-attn's [B, H, N] lse passes as ``lse.transpose(1, 2)``),
    out [B, N, H, D] (last dim contiguous), lse [B, N, H] float32 (any strides).  An lse of +inf
    or NaN counts as a state with no keys (flash-attn writes +inf there)."""
    b, n, h, d = out.shape
    rows = b * n * h
    if rows == 0:
        return
    for name, t in (("out_a", out_a), ("out_b", out_b), ("out", out)):
        check_unit_last("merge_states", name, t)
    for name, t in (("out", out), ("lse", lse)):
        if overlapping(t):
            raise ValueError(f"specops.merge_states: {name} has overlapping elements")
    merge_rows = 16
    launch(
        _merge_two_states, (triton.cdiv(rows, merge_rows),),
        Strided(out_a), Strided(lse_a), Strided(out_b), Strided(lse_b), Strided(out),
        Strided(lse), rows, n, h,
        *out_a.stride()[:3], *lse_a.stride(),
        *out_b.stride()[:3], *lse_b.stride(),
        *out.stride()[:3], *lse.stride(),
        D=d, ROWS=merge_rows, BLOCK_D=max(16, triton.next_power_of_2(d)), num_warps=4,
    )  # fmt: skip
