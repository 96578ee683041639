"""Triton probs_from_logits: CFG combine, temperature, top-k, top-p and softmax in one kernel.

One program per row, no sort, for top-p without a top-k (or after one of 4096 or more);
otherwise probs_split.py's [rows, G] chunks (this kernel leaves most of a GPU idle).
Semantics: specops/reference/probs.py.  The row is never stored between passes: every pass
re-reads the logits and recomputes ``x = (u + s * (c - u)) / T`` (float32, no fused
multiply-add) and its order-preserving 32-bit key ``key(x)``, so "x >= tau" tests are exact.

Passes: 0. max, arg-max, online softmax sum and the top-k radix histogram; 1. top-k by radix
select on the key, 8 bits a level (ties of the k-th value kept); 2. Z over the survivors;
3. top-p by a pivot search on the mass, ending exactly at tau_p; 4. the write.  NaN
parameters: temperature 1.0, no top-p, no guidance, as in the reference.  Each pass in full
(digit picks, pivot invariants): docs/triton_kernels.md, "Logits to probabilities, one program
a row".
"""

import torch
import triton
import triton.language as tl
from specops.triton_kernels._args import Strided, check_unit_last, launch, unit_rows, vec

GREEDY_TEMPERATURE = 1e-5  # as specops.reference.probs.GREEDY_TEMPERATURE
_U32_MAX = tl.constexpr(0xFFFFFFFF)


@triton.jit
def _key(x):
    """Order-preserving uint32 key of a float32 (no NaN; -0.0 already folded into +0.0)."""
    u = x.to(tl.uint32, bitcast=True)
    # u ^ 0xFFFFFFFF is ~u: Triton 3.6's interpreter cannot build ~ of an unsigned int
    return tl.where((u >> 31) != 0, u ^ _U32_MAX, u | 0x80000000)


@triton.jit
def _unkey(k):
    """Inverse of _key."""
    u = tl.where((k >> 31) != 0, k & 0x7FFFFFFF, k ^ _U32_MAX)
    return u.to(tl.float32, bitcast=True)


@triton.jit
def _row_x(c_row, u_row, idx, valid, s, t_div, CFG: tl.constexpr):
    """x = (u + s * (c - u)) / T in float32; -inf outside the row and where c or u is -inf.
    A NaN s is no guidance: x = c / T."""
    c = tl.load(c_row + idx, mask=valid, other=float("-inf")).to(tl.float32)
    if CFG:
        u = tl.load(u_row + idx, mask=valid, other=float("-inf")).to(tl.float32)
        masked = (c == float("-inf")) | (u == float("-inf"))
        c0 = tl.where(masked, 0.0, c)
        u = tl.where(masked, 0.0, u)
        d = c0 - u
        e = s * d
        lg = tl.where(masked, float("-inf"), u + e)
        lg = tl.where(s != s, c, lg)  # NaN cfg_scale: no guidance
    else:
        lg = c
    if t_div != 1.0:  # IEEE division (as torch's), skipped for T = 1 (LlamaGen's default)
        x = tl.math.div_rn(lg, t_div)
    else:
        x = lg
    return tl.where(x == 0.0, 0.0, x)


@triton.jit
def _block_stats(x, idx, valid, vocab, m, arg, ssum, hist, topk_on, TOPK: tl.constexpr):
    """Pass 0 over one block of x: running max m, arg-max (lowest index on ties), the online
    softmax sum (rows without top-k) and the radix level-0 histogram (top-k rows)."""
    bm = tl.max(x, 0)
    barg = tl.min(tl.where(x == bm, idx, vocab), 0).to(tl.int32)
    arg = tl.where(bm > m, barg, arg)  # strict: an earlier block keeps ties
    m_new = tl.maximum(m, bm)
    if ~topk_on:
        # s <- s e^(m - m') + sum e^(x - m'); nothing to add while m' = -inf
        fin = m_new > -float("inf")
        m_safe = tl.where(fin, m_new, 0.0)
        ssum = tl.where(fin, ssum * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), 0), 0.0)
    if TOPK:
        if topk_on:
            hist += tl.histogram((_key(x) >> 24).to(tl.int32), 256, mask=valid)
    return m_new, arg, ssum, hist


@triton.jit
def _request_params(req, vocab, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val, s_ptr,
                    s_stride, s_val, CFG: tl.constexpr, TOPK: tl.constexpr,
                    T_PTR: tl.constexpr, K_PTR: tl.constexpr, S_PTR: tl.constexpr):  # fmt: skip
    """(cfg scale s, temperature divisor, greedy, k, top-k on) of request ``req``: a NaN
    temperature is 1.0, T < 1e-5 is greedy (no top-k), k outside [1, V) is no top-k."""
    if T_PTR:
        temp = tl.load(t_ptr + req * t_stride).to(tl.float32)
    else:
        temp = tl.full([], t_val, tl.float32)
    temp = tl.where(temp != temp, 1.0, temp)  # NaN temperature: 1.0
    greedy = temp < 1e-5
    t_div = tl.where(greedy, 1.0, temp)
    s = 1.0
    if CFG:
        if S_PTR:
            s = tl.load(s_ptr + req * s_stride).to(tl.float32)
        else:
            s = tl.full([], s_val, tl.float32)
    if TOPK:
        if K_PTR:
            k = tl.load(k_ptr + req * k_stride).to(tl.int32)
        else:
            k = tl.full([], k_val, tl.int32)
        topk_on = (k >= 1) & (k < vocab) & ~greedy
    else:
        k = tl.full([], 0, tl.int32)
        topk_on = greedy & ~greedy
    return s, t_div, greedy, k, topk_on


@triton.jit
def _pick_digit(hist, r, NB: tl.constexpr):
    """Radix step: the digit j with #(digit > j) < r <= #(digit >= j); returns
    (j, r - #(digit > j), whether exactly the whole bin j is needed)."""
    bins = tl.arange(0, NB)
    ge = tl.cumsum(hist, 0, reverse=True)  # ge[b] = #(digit >= b)
    j = tl.max(tl.where(ge >= r, bins, 0), 0)
    ge_j = tl.sum(tl.where(bins == j, ge, 0), 0)
    h_j = tl.sum(tl.where(bins == j, hist, 0), 0)
    r_new = r - (ge_j - h_j)
    return j, r_new, r_new == h_j


@triton.jit
def _param(req, ptr, stride, value, IS_PTR: tl.constexpr):
    """A float32 per-request parameter: entry ``req`` of a tensor, or the value."""
    if IS_PTR:
        return tl.load(ptr + req * stride).to(tl.float32)
    return tl.full([], value, tl.float32)


@triton.jit
def _topp_pivot(c_row, u_row, vocab, s, t_div, tau, m, mn, z, p, CFG: tl.constexpr,
                PBLOCK: tl.constexpr, NPIV: tl.constexpr):  # fmt: skip
    """(tau_p, Z_p): the largest key t with M(t) >= p * Z, M(t) = sum of e^(x - m) over the
    survivors (key >= tau) with key >= t, and M(tau_p), by a pivot search over the row (each
    round one pass, NPIV pivots in (lo, hi]: M(lo) >= target > M(hi + 1) throughout).  ``mn``
    the row's least finite x, ``z`` = M(tau); p <= 0 keeps the arg-max ties (any target in
    (0, 1] does, since w_max = 1)."""
    target = tl.maximum(p * z, 1e-30)
    lo = tl.maximum(tau, _key(mn))  # M(lo) = Z >= target
    hi = _key(m)  # tau_p <= key(m)
    m_lo = z
    jv = tl.arange(0, NPIV)
    frac = (jv + 1).to(tl.float32) / NPIV
    while lo < hi:
        # pivots in (lo, hi]: value-spaced, the key midpoint, and hi (the last one)
        xlo = _unkey(lo)
        xhi = _unkey(hi)
        fv = xlo + (xhi - xlo) * frac
        kv = _key(tl.where(fv == 0.0, 0.0, fv))
        kv = tl.where(jv == NPIV - 2, lo + (hi - lo + 1) // 2, kv)
        kv = tl.minimum(tl.maximum(kv, lo + 1), hi)
        mass = tl.zeros([NPIV], dtype=tl.float32)
        a = tl.full([NPIV], _U32_MAX, tl.uint32)
        b = tl.zeros([NPIV], dtype=tl.uint32)
        for base in range(0, vocab, PBLOCK):
            idx = base + tl.arange(0, PBLOCK)
            valid = idx < vocab
            x = _row_x(c_row, u_row, idx, valid, s, t_div, CFG)
            key = _key(x)
            surv = valid & (key >= tau)
            w = tl.where(surv, tl.exp(x - m), 0.0)
            ge = key[:, None] >= kv[None, :]
            mass += tl.sum(tl.where(ge, w[:, None], 0.0), 0)
            kb = key[:, None]
            a = tl.minimum(a, tl.min(tl.where(ge & surv[:, None], kb, _U32_MAX), 0))
            b = tl.maximum(b, tl.max(tl.where(~ge & surv[:, None], kb, 0), 0))
        ok = mass >= target
        best = tl.max(tl.where(ok, kv, 0), 0)  # pivots are >= 1, so 0 = none
        sel = ok & (kv == best)
        a_best = tl.min(tl.where(sel, a, _U32_MAX), 0)
        m_best = tl.max(tl.where(sel, mass, 0.0), 0)
        m_lo = tl.where(best > 0, m_best, m_lo)
        lo = tl.where(best > 0, tl.maximum(lo, a_best), lo)
        hi = tl.minimum(hi, tl.min(tl.where(ok, _U32_MAX, b), 0))
    return lo, m_lo


@triton.jit
def _probs_kernel(
    cond,
    uncond,
    c_stride,
    u_stride,
    out,
    o_stride,
    vocab,
    rows_per_req,
    t_ptr,
    t_stride,
    t_val,
    k_ptr,
    k_stride,
    k_val,
    p_ptr,
    p_stride,
    p_val,
    s_ptr,
    s_stride,
    s_val,
    CFG: tl.constexpr,
    TOPK: tl.constexpr,
    TOPP: tl.constexpr,
    T_PTR: tl.constexpr,
    K_PTR: tl.constexpr,
    P_PTR: tl.constexpr,
    S_PTR: tl.constexpr,
    BLOCK: tl.constexpr,
    PBLOCK: tl.constexpr,
    NPIV: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    req = row // rows_per_req
    c_row = cond + row * c_stride
    u_row = uncond + row * u_stride
    o_row = out + row * o_stride
    cols = tl.arange(0, BLOCK)

    s, t_div, greedy, k, topk_on = _request_params(
        req, vocab, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val, s_ptr, s_stride, s_val, CFG,
        TOPK, T_PTR, K_PTR, S_PTR,
    )  # fmt: skip

    # pass 0: max, arg-max, min finite, online softmax sum, radix level 0 ---------------------
    m = tl.full([], -float("inf"), tl.float32)
    mn = tl.full([], float("inf"), tl.float32)
    arg = tl.full([], 0, tl.int32)
    ssum = tl.full([], 0.0, tl.float32)
    hist = tl.zeros([256], dtype=tl.int32)
    for base in range(0, vocab, BLOCK):
        idx = base + cols
        valid = idx < vocab
        x = _row_x(c_row, u_row, idx, valid, s, t_div, CFG)
        mn = tl.minimum(mn, tl.min(tl.where(x > -float("inf"), x, float("inf")), 0))
        m, arg, ssum, hist = _block_stats(x, idx, valid, vocab, m, arg, ssum, hist, topk_on, TOPK)
    onehot = greedy | (m == -float("inf"))
    m_safe = tl.where(onehot, 0.0, m)

    # top-k: radix select of the k-th largest key, 8 bits a level -----------------------------
    tau = tl.full([], 0, tl.uint32)  # keep key >= tau (0: everything)
    if TOPK:
        if topk_on & ~onehot:
            j, r, done = _pick_digit(hist, k, 256)
            prefix = j.to(tl.uint32)
            tau = prefix << 24
            for lv in tl.static_range(1, 4):
                if ~done:
                    hist = tl.zeros([256], dtype=tl.int32)
                    for base in range(0, vocab, BLOCK):
                        idx = base + cols
                        valid = idx < vocab
                        key = _key(_row_x(c_row, u_row, idx, valid, s, t_div, CFG))
                        member = valid & ((key >> (32 - 8 * lv)) == prefix)
                        digit = ((key >> (24 - 8 * lv)) & 255).to(tl.int32)
                        hist += tl.histogram(digit, 256, mask=member)
                    j, r, done = _pick_digit(hist, r, 256)
                    prefix = (prefix << 8) | j.to(tl.uint32)
                    tau = prefix << (24 - 8 * lv)

    # Z: softmax normaliser of the top-k survivors ---------------------------------------------
    z = ssum
    if TOPK:
        if topk_on & ~onehot:
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for base in range(0, vocab, BLOCK):
                idx = base + cols
                valid = idx < vocab
                x = _row_x(c_row, u_row, idx, valid, s, t_div, CFG)
                acc += tl.where(valid & (_key(x) >= tau), tl.exp(x - m_safe), 0.0)
            z = tl.sum(acc, 0)

    # top-p: pivot search on the survivors' mass ------------------------------------------------
    if TOPP:
        p = _param(req, p_ptr, p_stride, p_val, P_PTR)
        if (p < 1.0) & ~onehot:  # a NaN p is inactive: no top-p
            tau, z = _topp_pivot(c_row, u_row, vocab, s, t_div, tau, m, mn, z, p, CFG, PBLOCK,
                                 NPIV)  # fmt: skip

    # write ---------------------------------------------------------------------------------
    inv_z = 1.0 / tl.where(onehot, 1.0, z)
    for base in range(0, vocab, BLOCK):
        idx = base + cols
        valid = idx < vocab
        if onehot:
            pr = tl.where(idx == arg, 1.0, 0.0)
        else:
            x = _row_x(c_row, u_row, idx, valid, s, t_div, CFG)
            pr = tl.where(_key(x) >= tau, tl.exp(x - m_safe) * inv_z, 0.0)
        tl.store(o_row + idx, pr, mask=valid)


def launch_rows(cond, uncond, out, block):
    """Both launchers' normalisation: logits rows with a unit last stride, ``out`` checked, and
    the tile (default: the vocabulary's power of two, 16 to 4096)."""
    check_unit_last("probs_from_logits", "out", out)
    uncond = unit_rows(uncond) if uncond is not None else None
    if block is None:
        block = min(4096, max(16, triton.next_power_of_2(cond.shape[-1])))
    return unit_rows(cond), uncond, block


def param_arg(v, default, cond):
    """A per-request parameter as the kernels take it: (pointer, stride, value, is a tensor).
    A tensor is read with its stride (``value`` unused); a Python number or None (``default``)
    is passed by value (the pointer, ``cond``, never read)."""
    if isinstance(v, torch.Tensor):
        ptr, stride = vec(v, cond)
        return ptr, stride, default, True
    return Strided(cond), 0, (default if v is None else v), False


def probs_triton(cond, uncond, t, k, p, s, rows_per_req, out, *, block=None, pblock=None, npiv=8):
    """cond/uncond [R, V] (any strides), out [R, V] float32 (any row stride, unit stride in V).
    t, k, p, s: a [B] tensor (float32 / int32, any stride) or a Python scalar; k None = no
    top-k, p None = no top-p, uncond None = no CFG."""
    rows, vocab = cond.shape
    if rows == 0:
        return out
    cond, uncond, block = launch_rows(cond, uncond, out, block)
    # the top-p passes hold [PBLOCK, NPIV] tiles: smaller on a GPU (registers); the interpreter
    # pays per loop iteration, so there it keeps the big block
    if pblock is None:
        pblock = block if cond.device.type == "cpu" else min(block, 8192 // npiv)

    t_ptr, t_st, t_val, t_is = param_arg(t, 1.0, cond)
    k_ptr, k_st, k_val, k_is = param_arg(k, 0, cond)
    p_ptr, p_st, p_val, p_is = param_arg(p, 1.0, cond)
    s_ptr, s_st, s_val, s_is = param_arg(s, 1.0, cond)
    launch(
        _probs_kernel,
        (rows,),
        Strided(cond),
        Strided(uncond if uncond is not None else cond),
        cond.stride(0),
        uncond.stride(0) if uncond is not None else 0,
        Strided(out),
        out.stride(0),
        vocab,
        max(rows_per_req, 1),
        t_ptr,
        t_st,
        float(t_val),
        k_ptr,
        k_st,
        int(k_val),
        p_ptr,
        p_st,
        float(p_val),
        s_ptr,
        s_st,
        float(s_val),
        CFG=uncond is not None,
        TOPK=k is not None,
        TOPP=p is not None,
        T_PTR=t_is,
        K_PTR=k_is,
        P_PTR=p_is,
        S_PTR=s_is,
        BLOCK=block,
        PBLOCK=pblock,
        NPIV=npiv,
        num_warps=8,
        enable_fp_fusion=False,
    )
    return out


__all__ = ["probs_triton", "param_arg", "launch_rows"]
