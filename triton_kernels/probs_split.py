"""Triton probs_from_logits: every row split over G programs (grid [rows, G]).

The one-program-per-row kernel (probs.py) leaves most of a GPU idle when rows are few (a
Lumina-mGPT window is 64-128 rows, an Emu3 one 32, a LlamaGen step 1) and re-reads both CFG
rows on each of its passes.  Here each pass is one launch over [rows, G] chunks of the row, the
chunks' partial results meet in small per-row buffers, and the CFG-combined row is computed
once (the same bits as probs.py's ``_row_x``).  Passes: ``_split_stats``, ``_split_radix``
(levels 1-3), ``_split_z``, ``_split_write``; partials are combined in chunk order by every
program alike.  With top-p (and top-k), ``_split_z`` also gathers the survivors and
``_split_topp`` (a program a row) sorts them and cuts at p; top-p without top-k goes to
probs.py.

Each pass in full: docs/triton_kernels.md, "Logits to probabilities, split rows".
"""

import torch
import triton
import triton.language as tl
from specops.triton_kernels._args import Strided, launch
from specops.triton_kernels.probs import (
    _block_stats,
    _key,
    _param,
    _pick_digit,
    _request_params,
    _row_x,
    _topp_pivot,
    _unkey,
    launch_rows,
    param_arg,
    probs_triton,
)

_NB = 256  # bins a radix level (8 bits)
_LEVELS = 4


@triton.jit
def _row_max(part_m, part_arg, row, G, GB: tl.constexpr):
    """(m, arg-max) of the row from its chunks' partials: the first chunk holding the max."""
    g = tl.arange(0, GB)
    pm = tl.load(part_m + row * G + g, mask=g < G, other=-float("inf"))
    m = tl.max(pm, 0)
    first = tl.min(tl.where(pm == m, g, GB), 0)
    arg = tl.load(part_arg + row * G + first)
    return m, arg


@triton.jit
def _pass_state(part_m, part_arg, vocab, rows_per_req, G, t_ptr, t_stride, t_val, k_ptr,
                k_stride, k_val, TOPK: tl.constexpr, T_PTR: tl.constexpr, K_PTR: tl.constexpr,
                GB: tl.constexpr):  # fmt: skip
    """A later pass's program: (row, chunk g, greedy, k, top-k on, m, arg-max)."""
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    _s, _t, greedy, k, topk_on = _request_params(
        row // rows_per_req, vocab, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val, t_ptr, 0,
        1.0, False, TOPK, T_PTR, K_PTR, False,
    )  # fmt: skip
    m, arg = _row_max(part_m, part_arg, row, G, GB)
    return row, g, greedy, k, topk_on, m, arg


@triton.jit
def _replay(hist_row, k, NLEV: tl.constexpr):
    """The digit picks of radix levels 0..NLEV-1 from the row's histograms: (prefix, r, done,
    tau) as probs.py's top-k loop leaves them after those levels (tau = the kept-key bound)."""
    bins = tl.arange(0, 256)
    j, r, done = _pick_digit(tl.load(hist_row + bins), k, 256)
    prefix = j.to(tl.uint32)
    tau = prefix << 24
    for lv in tl.static_range(1, NLEV):
        if ~done:
            j, r, done = _pick_digit(tl.load(hist_row + lv * 256 + bins), r, 256)
            prefix = (prefix << 8) | j.to(tl.uint32)
            tau = prefix << (24 - 8 * lv)
    return prefix, r, done, tau


@triton.jit
def _split_stats(cond, uncond, c_stride, u_stride, out, o_stride, vocab, rows_per_req, chunk, G,
                 part_m, part_arg, part_s, hist, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val,
                 s_ptr, s_stride, s_val, CFG: tl.constexpr, TOPK: tl.constexpr,
                 T_PTR: tl.constexpr, K_PTR: tl.constexpr, S_PTR: tl.constexpr,
                 BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    s, t_div, greedy, k, topk_on = _request_params(
        row // rows_per_req, vocab, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val, s_ptr,
        s_stride, s_val, CFG, TOPK, T_PTR, K_PTR, S_PTR,
    )  # fmt: skip
    c_row = cond + row * c_stride
    u_row = uncond + row * u_stride
    o_row = out + row * o_stride
    cols = tl.arange(0, BLOCK)
    lo = g.to(tl.int64) * chunk
    m = tl.full([], -float("inf"), tl.float32)
    arg = tl.full([], 0, tl.int32)
    ssum = tl.full([], 0.0, tl.float32)
    h = tl.zeros([256], dtype=tl.int32)
    for base in range(lo, lo + chunk, BLOCK):
        idx = base + cols
        valid = idx < vocab
        x = _row_x(c_row, u_row, idx, valid, s, t_div, CFG)
        tl.store(o_row + idx, x, mask=valid)
        m, arg, ssum, h = _block_stats(x, idx, valid, vocab, m, arg, ssum, h, topk_on, TOPK)
    tl.store(part_m + row * G + g, m)
    tl.store(part_arg + row * G + g, arg)
    tl.store(part_s + row * G + g, ssum)
    if TOPK:
        if topk_on:
            bins = tl.arange(0, 256)
            tl.atomic_add(hist + row * (4 * 256) + bins, h, mask=h != 0)


@triton.jit
def _split_radix(out, o_stride, vocab, rows_per_req, chunk, G, part_m, part_arg, hist, t_ptr,
                 t_stride, t_val, k_ptr, k_stride, k_val, T_PTR: tl.constexpr,
                 K_PTR: tl.constexpr, LEVEL: tl.constexpr, GB: tl.constexpr,
                 BLOCK: tl.constexpr):  # fmt: skip
    row, g, greedy, k, topk_on, m, arg = _pass_state(
        part_m, part_arg, vocab, rows_per_req, G, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val,
        True, T_PTR, K_PTR, GB,
    )  # fmt: skip
    hist_row = hist + row * (4 * 256)
    if topk_on & (m > -float("inf")):
        prefix, r, done, tau = _replay(hist_row, k, LEVEL)
        if ~done:
            o_row = out + row * o_stride
            cols = tl.arange(0, BLOCK)
            lo = g.to(tl.int64) * chunk
            h = tl.zeros([256], dtype=tl.int32)
            for base in range(lo, lo + chunk, BLOCK):
                idx = base + cols
                valid = idx < vocab
                key = _key(tl.load(o_row + idx, mask=valid, other=0.0))
                member = valid & ((key >> (32 - 8 * LEVEL)) == prefix)
                digit = ((key >> (24 - 8 * LEVEL)) & 255).to(tl.int32)
                h += tl.histogram(digit, 256, mask=member)
            bins = tl.arange(0, 256)
            tl.atomic_add(hist_row + LEVEL * 256 + bins, h, mask=h != 0)


@triton.jit
def _split_z(out, o_stride, vocab, rows_per_req, chunk, G, part_m, part_arg, part_z, hist, t_ptr,
             t_stride, t_val, k_ptr, k_stride, k_val, comp, count, T_PTR: tl.constexpr,
             K_PTR: tl.constexpr, TOPP: tl.constexpr, CAP: tl.constexpr, GB: tl.constexpr,
             BLOCK: tl.constexpr):  # fmt: skip
    """Z's partial over chunk g (the top-k survivors' e^(x - m)); with top-p the survivors' x
    also go to the row's buffer ``comp`` [CAP] (unordered; ``count`` counts them all, those
    past CAP are not stored)."""
    row, g, greedy, k, topk_on, m, arg = _pass_state(
        part_m, part_arg, vocab, rows_per_req, G, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val,
        True, T_PTR, K_PTR, GB,
    )  # fmt: skip
    z = tl.full([], 0.0, tl.float32)
    if topk_on & (m > -float("inf")):
        prefix, r, done, tau = _replay(hist + row * (4 * 256), k, 4)
        o_row = out + row * o_stride
        cols = tl.arange(0, BLOCK)
        lo = g.to(tl.int64) * chunk
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for base in range(lo, lo + chunk, BLOCK):
            idx = base + cols
            valid = idx < vocab
            x = tl.load(o_row + idx, mask=valid, other=-float("inf"))
            surv = valid & (_key(x) >= tau)
            acc += tl.where(surv, tl.exp(x - m), 0.0)
            if TOPP:
                ones = surv.to(tl.int32)
                at = tl.atomic_add(count + row, tl.sum(ones, 0)) + tl.cumsum(ones, 0) - 1
                tl.store(comp + row * CAP + at, x, mask=surv & (at < CAP))
        z = tl.sum(acc, 0)
    tl.store(part_z + row * G + g, z)


@triton.jit
def _split_topp(out, o_stride, vocab, rows_per_req, G, part_m, part_arg, part_s, part_z, hist,
                t_ptr, t_stride, t_val, k_ptr, k_stride, k_val, p_ptr, p_stride, p_val, comp,
                count, tau_out, z_out, T_PTR: tl.constexpr, K_PTR: tl.constexpr,
                P_PTR: tl.constexpr, CAP: tl.constexpr, GB: tl.constexpr, PBLOCK: tl.constexpr,
                NPIV: tl.constexpr):  # fmt: skip
    """One program a row: the kept-key bound tau and the normaliser Z after top-k and top-p, for
    _split_write.  tau_p = the largest x with M(x) >= p * Z (M(x): the survivors' mass at
    values >= x), as the reference finds it: the survivors sorted descending, their masses
    summed in float64 in that order, tau_p = the value where the sum first reaches p * Z.  A row
    with more survivors than CAP (ties, or top-k off) searches its stored row instead
    (probs.py's pivot search)."""
    row, g, greedy, k, topk_on, m, arg = _pass_state(
        part_m, part_arg, vocab, rows_per_req, G, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val,
        True, T_PTR, K_PTR, GB,
    )  # fmt: skip
    tau, z = _topk_bound(row, G, m, greedy, k, topk_on, part_m, part_s, part_z, hist, True, GB)
    p = _param(row // rows_per_req, p_ptr, p_stride, p_val, P_PTR)
    if (p < 1.0) & ~(greedy | (m == -float("inf"))):  # a NaN p is inactive: no top-p
        n = tl.load(count + row)
        if topk_on & (n <= CAP):
            j = tl.arange(0, CAP)
            x = tl.load(comp + row * CAP + j, mask=j < n, other=-float("inf"))
            key = tl.sort(tl.where(j < n, _key(x), 0), descending=True)
            w = tl.where(j < n, tl.exp(_unkey(key) - m), 0.0)  # float32, as the reference
            cum = tl.cumsum(w.to(tl.float64), 0)
            total = tl.sum(w.to(tl.float64), 0)
            first = tl.min(tl.where(cum >= p.to(tl.float64) * total, j, CAP - 1), 0)
            tau = tl.sum(tl.where(j == first, key, 0), 0).to(tl.uint32)
            z = tl.sum(tl.where(key >= tau, w.to(tl.float64), 0.0), 0).to(tl.float32)
        else:
            o_row = out + row * o_stride
            mn = tl.full([], float("inf"), tl.float32)
            for base in range(0, vocab, PBLOCK):
                idx = base + tl.arange(0, PBLOCK)
                x = tl.load(o_row + idx, mask=idx < vocab, other=float("inf"))
                mn = tl.minimum(mn, tl.min(tl.where(x > -float("inf"), x, float("inf")), 0))
            tau, z = _topp_pivot(o_row, o_row, vocab, 1.0, 1.0, tau, m, mn, z, p, False, PBLOCK,
                                 NPIV)  # fmt: skip
    tl.store(tau_out + row, tau.to(tl.int64))
    tl.store(z_out + row, z)


@triton.jit
def _topk_bound(row, G, m, greedy, k, topk_on, part_m, part_s, part_z, hist, TOPK: tl.constexpr,
                GB: tl.constexpr):  # fmt: skip
    """(tau, Z) of the row after top-k: keep key >= tau (0: everything), Z their e^(x - m)
    summed from the chunks' partials in chunk order."""
    onehot = greedy | (m == -float("inf"))
    m_safe = tl.where(onehot, 0.0, m)
    gs = tl.arange(0, GB)
    pm = tl.load(part_m + row * G + gs, mask=gs < G, other=-float("inf"))
    ps = tl.load(part_s + row * G + gs, mask=gs < G, other=0.0)
    z = tl.sum(tl.where(pm > -float("inf"), ps * tl.exp(pm - m_safe), 0.0), 0)
    tau = tl.full([], 0, tl.uint32)
    if TOPK:
        if topk_on & ~onehot:
            prefix, r, done, tau = _replay(hist + row * (4 * 256), k, 4)
            z = tl.sum(tl.load(part_z + row * G + gs, mask=gs < G, other=0.0), 0)
    return tau, z


@triton.jit
def _split_write(out, o_stride, vocab, rows_per_req, chunk, G, part_m, part_arg, part_s, part_z,
                 hist, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val, tau_in, z_in,
                 TOPK: tl.constexpr, TOPP: tl.constexpr, T_PTR: tl.constexpr,
                 K_PTR: tl.constexpr, GB: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row, g, greedy, k, topk_on, m, arg = _pass_state(
        part_m, part_arg, vocab, rows_per_req, G, t_ptr, t_stride, t_val, k_ptr, k_stride, k_val,
        TOPK, T_PTR, K_PTR, GB,
    )  # fmt: skip
    onehot = greedy | (m == -float("inf"))
    m_safe = tl.where(onehot, 0.0, m)
    if TOPP:  # _split_topp's bound and normaliser
        tau = tl.load(tau_in + row).to(tl.uint32)
        z = tl.load(z_in + row)
    else:
        tau, z = _topk_bound(row, G, m, greedy, k, topk_on, part_m, part_s, part_z, hist, TOPK,
                             GB)  # fmt: skip
    inv_z = 1.0 / tl.where(onehot, 1.0, z)
    o_row = out + row * o_stride
    cols = tl.arange(0, BLOCK)
    lo = g.to(tl.int64) * chunk
    for base in range(lo, lo + chunk, BLOCK):
        idx = base + cols
        valid = idx < vocab
        if onehot:
            pr = tl.where(idx == arg, 1.0, 0.0)
        else:
            x = tl.load(o_row + idx, mask=valid, other=-float("inf"))
            pr = tl.where(_key(x) >= tau, tl.exp(x - m_safe) * inv_z, 0.0)
        tl.store(o_row + idx, pr, mask=valid)


_SM_COUNT: dict[int, int] = {}
# tests/triton_specs.py sets this (an H100's 132) while it records the served launches on CPU
# tensors, so that they are bound with the chunk counts a GPU gets
INTERPRETER_SMS: int | None = None


def split_chunks(rows: int, vocab: int, block: int, device: torch.device) -> int:
    """G chunks a row (multiples of ``block`` entries) so that rows * G fills the GPU about four
    programs an SM deep; on the CPU (interpreter) about 8 programs in all."""
    if device.type == "cuda":
        i = device.index if device.index is not None else torch.cuda.current_device()
        if i not in _SM_COUNT:
            _SM_COUNT[i] = torch.cuda.get_device_properties(i).multi_processor_count
        want = 4 * _SM_COUNT[i]
    else:
        want = 8 if INTERPRETER_SMS is None else 4 * INTERPRETER_SMS
    return max(1, min(triton.cdiv(want, rows), triton.cdiv(vocab, block)))


def probs_split_triton(
    cond, uncond, t, k, s, rows_per_req, out, *, top_p=None, block=None, chunks=None, cap=None
):
    """probs_from_logits over [rows, G] programs.  cond/uncond [R, V] (any row stride), out
    [R, V] float32 (unit stride in V; also the scratch row x); t, k, s, top_p: a [B] tensor
    (float32 / int32, any stride) or a Python scalar; k None = no top-k, uncond None = no CFG,
    top_p None = no top-p (top-p needs top-k: the survivors are what its program sorts).
    ``chunks``: G (default ``split_chunks``); ``cap``: the survivors a top-p row sorts (a power
    of two, default ``topp_cap(k, V)``; a row with more searches its stored row)."""
    rows, vocab = cond.shape
    if rows == 0:
        return out
    if top_p is not None and k is None:
        raise ValueError("probs_split_triton: top_p needs top_k (the survivors it sorts)")
    if cap is not None and (cap < 1 or cap & (cap - 1)):
        raise ValueError(f"probs_split_triton: cap must be a power of two, got {cap}")
    cond, uncond, block = launch_rows(cond, uncond, out, block)
    g = chunks if chunks is not None else split_chunks(rows, vocab, block, cond.device)
    chunk = triton.cdiv(triton.cdiv(vocab, g), block) * block
    g = triton.cdiv(vocab, chunk)
    gb = max(2, triton.next_power_of_2(g))
    dev = cond.device
    part_m = torch.empty(rows, g, dtype=torch.float32, device=dev)
    part_arg = torch.empty(rows, g, dtype=torch.int32, device=dev)
    part_s = torch.empty(rows, g, dtype=torch.float32, device=dev)
    topk, topp = k is not None, top_p is not None
    hist = torch.zeros(rows if topk else 1, 4 * _NB, dtype=torch.int32, device=dev)

    t_ptr, t_st, t_val, t_is = param_arg(t, 1.0, cond)
    k_ptr, k_st, k_val, k_is = param_arg(k, 0, cond)
    s_ptr, s_st, s_val, s_is = param_arg(s, 1.0, cond)
    grid = (rows, g)
    o = Strided(out)
    o_st = out.stride(0)
    meta = dict(num_warps=8, enable_fp_fusion=False)
    tk = (t_ptr, t_st, float(t_val), k_ptr, k_st, min(int(k_val), vocab))  # k >= V: no top-k
    launch(
        _split_stats, grid, Strided(cond), Strided(uncond if uncond is not None else cond),
        cond.stride(0), uncond.stride(0) if uncond is not None else 0, o, o_st, vocab,
        max(rows_per_req, 1), chunk, g, part_m, part_arg, part_s, hist, *tk, s_ptr, s_st,
        float(s_val), CFG=uncond is not None, TOPK=topk, T_PTR=t_is, K_PTR=k_is, S_PTR=s_is,
        BLOCK=block, **meta,
    )  # fmt: skip
    common = (o, o_st, vocab, max(rows_per_req, 1), chunk, g, part_m, part_arg)
    part_z = part_s
    cap = (cap or topp_cap(k, vocab)) if topp else 1
    comp = torch.empty(rows if topp else 1, cap, dtype=torch.float32, device=dev)
    count = torch.zeros(rows if topp else 1, dtype=torch.int32, device=dev)
    if topk:
        for level in range(1, _LEVELS):
            launch(_split_radix, grid, *common, hist, *tk, T_PTR=t_is, K_PTR=k_is, LEVEL=level,
                   GB=gb, BLOCK=min(block, 2048), **meta)  # fmt: skip
        part_z = torch.empty(rows, g, dtype=torch.float32, device=dev)
        # with top-p (the survivors' gather): BLOCK 1024 (4096 and 2048 spill 4-8 B on sm_80)
        launch(_split_z, grid, *common, part_z, hist, *tk, comp, count, T_PTR=t_is, K_PTR=k_is,
               TOPP=topp, CAP=cap, GB=gb, BLOCK=min(block, 1024) if topp else block,
               **meta)  # fmt: skip
    tau = torch.empty(rows if topp else 1, dtype=torch.int64, device=dev)
    z = torch.empty(rows if topp else 1, dtype=torch.float32, device=dev)
    if topp:
        p_ptr, p_st, p_val, p_is = param_arg(top_p, 1.0, cond)
        launch(_split_topp, (rows,), o, o_st, vocab, max(rows_per_req, 1), g, part_m, part_arg,
               part_s, part_z, hist, *tk, p_ptr, p_st, float(p_val), comp, count, tau, z,
               T_PTR=t_is, K_PTR=k_is, P_PTR=p_is, CAP=cap, GB=gb,
               PBLOCK=min(block, 1024), NPIV=8, num_warps=16 if cap >= 2048 else 8,
               enable_fp_fusion=False)  # fmt: skip
    launch(_split_write, grid, *common, part_s, part_z, hist, *tk, tau, z, TOPK=topk, TOPP=topp,
           T_PTR=t_is, K_PTR=k_is, GB=gb, BLOCK=block, **meta)  # fmt: skip
    return out


TOPP_CAP = 4096  # the most survivors a top-p row sorts in one program


def topp_cap(k, vocab: int) -> int:
    """The survivors' buffer of a top-p row, a power of two: 2k for a Python k (ties can add
    more), TOPP_CAP for per-request k; never past the vocabulary's power of two (a row has no
    more survivors than V; the interpreter's sort costs seconds at 4096)."""
    want = TOPP_CAP if isinstance(k, torch.Tensor) else 2 * min(int(k), vocab)
    return min(TOPP_CAP, max(16, triton.next_power_of_2(min(want, vocab))))


def splits(k, top_p, vocab: int) -> bool:
    """Whether a row is split over several programs: without top-p, and with top-p when top-k
    leaves few survivors to sort (a per-request k, or 1 <= k < min(V, TOPP_CAP)); top-p alone,
    one program a row searches it (probs.py)."""
    if top_p is None or isinstance(k, torch.Tensor):
        return True
    return k is not None and 1 <= k < min(vocab, TOPP_CAP)


def probs_from_logits_triton(cond, uncond, t, k, top_p, s, rows_per_req, out):
    """specops.probs_from_logits's Triton entry (specops/ops/probs.py's declaration names it):
    the split programs (``probs_split_triton``) or one program a row (``probs_triton``), by
    ``splits``; arguments as theirs."""
    if splits(k, top_p, cond.shape[1]):
        return probs_split_triton(cond, uncond, t, k, s, rows_per_req, out, top_p=top_p)
    return probs_triton(cond, uncond, t, k, top_p, s, rows_per_req, out)


__all__ = [
    "probs_from_logits_triton", "probs_split_triton", "splits", "split_chunks", "topp_cap",
    "TOPP_CAP",
]  # fmt: skip
