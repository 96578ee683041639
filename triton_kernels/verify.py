"""Triton chain verification (speculative sampling): one program per request.

Token for token the semantics of ``specops/reference/verify.py`` ``verify_chain`` (and of the
C++/CUDA cores ``chain_*`` in csrc/include/specops/verify.h), with the same Philox draws:
accept x_i iff ``u_i * q_i(x_i) < p_i(x_i) + pool_i(x_i)`` (float32, u_i = draw i of row b);
the final token t is drawn by inverse CDF with draw K from the residual max(p_a - q_a, 0) after
a rejection or from the bonus row, with float64 running sums; greedy rows use argmax.

All acceptance tests of a request are independent of each other, so they run as one vector over
the K drafts; only greedy verification walks the drafts one argmax at a time, and GSD's grouped
acceptance (triton_kernels/grouped.py) tests them in order until the first rejection.
Probabilities are read in their own dtype and converted to float32.  Each rule in full (ids out
of range, the tiled draw, NaN): docs/triton_kernels.md, "Chain verification".
"""

import struct

import torch
import triton
import triton.language as tl
from specops.triton_kernels._args import Strided, launch, unit_rows
from specops.triton_kernels.grouped import group_sums
from specops.triton_kernels.mass import mass as _mass
from specops.triton_kernels.philox import philox_key, philox_uniform, rng_args


@triton.jit
def _weights(p_row, q_row, x, s, wt, idx, vocab, MODE: tl.constexpr, HAS_Q: tl.constexpr):
    """One tile of a weight row (float32, 0 past the vocabulary), p and q read through _mass.
    MODE 0: w_i = p_i; MODE 1: block verification's residual r_i = max(float32(wt * p_i - q_i),
    0) (float64 wt, product and difference in float64); MODE 2: its normalised form
    float32(float64(r_i) * (1 / s)) (1 / s rounded to float64, as on every backend).  q =
    one-hot of x without draft probabilities (x may be out of range: then q = 0).  (A chain's
    token-wise draw reads _chain_w.)"""
    m = idx < vocab
    p = _mass(tl.load(p_row + idx, mask=m, other=0.0).to(tl.float32))
    if MODE == 0:
        w = p
    else:
        if HAS_Q:
            q = _mass(tl.load(q_row + idx, mask=m, other=0.0).to(tl.float32))
        else:
            q = tl.where(idx == x, 1.0, 0.0)
        w = tl.maximum((wt * p.to(tl.float64) - q.to(tl.float64)).to(tl.float32), 0.0)
        if MODE == 2:
            inv = 1.0 / s  # float64 division: div.rn.f64 (IEEE), as 1.0 / s in C++
            w = (w.to(tl.float64) * inv).to(tl.float32)  # rounded per entry
    return tl.where(m, w, 0.0)


@triton.jit
def _total(
    p_row, q_row, x, s, wt, vocab, MODE: tl.constexpr, HAS_Q: tl.constexpr, TILE: tl.constexpr
):
    """sum_i float64(w_i) over the vocabulary."""
    cols = tl.arange(0, TILE)
    acc = tl.zeros([TILE], dtype=tl.float64)
    for base in range(0, vocab, TILE):
        acc += _weights(p_row, q_row, x, s, wt, base + cols, vocab, MODE, HAS_Q).to(tl.float64)
    return tl.sum(acc, axis=0)


@triton.jit
def _inverse_cdf(
    p_row, q_row, x, s, wt, u, vocab, MODE: tl.constexpr, HAS_Q: tl.constexpr, TILE: tl.constexpr
):
    """min{i : w_0 + ... + w_i > u * sum(w), w_i > 0} (float64 sums), else the last id with
    w_i > 0, else 0: reference.inverse_cdf of the weight row."""
    cols = tl.arange(0, TILE)
    total = _total(p_row, q_row, x, s, wt, vocab, MODE, HAS_Q, TILE)
    target = u.to(tl.float64) * total
    running = total * 0.0  # the carry: sum of the tiles before this one
    found = vocab + 0 * x
    last = 0 * x
    for base in range(0, vocab, TILE):
        idx = base + cols
        w = _weights(p_row, q_row, x, s, wt, idx, vocab, MODE, HAS_Q).to(tl.float64)
        inclusive = tl.cumsum(w, axis=0) + running
        hit = (inclusive > target) & (w > 0.0)
        found = tl.minimum(found, tl.min(tl.where(hit, idx, vocab), axis=0).to(found.dtype))
        last = tl.maximum(last, tl.max(tl.where(w > 0.0, idx, 0), axis=0).to(last.dtype))
        running += tl.sum(w, axis=0)
    return tl.where(found < vocab, found, last)


@triton.jit
def _chain_w(p_row, q_row, x, use_q, idx, vocab, HAS_Q: tl.constexpr):
    """One tile of the row a chain draws from: r = max(p - q, 0) when use_q (the residual after
    a rejection), else mass(p) (then q = 0 and max(p - 0, 0) = p exactly); 0 past the
    vocabulary.  use_q is a runtime flag, so the draw's passes are compiled once."""
    m = idx < vocab
    q_end = tl.where(use_q != 0, vocab, 0)  # q's columns to read: none without use_q
    p = _mass(tl.load(p_row + idx, mask=m, other=0.0).to(tl.float32))
    if HAS_Q:
        q = _mass(tl.load(q_row + idx, mask=idx < q_end, other=0.0).to(tl.float32))
    else:
        q = tl.where((idx == x) & (idx < q_end), 1.0, 0.0)
    return tl.where(m, tl.maximum(p - q, 0.0), 0.0)


@triton.jit
def _chain_total(p_row, q_row, x, use_q, vocab, HAS_Q: tl.constexpr, TILE: tl.constexpr):
    """sum_i float64(w_i) over the vocabulary."""
    cols = tl.arange(0, TILE)
    acc = tl.zeros([TILE], dtype=tl.float64)
    for base in range(0, vocab, TILE):
        acc += _chain_w(p_row, q_row, x, use_q, base + cols, vocab, HAS_Q).to(tl.float64)
    return tl.sum(acc, axis=0)


@triton.jit
def _chain_search(p_row, q_row, x, use_q, target, vocab, HAS_Q: tl.constexpr, TILE: tl.constexpr):
    """min{i : w_0 + ... + w_i > target, w_i > 0} (float64 sums), else vocab: tile sums first,
    the scan only in the tile where the running sum passes the target, and no loads once it is
    found (on average half a pass)."""
    cols = tl.arange(0, TILE)
    running = target * 0.0
    found = vocab + 0 * x
    for base in range(0, vocab, TILE):
        if found == vocab:
            idx = base + cols
            w = _chain_w(p_row, q_row, x, use_q, idx, vocab, HAS_Q).to(tl.float64)
            tile = tl.sum(w, axis=0)
            if running + tile > target:
                hit = (tl.cumsum(w, axis=0) + running > target) & (w > 0.0)
                found = tl.min(tl.where(hit, idx, vocab), axis=0).to(found.dtype)
            running += tile
    return found


@triton.jit
def _chain_last(p_row, q_row, x, use_q, vocab, HAS_Q: tl.constexpr, TILE: tl.constexpr):
    """The last id with w_i > 0, or -1 (read only when a search runs past the end)."""
    cols = tl.arange(0, TILE)
    last = tl.full([TILE], -1, tl.int32)  # ids < vocab < 2^31
    for base in range(0, vocab, TILE):
        idx = base + cols
        w = _chain_w(p_row, q_row, x, use_q, idx, vocab, HAS_Q)
        last = tl.maximum(last, tl.where(w > 0.0, idx, -1).to(tl.int32))
    return tl.max(last, axis=0).to(tl.int64)


@triton.jit
def _chain_draw(p_row, q_row, x, rejected, vocab, u, HAS_Q: tl.constexpr, TILE: tl.constexpr):
    """The chain's final token by inverse CDF with uniform u: from the unnormalised residual
    max(p - q, 0) after a rejection, else (the bonus, or a residual without mass) from mass(p).
    One full pass for the total (a second only when the residual has no mass), then the
    search; a last-positive pass only when rounding runs the search past the end; 0 for a row
    without mass."""
    use_q = rejected
    s = _chain_total(p_row, q_row, x, use_q, vocab, HAS_Q, TILE)
    if use_q & (s <= 0.0):
        use_q = rejected & (s > 0.0)  # False: the residual has no mass, draw from p
        s = _chain_total(p_row, q_row, x, use_q, vocab, HAS_Q, TILE)
    t = _chain_search(p_row, q_row, x, use_q, u.to(tl.float64) * s, vocab, HAS_Q, TILE)
    if t == vocab:
        t = _chain_last(p_row, q_row, x, use_q, vocab, HAS_Q, TILE)
    return tl.maximum(t, 0)


@triton.jit
def _argmax(p_row, vocab, TILE: tl.constexpr):
    """First maximal id of _mass(row) (torch.argmax; 0 for a row without mass): per tile the
    first maximum, and a later tile replaces the running best only when strictly larger."""
    cols = tl.arange(0, TILE)
    best = tl.max(tl.full([TILE], float("-inf"), tl.float32), axis=0)
    best_i = tl.sum(tl.zeros([TILE], tl.int64), axis=0)
    for base in range(0, vocab, TILE):
        idx = base + cols
        v = tl.load(p_row + idx, mask=idx < vocab, other=0.0).to(tl.float32)
        v = tl.where(idx < vocab, _mass(v), float("-inf"))
        m = tl.max(v, axis=0)
        i = tl.min(tl.where(v == m, idx, vocab), axis=0).to(tl.int64)  # first maximum of the tile
        better = m > best
        best_i = tl.where(better, i, best_i)
        best = tl.where(better, m, best)
    return best_i


@triton.jit
def _pick(v, ks, i):
    """v[i] of a vector over the draft slots (0 where i is past it)."""
    return tl.sum(tl.where(ks == i, v, 0), axis=0)


@triton.jit
def _block_verify(
    p_b, q_b, target_sk, draft_sk, x, ks, in_k, u, u_final, n_valid, vocab, HAS_Q: tl.constexpr,
    TILE: tl.constexpr,
):  # fmt: skip
    """Block verification (Sun et al. 2024; reference/block.py) -> (tau, t).
    w_0 = 1, w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1) (float64, sequential over the drafts);
    the scan tests positions n, n-1, ... (h_n = w_n, h_i = Z_i / (Z_i + 1 - w_i) with one pass
    over the vocabulary for Z_i) and stops at the first u_{i-1} < h_i: tau, the maximum."""
    ok = in_k & (x >= 0) & (x < vocab)
    xc = tl.where(ok, x, 0)
    px = _mass(tl.load(p_b + ks * target_sk + xc, mask=ok, other=0.0).to(tl.float32))
    if HAS_Q:
        qx = _mass(tl.load(q_b + ks * draft_sk + xc, mask=ok, other=0.0).to(tl.float32))
    else:
        qx = tl.full(px.shape, 1.0, tl.float32)
    px64, qx64 = px.to(tl.float64), qx.to(tl.float64)
    wv = tl.where(ks == 0, 1.0, 0.0).to(tl.float64)  # w_0 .. w_K over the slots
    w = _pick(wv, ks, 0)
    for i in range(0, n_valid):
        pi, qi = _pick(px64, ks, i), _pick(qx64, ks, i)
        ratio = tl.where(qi > 0.0, w * pi / tl.where(qi > 0.0, qi, 1.0), 1.0)
        w = tl.minimum(tl.where((w > 0.0) & (pi > 0.0), ratio, 0.0), 1.0)
        wv = tl.where(ks == i + 1, w, wv)
    tau = 0 * n_valid
    i = n_valid
    zero = u_final.to(tl.float64) * 0.0
    go = i >= 1
    while go:
        wi = _pick(wv, ks, i)
        h = wi
        if i < n_valid:  # Z_i: rows i (p_{i+1}, q_{i+1}), token x_i
            xi = _pick(x, ks, i)
            z = _total(p_b + i * target_sk, q_b + i * draft_sk, xi, zero, wi, vocab, 1, HAS_Q,
                       TILE)  # fmt: skip
            den = z + (1.0 - wi)
            h = tl.where(den > 0.0, z / tl.where(den > 0.0, den, 1.0), 1.0)
        if _pick(u, ks, i - 1).to(tl.float64) < h:
            tau = i
            go = False
        else:
            i -= 1
            go = i >= 1
    p_t = p_b + tau * target_sk
    q_t = q_b + tau * draft_sk
    x_t = _pick(x, ks, tau)
    w_t = _pick(wv, ks, tau)
    s = zero
    if tau < n_valid:
        s = _total(p_t, q_t, x_t, zero, w_t, vocab, 1, HAS_Q, TILE)
    if s > 0.0:  # t ~ norm(r_tau)
        t = _inverse_cdf(p_t, q_t, x_t, s, w_t, u_final, vocab, 2, HAS_Q, TILE)
    else:  # the bonus p_{n+1} (tau = n), or a residual without mass: t ~ p_{tau+1}
        t = _inverse_cdf(p_t, q_t, x_t, s, w_t, u_final, vocab, 0, HAS_Q, TILE)
    return tau.to(tl.int64), t.to(tl.int64)


@triton.jit
def _verify_chain_kernel(
    target,
    target_sb,
    target_sk,
    draft,
    draft_sb,
    draft_sk,
    tokens,
    tokens_sb,
    tokens_sk,
    num_draft,
    K,
    vocab,
    neighbors,
    neighbors_k,
    delta_bits,
    grp,
    rng,
    uniforms,
    out_tokens,
    out_num_accepted,
    HAS_Q: tl.constexpr,
    HAS_NUM_DRAFT: tl.constexpr,
    HAS_RELAX: tl.constexpr,
    HAS_GROUP: tl.constexpr,
    GREEDY: tl.constexpr,
    HAS_SEED_PTR: tl.constexpr,
    HAS_OFFSET_PTR: tl.constexpr,
    HAS_UNIFORMS: tl.constexpr,
    BLOCK_VERIFY: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_NB: tl.constexpr,
    BLOCK_W: tl.constexpr,
    GROUP_TILE: tl.constexpr,
    TILE: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)  # draft slots (BLOCK_K >= K + 1: the output row too)
    in_k = ks < K
    x = tl.load(tokens + b * tokens_sb + ks * tokens_sk, mask=in_k, other=-1).to(tl.int64)

    # n_b: drafts before num_draft[b] and before the first -1.
    limit = K + 0 * b
    if HAS_NUM_DRAFT:
        nd = tl.load(num_draft + b).to(tl.int64)
        limit = tl.minimum(tl.maximum(nd, 0), limit)
    n_valid = tl.min(tl.where((ks >= limit) | (x == -1), ks, K), axis=0).to(tl.int64)

    p_b = target + b * target_sb
    if GREEDY:
        # accept x_i iff x_i == argmax p_i: walk the drafts until the first mismatch; the
        # argmax of the row where the walk stops is the emitted token.
        acc = 0 * b
        t = _argmax(p_b, vocab, TILE)
        x0 = tl.load(tokens + b * tokens_sb, mask=n_valid > 0, other=-1).to(tl.int64)
        go = (n_valid > 0) & (x0 == t)
        while go:
            acc += 1
            t = _argmax(p_b + acc * target_sk, vocab, TILE)
            more = acc < n_valid
            xa = tl.load(tokens + b * tokens_sb + acc * tokens_sk, mask=more, other=-1)
            go = more & (xa.to(tl.int64) == t)
    else:
        # uniforms of row b, all in one vector (BLOCK_K > K): draw i < K tests draft i, draw K
        # is the final token's
        if HAS_UNIFORMS:
            u = tl.load(uniforms + b * (K + 1) + ks, mask=ks < K + 1, other=0.5)
        else:
            seed, offset = philox_key(rng, b, HAS_SEED_PTR, HAS_OFFSET_PTR)
            u = philox_uniform(seed, offset, b + 0 * ks, ks)
        u_final = tl.sum(tl.where(ks == K, u, 0.0), axis=0)

        if BLOCK_VERIFY:
            acc, t = _block_verify(p_b, draft + b * draft_sb, target_sk, draft_sk, x, ks, in_k, u,
                                   u_final, n_valid, vocab, HAS_Q, TILE)  # fmt: skip
        elif HAS_GROUP:
            # GSD: accept x_i iff u_i * Q_i < P_i over x_i's group, in order until the first
            # rejection (rows past it are never read)
            acc = 0 * b
            go = n_valid > 0
            while go:
                big_p, big_q = group_sums(p_b + acc * target_sk, draft + b * draft_sb +
                                          acc * draft_sk, _pick(x, ks, acc), vocab, grp, HAS_Q,
                                          BLOCK_W, GROUP_TILE)  # fmt: skip
                good = _pick(u, ks, acc) * big_q < big_p
                acc += good.to(tl.int64)
                go = good & (acc < n_valid)
        else:
            # acceptance tests of all drafts at once: u_i * q_i(x_i) < p_i(x_i) + pool_i(x_i)
            ok = in_k & (x >= 0) & (x < vocab)  # only in-range ids are ever used as an index
            xc = tl.where(ok, x, 0)
            px = _mass(tl.load(p_b + ks * target_sk + xc, mask=ok, other=0.0).to(tl.float32))
            if HAS_Q:
                q_b = draft + b * draft_sb
                qx = _mass(tl.load(q_b + ks * draft_sk + xc, mask=ok, other=0.0).to(tl.float32))
            else:
                qx = tl.full([BLOCK_K], 1.0, tl.float32)
            if HAS_RELAX:
                # LANTERN: pool(x) = sum of p(n_j) over the leading neighbours n_1..n_j of x whose
                # cumulative mass c_j (float64) stays <= delta; -1, out-of-range ids and x itself
                # contribute 0.  Rounded to float32, then added in float32.
                js = tl.arange(0, BLOCK_NB)
                nmask = ok[:, None] & (js[None, :] < neighbors_k)
                nb = tl.load(
                    neighbors + xc[:, None] * neighbors_k + js[None, :], mask=nmask, other=-1
                )
                nb = nb.to(tl.int64)
                nvalid = nmask & (nb >= 0) & (nb < vocab) & (nb != x[:, None])
                pn_ptr = p_b + ks[:, None] * target_sk + tl.where(nvalid, nb, 0)
                pn = _mass(tl.load(pn_ptr, mask=nvalid, other=0.0).to(tl.float32)).to(tl.float64)
                cum = tl.cumsum(pn, axis=1)
                delta = (delta_bits + 0 * b).to(tl.float64, bitcast=True)
                pool = tl.sum(tl.where(cum <= delta, pn, 0.0), axis=1).to(tl.float32)
                accept = u * qx < px + pool
            else:
                accept = u * qx < px
            # a = the first rejected valid draft, or n_b when all are accepted
            first_rej = tl.min(tl.where(in_k & ~accept, ks, K), axis=0).to(tl.int64)
            acc = tl.minimum(first_rej, n_valid)

        if not BLOCK_VERIFY:
            # the final token from row a
            pa = p_b + acc * target_sk
            rejected = acc < n_valid
            xa = tl.load(tokens + b * tokens_sb + acc * tokens_sk, mask=rejected, other=-1)
            xa = xa.to(tl.int64)
            if HAS_Q:
                qa = draft + b * draft_sb + acc * draft_sk  # only read when draft a was rejected
            else:
                qa = pa  # unused
            # t ~ norm(max(p_a - q_a, 0)) (drawn from the unnormalised residual), or mass(p_a)
            t = _chain_draw(pa, qa, xa, rejected, vocab, u_final, HAS_Q, TILE).to(tl.int64)

    # tokens: x_0 .. x_{a-1}, t, then -1
    row = tl.where(ks < acc, x, tl.where(ks == acc, t, -1))
    tl.store(out_tokens + b * (K + 1) + ks, row.to(tl.int32), mask=ks < K + 1)
    tl.store(out_num_accepted + b, acc.to(tl.int32))


def _f64_bits(x) -> int:
    """x's float64 bits as an int64 (a Python float argument would reach the kernel as float32;
    the kernel bitcasts these back)."""
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def verify_chain_triton(
    target_probs,
    draft_tokens,
    draft_probs,
    num_draft,
    rng,
    neighbors,
    delta,
    codebook,
    group_window,
    group_p,
    group_d,
    image_start,
    greedy,
    uniforms,
    block,
):
    """Launch ``_verify_chain_kernel`` on checked arguments, named as the op declares them
    (specops/ops/verify.py ``CHAIN``; ``rng`` the random stream as one object) -> (tokens
    [B, K+1] int32, num_accepted [B] int32).
    GSD's grouped acceptance (``codebook`` given, float32 contiguous) runs in the same launch
    (triton_kernels/grouped.py)."""
    target, tokens, draft, nb = target_probs, draft_tokens, draft_probs, neighbors
    b, k1, v = target.shape
    k = k1 - 1
    dev = target.device
    target = unit_rows(target)  # any float dtype, read with its row strides
    draft = unit_rows(draft) if draft is not None else None
    num_draft = num_draft.contiguous() if num_draft is not None else None
    nb = nb.contiguous() if nb is not None else None  # int32 or int64, read in place
    uniforms = uniforms.contiguous() if uniforms is not None else None
    out_tokens = torch.empty(b, k1, dtype=torch.int32, device=dev)
    out_num = torch.empty(b, dtype=torch.int32, device=dev)
    if b == 0:
        return out_tokens, out_num
    dummy = out_tokens  # never read when the matching HAS_* flag is off
    rng, flags = rng_args(rng, b, dummy)
    has_group = codebook is not None
    grp = (
        codebook if has_group else dummy,
        codebook.shape[0] if has_group else 0,
        codebook.shape[1] if has_group else 0,
        int(image_start),
        int(group_window),
        float(group_p),
        _f64_bits(group_d),
    )
    # GSD: 2048-entry tiles and 8 warps (docs/triton_resources.md: Triton 3.6 spills at 4096)
    tile = min(2048 if has_group else 4096, triton.next_power_of_2(v))
    nbk = nb.shape[1] if nb is not None else 0
    launch(
        _verify_chain_kernel,
        (b,),
        Strided(target),
        target.stride(0),
        target.stride(1),
        Strided(draft) if draft is not None else dummy,
        draft.stride(0) if draft is not None else 0,
        draft.stride(1) if draft is not None else 0,
        Strided(tokens),
        tokens.stride(0),
        tokens.stride(1),
        num_draft if num_draft is not None else dummy,
        k,
        v,
        nb if nb is not None else dummy,
        nbk,
        _f64_bits(delta),
        grp,
        rng,
        uniforms if uniforms is not None else dummy,
        out_tokens,
        out_num,
        HAS_Q=draft is not None,
        HAS_NUM_DRAFT=num_draft is not None,
        HAS_RELAX=nb is not None,
        HAS_GROUP=has_group,
        GREEDY=bool(greedy),
        **flags,
        HAS_UNIFORMS=uniforms is not None,
        BLOCK_VERIFY=bool(block),
        BLOCK_K=triton.next_power_of_2(k1),
        BLOCK_NB=triton.next_power_of_2(max(nbk, 1)),
        BLOCK_W=triton.next_power_of_2(max(int(group_window), 1)) if has_group else 1,
        # GSD's window pass keeps int64 keys a tile: 1024 entries (4096 spill on sm_90, 3.6)
        GROUP_TILE=min(tile, 1024),
        TILE=tile,
        # 16 warps at TILE 4096: 8 spill 40-76 B on sm_90 (docs/triton_resources.md)
        num_warps=16 if tile >= 4096 else 8 if tile >= 2048 else 4,
        enable_fp_fusion=False,
    )
    return out_tokens, out_num


__all__ = ["verify_chain_triton"]
