"""Triton GSD grouped acceptance (So et al., ICCV 2025): the target and draft mass (P, Q) of a
draft's group, the rule of ``specops/reference/grouped.py`` and of the C++/CUDA
``group_sums`` (csrc/include/specops/prob_math.h), decision for decision.

Order the row by the key (p(y), y): the float32 bits of p >= 0 are monotone as integers, so the
key is one int64, bits above id.  x's window is the w nearest keys below x's and the w nearest
above, found in one pass over the row without sorting it: per tile, the entries that beat the
w-th best kept so far are merged in (w rounds of a maximum); most tiles have none and cost one
comparison per entry.  A member y joins the group iff |p(y) - p(x)| < p_thr (float32) and x and
y are image tokens whose codes' squared distance sum_c (e_x[c] - e_y[c])^2 (float64, c in
order) is below d_thr.  P = p(x) + sum_G p(y), Q = q(x) + sum_G q(y) (Q's terms 1, 0 without
draft probabilities), float64 in the order x, below nearest first, above nearest first, then
rounded to float32; P = Q = 0 for x outside [0, V).  The caller accepts iff u * Q < P.
"""

import triton
import triton.language as tl
from specops.triton_kernels.mass import mass

# Scores: a key below x is kept as itself (largest = nearest), a key above as its negation
# (largest = smallest key = nearest).  Keys lie in [0, 0x7F7FFFFF << 32 | 0xFFFFFFFF], so
# NONE lies below every score of either side.
NONE = tl.constexpr(-0x7FF0000000000000)
# grp's element types (ahead-of-time compiles): codebook, code_rows, code_dim, image_start,
# window, p_thr, d_thr's float64 bits
GROUP_SIGNATURE = ("*fp32", "i32", "i32", "i32", "i32", "fp32", "i64")


@triton.jit
def _keys(p, ids):
    """int64 key (p, id) of p >= 0 (mass: no -0.0, NaN or inf) and int64 ids."""
    return (p.to(tl.int32, bitcast=True).to(tl.int64) << 32) | ids


@triton.jit
def _keep_best(kept, cand, js, n, BLOCK_W: tl.constexpr):
    """The n largest scores of kept [BLOCK_W] and cand [TILE] (NONE: absent), largest first in
    slots 0..n-1, NONE after: n rounds of taking the maximum of both (scores are unique; a
    loop, not unrolled: unrolled, Triton 3.6 spilled on sm_90)."""
    out = tl.full([BLOCK_W], NONE, tl.int64)
    for j in range(0, n):
        best = tl.maximum(tl.max(kept, axis=0), tl.max(cand, axis=0))
        out = tl.where(js == j, best, out)
        kept = tl.where(kept == best, NONE, kept)
        cand = tl.where(cand == best, NONE, cand)
    return out


@triton.jit
def _window(p_row, kx, vocab, js, n, BLOCK_W: tl.constexpr, TILE: tl.constexpr):
    """(below, above) [BLOCK_W] int64 scores: the n nearest keys under kx (nearest first) and
    the n nearest over it, negated (nearest first); NONE where the row runs out."""
    below = tl.full([BLOCK_W], NONE, tl.int64)
    above = tl.full([BLOCK_W], NONE, tl.int64)
    cols = tl.arange(0, TILE)
    for base in range(0, vocab, TILE):
        idx = base + cols
        inside = idx < vocab
        key = _keys(mass(tl.load(p_row + idx, mask=inside, other=0.0).to(tl.float32)), idx)
        # the n-th best kept so far (NONE until n are kept): only scores above it can enter
        worst_below = tl.min(tl.where(js < n, below, -NONE), axis=0)
        cand = tl.where(inside & (key < kx) & (key > worst_below), key, NONE)
        if tl.max(cand, axis=0) > NONE:
            below = _keep_best(below, cand, js, n, BLOCK_W)
        worst_above = tl.min(tl.where(js < n, above, -NONE), axis=0)
        cand = tl.where(inside & (key > kx) & (-key > worst_above), -key, NONE)
        if tl.max(cand, axis=0) > NONE:
            above = _keep_best(above, cand, js, n, BLOCK_W)
    return below, above


@triton.jit
def _members(key, kept, px, xi, x_img, grp, BLOCK_W: tl.constexpr):
    """(ids, p, in-group mask) [BLOCK_W] of one side's window (keys, and kept: not NONE)."""
    codebook, code_rows, code_dim, image_start, window, p_thr, d_thr_bits = grp
    ids = key - ((key >> 32) << 32)
    py = (key >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    yi = ids - image_start
    # (a scalar mask is spread with where: the interpreter rejects vector & scalar as a mask)
    use = tl.where(x_img, kept & (tl.abs(py - px) < p_thr) & (yi >= 0) & (yi < code_rows), False)
    xrow = codebook + tl.where(x_img, xi, 0) * code_dim
    yrow = codebook + tl.where(use, yi, 0) * code_dim
    d = tl.zeros([BLOCK_W], tl.float64)
    for c in range(0, code_dim):  # float64, c in order; every lane reads e_x[c] (one address)
        t = tl.load(xrow + c + 0 * ids, mask=use, other=0.0).to(tl.float64)
        t = t - tl.load(yrow + c, mask=use, other=0.0).to(tl.float64)
        d += t * t
    return ids, py, use & (d < d_thr_bits.to(tl.float64, bitcast=True))


@triton.jit
def group_sums(p_row, q_row, x, vocab, grp, HAS_Q: tl.constexpr, BLOCK_W: tl.constexpr,
               TILE: tl.constexpr):  # fmt: skip
    """(P, Q) float32 of draft x's group in the target row p_row (and draft row q_row).
    ``grp`` = (codebook [code_rows, code_dim] float32 contiguous, code_rows, code_dim,
    image_start, window <= BLOCK_W, p_thr, d_thr as float64 bits)."""
    window = grp[4]
    ok = (x >= 0) & (x < vocab)
    xc = tl.where(ok, x, 0)
    px = mass(tl.load(p_row + xc).to(tl.float32))
    js = tl.arange(0, BLOCK_W)
    n = tl.minimum(window, BLOCK_W)
    below, above = _window(p_row, _keys(px, xc), tl.where(ok, vocab, 0), js, n, BLOCK_W, TILE)
    xi = x - grp[3]
    x_img = ok & (xi >= 0) & (xi < grp[1])
    lo_ids, lo_p, lo_in = _members(below, below != NONE, px, xi, x_img, grp, BLOCK_W)
    hi_ids, hi_p, hi_in = _members(-above, above != NONE, px, xi, x_img, grp, BLOCK_W)
    if HAS_Q:
        qx = mass(tl.load(q_row + xc).to(tl.float32)).to(tl.float64)
        lo_q = mass(tl.load(q_row + lo_ids, mask=lo_in, other=0.0).to(tl.float32))
        hi_q = mass(tl.load(q_row + hi_ids, mask=hi_in, other=0.0).to(tl.float32))
    else:
        qx = tl.full([], 1.0, tl.float64)
        lo_q = tl.zeros([BLOCK_W], tl.float32)
        hi_q = lo_q
    sp = px.to(tl.float64)
    sq = qx
    for j in range(0, n):  # the order: below nearest first
        sp += tl.sum(tl.where(lo_in & (js == j), lo_p, 0.0).to(tl.float64), axis=0)
        sq += tl.sum(tl.where(lo_in & (js == j), lo_q, 0.0).to(tl.float64), axis=0)
    for j in range(0, n):  # then above nearest first
        sp += tl.sum(tl.where(hi_in & (js == j), hi_p, 0.0).to(tl.float64), axis=0)
        sq += tl.sum(tl.where(hi_in & (js == j), hi_q, 0.0).to(tl.float64), axis=0)
    big_p = tl.where(ok, sp, 0.0).to(tl.float32)
    big_q = tl.where(ok, sq, 0.0).to(tl.float32)
    return big_p, big_q


__all__ = ["group_sums", "GROUP_SIGNATURE"]
