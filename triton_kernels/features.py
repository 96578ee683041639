"""Triton kernels of the features family (maths in specops/reference/features.py).

- gather_rows: out[b, j] = src[b, index[b, j]], zeros where the index is -1 or out of range.
- drafter_inputs: out[b, j] = [embedding[tokens[b, j]] | features[b, j] | step_embedding],
  zero embedding rows for token ids outside [0, V); one pass writes every segment.
- feature_cache_write: store[b, p] = feats[b, j], stamps[b, p] = step for p = positions[b, j]
  in [0, capacity) (others skipped).
- path_similarity: VVS Eq. 2 with sum_{i != j} <e_i, e_j> = ||sum_i e_i||^2 - sum_i ||e_i||^2.

Row kernels take ROWS flattened (b, j) rows per program and loop over the feature dim in
BLOCK-wide chunks, so small calls are a handful of programs (cheap in the interpreter too).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from specops.triton_kernels._args import Strided, launch, overlapping, vec

__all__ = [
    "gather_rows_triton",
    "drafter_inputs_triton",
    "feature_cache_write_triton",
    "path_similarity_triton",
]


def _row_blocks(rows: int, width: int) -> tuple[int, int]:
    """(ROWS, BLOCK): about 4096 elements per tile."""
    block = max(16, min(triton.next_power_of_2(max(width, 1)), 2048))
    r = max(1, min(triton.next_power_of_2(max(rows, 1)), 4096 // block, 64))
    return r, block


@triton.jit
def _cast_rne(v, dst_ty: tl.constexpr):
    """v.to(dst_ty), rounded to nearest-even as torch and the C++ twins round.  bfloat16 is
    rounded with integer ops on the float32 bits, r = (bits + 0x7FFF + lsb) >> 16 (NaN -> 0x7FC0,
    torch's): GPUs round a bfloat16 cast to nearest-even, but the Triton interpreter truncates,
    so CI would check other bits than a GPU writes."""
    if dst_ty == tl.bfloat16:
        x = v.to(tl.float32)  # exact from float16 / bfloat16
        bits = x.to(tl.uint32, bitcast=True)
        r = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        r = tl.where(x != x, 0x7FC0, r)
        out = r.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = v.to(dst_ty)
    return out


@triton.jit
def _copy_segment(dst_row, src_row, src_col_stride, width, live, ok, BLOCK: tl.constexpr):
    """dst_row[:, c] = src_row[:, c * stride] (0 where not ok) for c < width, on live rows.
    dst_row / src_row: [ROWS, 1] pointers; live / ok: [ROWS, 1] masks."""
    cols = tl.arange(0, BLOCK)[None, :]
    for c0 in range(0, width, BLOCK):
        c = c0 + cols
        in_w = c < width
        v = tl.load(src_row + c * src_col_stride, mask=live & ok & in_w, other=0.0)
        tl.store(dst_row + c, _cast_rne(v, dst_row.dtype.element_ty), mask=live & in_w)


@triton.jit
def _gather_kernel(
    src,
    index,
    out,
    total,
    M,
    N,
    H,
    s_sb,
    s_sn,
    s_sh,
    s_ib,
    s_im,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    live = r < total
    b = r // M
    j = r % M
    idx = tl.load(index + b * s_ib + j * s_im, mask=live, other=-1).to(tl.int64)
    ok = live & (idx >= 0) & (idx < N)
    idx = tl.where(ok, idx, 0)
    src_row = (src + b * s_sb + idx * s_sn)[:, None]
    out_row = (out + r * H)[:, None]
    _copy_segment(out_row, src_row, s_sh, H, live[:, None], ok[:, None], BLOCK)


def gather_rows_triton(src: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> None:
    """out [B, M, H] contiguous."""
    b, m = index.shape
    n, h = src.shape[1], src.shape[2]
    total = b * m
    if total == 0 or h == 0:
        return
    rows, block = _row_blocks(total, h)
    launch(
        _gather_kernel,
        (triton.cdiv(total, rows),),
        Strided(src),
        Strided(index),
        out,
        total,
        m,
        n,
        h,
        *src.stride(),
        *index.stride(),
        ROWS=rows,
        BLOCK=block,
    )


@triton.jit
def _drafter_kernel(
    emb,
    tokens,
    feats,
    step,
    out,
    total,
    M,
    V,
    E,
    H,
    S,
    s_ev,
    s_ee,
    s_tb,
    s_tm,
    s_fb,
    s_fm,
    s_fh,
    s_sb,
    s_sm,
    s_ss,
    STEP_MODE: tl.constexpr,  # 0: none, 1: [S] broadcast, 2: [B, M, S]
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    live = (r < total)[:, None]
    b = r // M
    j = r % M
    width = E + H + S
    out_row = (out + r * width)[:, None]
    tok = tl.load(tokens + b * s_tb + j * s_tm, mask=r < total, other=-1).to(tl.int64)
    ok = (tok >= 0) & (tok < V)
    tok = tl.where(ok, tok, 0)
    _copy_segment(out_row, (emb + tok * s_ev)[:, None], s_ee, E, live, ok[:, None], BLOCK)
    feat_row = (feats + b * s_fb + j * s_fm)[:, None]
    _copy_segment(out_row + E, feat_row, s_fh, H, live, live, BLOCK)
    if STEP_MODE == 1:
        _copy_segment(out_row + E + H, step + 0 * r[:, None], s_ss, S, live, live, BLOCK)
    elif STEP_MODE == 2:
        step_row = (step + b * s_sb + j * s_sm)[:, None]
        _copy_segment(out_row + E + H, step_row, s_ss, S, live, live, BLOCK)


def drafter_inputs_triton(embedding, tokens, features, step_embedding, out) -> None:
    """out [B, M, E + H + S] contiguous; step_embedding None, [S] or [B, M, S]."""
    b, m = tokens.shape
    v, e = embedding.shape
    h = features.shape[2]
    total = b * m
    if step_embedding is None:
        mode, s, step, ss = 0, 0, embedding, (0, 0, 0)
    elif step_embedding.dim() == 1:
        mode, s, step = 1, step_embedding.shape[0], step_embedding
        ss = (0, 0, step_embedding.stride(0))
    else:
        mode, s, step = 2, step_embedding.shape[2], step_embedding
        ss = tuple(step_embedding.stride())
    if total == 0 or e + h + s == 0:
        return
    rows, block = _row_blocks(total, max(e, h, s))
    launch(
        _drafter_kernel,
        (triton.cdiv(total, rows),),
        Strided(embedding),
        Strided(tokens),
        Strided(features),
        Strided(step),
        out,
        total,
        m,
        v,
        e,
        h,
        s,
        *embedding.stride(),
        *tokens.stride(),
        *features.stride(),
        *ss,
        STEP_MODE=mode,
        ROWS=rows,
        BLOCK=block,
    )


@triton.jit
def _write_kernel(
    store,
    stamps,
    pos,
    feats,
    step_ptr,
    step_value,
    s_step,
    total,
    M,
    CAP,
    H,
    s_xb,
    s_xp,
    s_xh,
    s_tb,
    s_tp,
    s_pb,
    s_pm,
    s_fb,
    s_fm,
    s_fh,
    STEP_MODE: tl.constexpr,  # 0: step_value, 1: step_ptr[0], 2: step_ptr[b * s_step]
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    live = r < total
    b = r // M
    j = r % M
    p = tl.load(pos + b * s_pb + j * s_pm, mask=live, other=-1).to(tl.int64)
    ok = live & (p >= 0) & (p < CAP)
    p = tl.where(ok, p, 0)
    if STEP_MODE == 0:
        st = step_value + 0 * b
    elif STEP_MODE == 1:
        st = tl.load(step_ptr + 0 * b, mask=ok, other=0)
    else:
        st = tl.load(step_ptr + b * s_step, mask=ok, other=0)
    tl.store(stamps + b * s_tb + p * s_tp, st.to(tl.int32), mask=ok)
    cols = tl.arange(0, BLOCK)[None, :]
    src_row = (feats + b * s_fb + j * s_fm)[:, None]
    dst_row = (store + b * s_xb + p * s_xp)[:, None]
    for c0 in range(0, H, BLOCK):
        c = c0 + cols
        msk = ok[:, None] & (c < H)
        v = tl.load(src_row + c * s_fh, mask=msk, other=0.0)
        tl.store(dst_row + c * s_xh, _cast_rne(v, store.dtype.element_ty), mask=msk)


def feature_cache_write_triton(store, stamps, positions, feats, step_t, step_i) -> None:
    """store [B, CAP, H], stamps [B, CAP], positions [B, M], feats [B, M, H] and step_t (None,
    [] / [1] or [B]) with any strides (store and stamps are written in place through theirs:
    they must not have overlapping elements)."""
    b, m = positions.shape
    cap, h = store.shape[1], store.shape[2]
    total = b * m
    if total == 0:
        return
    for name, t in (("FeatureCache.features", store), ("FeatureCache.stamps", stamps)):
        if overlapping(t):
            raise ValueError(f"specops.FeatureCache.write: {name} has overlapping elements")
    if step_t is None:
        mode = 0
    else:
        mode = 1 if step_t.numel() == 1 else 2
    step, s_step = vec(step_t, stamps)
    rows, block = _row_blocks(total, h)
    launch(
        _write_kernel,
        (triton.cdiv(total, rows),),
        Strided(store),
        Strided(stamps),
        Strided(positions),
        Strided(feats),
        step,
        int(step_i),
        s_step,
        total,
        m,
        cap,
        h,
        *store.stride(),
        *stamps.stride(),
        *positions.stride(),
        *feats.stride(),
        STEP_MODE=mode,
        ROWS=rows,
        BLOCK=block,
    )


@triton.jit
def _path_sim_kernel(
    paths,
    codebook,
    out,
    P,
    L,
    V,
    C,
    s_pb,
    s_pp,
    s_pl,
    s_cv,
    s_cc,
    alpha_stride,
    STRIDE: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """One program per request b.  For each sampled position l (0, STRIDE, ...):
    x_p = codebook[paths[b, p, l]] (0 for ids outside [0, V)), e_p = x_p / max(||x_p||, 1e-12),
    S_l = (||sum_p e_p||^2 - sum_p ||e_p||^2) / (P (P - 1)); out = sum_l w_l S_l / sum_l w_l with
    w_l = alpha^l.  float64 throughout (the sums cancel when paths are nearly orthogonal)."""
    b = tl.program_id(0).to(tl.int64)
    pp = tl.arange(0, BLOCK_P)
    cc = tl.arange(0, BLOCK_C)[None, :]
    live_p = pp < P
    w = tl.full([1], 1.0, tl.float64)
    num = tl.zeros([1], tl.float64)
    den = tl.zeros([1], tl.float64)
    a_s = tl.zeros([1], tl.float64) + alpha_stride
    for pos in range(0, L, STRIDE):
        ids = tl.load(paths + b * s_pb + pp * s_pp + pos * s_pl, mask=live_p, other=-1).to(tl.int64)
        ok = live_p & (ids >= 0) & (ids < V)
        ids = tl.where(ok, ids, 0)
        rows = (codebook + ids * s_cv)[:, None]
        # pass 1: ||x_p||^2
        sq = tl.zeros([BLOCK_P], tl.float64)
        for c0 in range(0, C, BLOCK_C):
            c = c0 + cc
            x = tl.load(rows + c * s_cc, mask=ok[:, None] & (c < C), other=0.0).to(tl.float64)
            sq += tl.sum(x * x, axis=1)
        norm = tl.sqrt(sq)
        inv = 1.0 / tl.maximum(norm, 1e-12)
        self_dot = tl.sum(sq * inv * inv, axis=0)  # sum_p ||e_p||^2
        # pass 2: ||sum_p e_p||^2, one chunk of C at a time
        tot = tl.zeros([1], tl.float64)
        for c0 in range(0, C, BLOCK_C):
            c = c0 + cc
            x = tl.load(rows + c * s_cc, mask=ok[:, None] & (c < C), other=0.0).to(tl.float64)
            s = tl.sum(x * inv[:, None], axis=0)
            tot += tl.sum(s * s, axis=0)
        s_l = (tot - self_dot) / (P * (P - 1.0))
        num += w * s_l
        den += w
        w = w * a_s
    tl.store(out + b + tl.arange(0, 1), (num / den).to(tl.float32))


def path_similarity_triton(paths, codebook, alpha: float, stride: int, out) -> None:
    """paths [B, P, L] (P >= 2, L >= 1), codebook [V, C]; out [B] float32."""
    b, p, length = paths.shape
    v, c = codebook.shape
    if b == 0:
        return
    block_p = max(2, triton.next_power_of_2(p))
    block_c = max(16, min(triton.next_power_of_2(max(c, 1)), max(16, 8192 // block_p)))
    launch(
        _path_sim_kernel,
        (b,),
        Strided(paths),
        Strided(codebook),
        out,
        p,
        length,
        v,
        c,
        *paths.stride(),
        *codebook.stride(),
        float(alpha) ** stride,
        STRIDE=stride,
        BLOCK_P=block_p,
        BLOCK_C=block_c,
    )
