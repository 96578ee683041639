"""The reference tree attention / append_kv against their contract.

Ground truth here is a float64 dense-mask attention built per request from the tree's
ancestor sets (``Tree.ancestors`` or ``unpack_bits``), independent of the reference code:

    keys of request b = prefix [0, L_b) then tree slots L_b .. L_b + N - 1
    mask[n] = [1] * L_b ++ ancestors-or-self row n
    o_n = softmax(c q_n K^T + log mask) V,  lse_n = logsumexp(c q_n K^T + log mask)
"""

from __future__ import annotations

import math

import pytest
import torch

import specops
from specops import Tree
from specops.tree import pack_bits, unpack_bits


# ground truth and input builders (shared with test_tree_attention.py) ---------------------
def random_parents(n: int, batch: int = 1, generator=None) -> torch.Tensor:
    """Random topological parent arrays [batch, n]: parents[i] uniform in [0, i)."""
    par = torch.full((batch, n), -1, dtype=torch.int32)
    for i in range(1, n):
        par[:, i] = torch.randint(0, i, (batch,), generator=generator, dtype=torch.int32)
    return par


def make_tree(kind: str, n: int, batch: int = 1, generator=None) -> Tree:
    if kind == "chain":
        return Tree.chain(n, batch=batch)
    if kind == "kary_chain":  # SJD-PAC window: a 2-ary tree of depth 3 (7 nodes), then a chain
        if n < 7:
            return Tree.chain(n, batch=batch)
        return Tree.kary_chain(2, 3, n, batch=batch)
    return Tree.from_parents(random_parents(n, batch, generator))


def logical_cache(cache: torch.Tensor, block_table, b: int) -> torch.Tensor:
    """[capacity, Hkv, D] of request b, page by page (a plain loop: independent of the op)."""
    if block_table is None:
        return cache[b]
    return torch.cat([cache[int(p)] for p in block_table[b]], 0)


def dense_attention(
    q, k_cache, v_cache, seqlens, ancestors, *, block_table=None, sm_scale=None, dtype=None
):
    """Dense-mask attention, one request at a time.  ``ancestors`` [1 or B, N, N] bool.
    dtype=None: float64 throughout.  dtype=torch.float16 etc.: the same-precision torch
    computation of flash-attention's tests (scores and P @ V in that dtype, softmax in
    float32).  Returns (out float64 [B, N, Hq, D], lse float64 [B, N, Hq])."""
    b, n, hq, d = q.shape
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    outs, lses = [], []
    for i in range(b):
        L = int(seqlens[i])
        k = logical_cache(k_cache, block_table, i)[: L + n]
        v = logical_cache(v_cache, block_table, i)[: L + n]
        g = hq // k.shape[1]
        k = k.repeat_interleave(g, dim=1).transpose(0, 1)  # [Hq, L + N, D]
        v = v.repeat_interleave(g, dim=1).transpose(0, 1)
        qi = q[i].transpose(0, 1)  # [Hq, N, D]
        anc = ancestors[min(i, ancestors.shape[0] - 1)]
        mask = torch.cat([torch.ones(n, L, dtype=torch.bool), anc.cpu()], 1)  # [N, L + N]
        if dtype is None:
            s = (qi.double() @ k.double().transpose(1, 2)) * scale
            s = s.masked_fill(~mask, float("-inf"))
            lse = torch.logsumexp(s, -1)
            o = torch.softmax(s, -1) @ v.double()
        else:
            s = (qi.to(dtype) @ k.to(dtype).transpose(1, 2)).float() * scale
            s = s.masked_fill(~mask, float("-inf"))
            lse = torch.logsumexp(s, -1)
            p = torch.softmax(s, -1).to(dtype)
            o = p @ v.to(dtype)
        outs.append(o.transpose(0, 1).double())
        lses.append(lse.transpose(0, 1).double())
    return torch.stack(outs), torch.stack(lses)


def make_cache(b, cap, hkv, d, dtype, *, page=None, generator=None, device="cpu"):
    """Random caches of logical capacity ``cap`` per request: contiguous [B, cap, Hkv, D], or
    paged with ``page`` rows per page, a shuffled block table and one spare page.
    Returns (k_cache, v_cache, block_table or None)."""
    if page is None:
        k = torch.randn(b, cap, hkv, d, generator=generator, dtype=torch.float32)
        v = torch.randn(b, cap, hkv, d, generator=generator, dtype=torch.float32)
        return k.to(device, dtype), v.to(device, dtype), None
    per = -(-cap // page)
    num_pages = b * per + 1
    k = torch.randn(num_pages, page, hkv, d, generator=generator, dtype=torch.float32)
    v = torch.randn(num_pages, page, hkv, d, generator=generator, dtype=torch.float32)
    bt = torch.randperm(num_pages, generator=generator)[: b * per].reshape(b, per).to(torch.int32)
    return k.to(device, dtype), v.to(device, dtype), bt.to(device)


def _case(b, n, hq, hkv, d, seqlens, kind, dtype=torch.float32, page=None, seed=0, extra=3):
    gen = torch.Generator().manual_seed(seed)
    cap = max(seqlens) + n + extra
    q = torch.randn(b, n, hq, d, generator=gen).to(dtype)
    k, v, bt = make_cache(b, cap, hkv, d, dtype, page=page, generator=gen)
    tree = make_tree(kind, n, batch=b if kind == "random" else 1, generator=gen)
    return q, k, v, torch.tensor(seqlens, dtype=torch.int32), tree, bt


# the reference against the float64 ground truth ------------------------------------------
CASES = [
    # b, n, hq, hkv, seqlens, kind, page
    (1, 1, 4, 4, [0], "chain", None),
    (1, 1, 8, 1, [1000], "chain", None),
    (3, 5, 4, 1, [37, 0, 1], "random", None),
    (3, 5, 8, 8, [1, 1000, 37], "random", 16),
    (1, 64, 8, 2, [37], "kary_chain", None),
    (3, 64, 8, 1, [1000, 0, 37], "random", 1),
    (1, 128, 4, 4, [1], "random", 16),
    (3, 128, 8, 2, [0, 37, 1000], "chain", None),
]


@pytest.mark.parametrize("b,n,hq,hkv,seqlens,kind,page", CASES)
def test_reference_matches_dense_float64(b, n, hq, hkv, seqlens, kind, page):
    q, k, v, L, tree, bt = _case(b, n, hq, hkv, 64, seqlens, kind, page=page, seed=n + b)
    out, lse = specops.reference.tree_attention(q, k, v, L, tree, block_table=bt, return_lse=True)
    want, want_lse = dense_attention(q, k, v, L, tree.ancestors, block_table=bt)
    assert out.dtype == torch.float32 and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == (b, n, hq)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lse.double(), want_lse, atol=2e-5, rtol=1e-5)


def test_reference_float64_and_mask_bits_input():
    q, k, v, L, tree, _ = _case(3, 40, 8, 2, 32, [5, 0, 17], "random", dtype=torch.float64)
    # mask_bits given directly, wider than needed (extra zero words)
    bits = torch.cat([tree.mask_bits, torch.zeros(3, 40, 2, dtype=torch.int32)], -1)
    out, lse = specops.reference.tree_attention(q, k, v, L, bits, return_lse=True, sm_scale=0.3)
    want, want_lse = dense_attention(q, k, v, L, unpack_bits(bits, 40), sm_scale=0.3)
    assert out.dtype == torch.float64 and lse.dtype == torch.float64
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(lse, want_lse, atol=1e-12, rtol=1e-12)


def test_chain_is_causal_attention():
    """A chain tree = causal attention over [prefix; window] (SJD's window)."""
    q, k, v, L, tree, _ = _case(1, 16, 4, 4, 32, [20], "chain", dtype=torch.float64)
    out = specops.reference.tree_attention(q, k, v, L, tree)
    qq = q.transpose(1, 2)  # [B, H, N, D]
    kk, vv = k[:, :36].transpose(1, 2), v[:, :36].transpose(1, 2)
    causal = torch.ones(16, 36, dtype=torch.bool).tril(20)
    want = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=causal)
    torch.testing.assert_close(out, want.transpose(1, 2), atol=1e-12, rtol=1e-12)


def test_non_ancestors_and_unused_rows_do_not_matter():
    """Changing K/V of a slot that is not an ancestor, or beyond L + N (even to NaN), leaves a
    query's output unchanged; changing an ancestor's V changes it."""
    par = torch.tensor([-1, 0, 0, 1, 2, 3])
    tree = Tree.from_parents(par)
    q, k, v, L, _, _ = _case(1, 6, 2, 2, 16, [9], "chain", extra=5)
    base = specops.reference.tree_attention(q, k, v, L, tree)
    k2, v2 = k.clone(), v.clone()
    k2[0, 9 + 2] += 5.0  # slot 2 is not an ancestor of nodes 1, 3, 5
    v2[0, 9 + 2] += 5.0
    k2[0, 9 + 6 :] = float("nan")  # beyond the tree
    v2[0, 9 + 6 :] = float("nan")
    out = specops.reference.tree_attention(q, k2, v2, L, tree)
    assert torch.isfinite(out).all()
    for node in (0, 1, 3, 5):
        torch.testing.assert_close(out[0, node], base[0, node], atol=0, rtol=0)
    assert not torch.allclose(out[0, 2], base[0, 2])
    assert not torch.allclose(out[0, 4], base[0, 4])


def test_empty_row_gives_zero_and_minus_inf():
    q, k, v, L, tree, _ = _case(1, 3, 2, 1, 16, [0], "chain")
    bits = tree.mask_bits.clone()
    bits[0, 1] = 0  # row 1 sees nothing (empty prefix, no tree slot)
    out, lse = specops.reference.tree_attention(q, k, v, L, bits, return_lse=True)
    assert (out[0, 1] == 0).all() and torch.isneginf(lse[0, 1]).all()
    assert torch.isfinite(out).all() and torch.isfinite(lse[0, [0, 2]]).all()


def test_pack_unpack_roundtrip_used_by_tests():
    m = torch.rand(3, 70, 70) < 0.5
    assert torch.equal(unpack_bits(pack_bits(m), 70), m)


# append_kv ---------------------------------------------------------------------------------
@pytest.mark.parametrize("page", [None, 1, 16])
def test_reference_append_kv(page):
    gen = torch.Generator().manual_seed(3)
    b, n, hkv, d = 3, 5, 2, 8
    k_cache, v_cache, bt = make_cache(b, 40, hkv, d, torch.float32, page=page, generator=gen)
    k0, v0 = k_cache.clone(), v_cache.clone()
    k = torch.randn(b, n, hkv, d, generator=gen)
    v = torch.randn(b, n, hkv, d, generator=gen)
    L = torch.tensor([0, 17, 35], dtype=torch.int32)
    specops.reference.append_kv(k_cache, v_cache, k, v, L, block_table=bt)
    for i in range(b):
        got_k = logical_cache(k_cache, bt, i)
        got_v = logical_cache(v_cache, bt, i)
        want_k = logical_cache(k0, bt, i).clone()
        want_v = logical_cache(v0, bt, i).clone()
        want_k[int(L[i]) : int(L[i]) + n] = k[i]
        want_v[int(L[i]) : int(L[i]) + n] = v[i]
        assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
    if page is not None:  # the spare page is untouched
        spare = sorted(set(range(k_cache.shape[0])) - set(bt.flatten().tolist()))
        assert torch.equal(k_cache[spare], k0[spare])


@pytest.mark.parametrize("page", [None, 4])
def test_reference_append_kv_drops_out_of_range_rows(page):
    gen = torch.Generator().manual_seed(4)
    b, n, hkv, d, cap = 3, 6, 1, 4, 12
    k_cache, v_cache, bt = make_cache(b, cap, hkv, d, torch.float32, page=page, generator=gen)
    k0 = k_cache.clone()
    k = torch.randn(b, n, hkv, d, generator=gen)
    L = torch.tensor([9, -2, 40], dtype=torch.int32)  # partly over the end, partly negative, off
    specops.reference.append_kv(k_cache, v_cache, k, k, L, block_table=bt)
    for i in range(b):
        want = logical_cache(k0, bt, i).clone()
        for j in range(n):
            pos = int(L[i]) + j
            if 0 <= pos < cap:
                want[pos] = k[i, j]
        assert torch.equal(logical_cache(k_cache, bt, i), want)
