"""specops.tree_attention's C++ CPU twin (backend "cpu", csrc/tree_attention.cpp) against the
float64 dense-mask ground truth, on fresh random inputs: odd N, prefixes 0 / short / not a
multiple of the page, head dims 64 / 128 / 40 / above the Triton limit, GQA 8:1 and 4:1 and MHA,
float32 / float16 / bfloat16, paged and contiguous caches, sliced / transposed / expanded views,
lse, out=, fast-mode out-of-range values and thread-count independence.  Tolerance as in
test_tree_attention.py: at most twice the same-precision torch error plus a small floor.

The C++ kernel tests run under ASan/UBSan too (scripts/sanitize.sh lists this file)."""

from __future__ import annotations

import pytest
import torch
from test_reference_attention import _case, make_tree
from test_tree_attention import check_against_float64

import specops
from specops._build import has_cpp
from specops.ops._common import pick_backend

pytestmark = pytest.mark.skipif(not has_cpp(), reason="needs the compiled C++ module")
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _inputs(b, n, hq, hkv, d, seqlens, dtype, page=None, seed=0, extra=3, kind="random"):
    return _case(b, n, hq, hkv, d, seqlens, kind, dtype, page=page, seed=seed, extra=extra)


def _cpu(*args, **kw):
    return specops.tree_attention(*args, return_lse=True, backend="cpu", **kw)


# b, n, hq, hkv, d, seqlens, dtype, page
CASES = [
    (1, 1, 4, 4, 64, [0], F32, None),
    (1, 1, 8, 1, 128, [300], F16, None),
    (3, 3, 8, 1, 64, [37, 0, 5], BF16, 16),
    (3, 17, 8, 2, 40, [70, 1, 0], F32, None),  # D not a multiple of 16, GQA 4:1
    (2, 17, 4, 4, 128, [129, 64], F16, 16),  # prefixes ending mid-page, 64-key blocks + 1
    (2, 64, 8, 1, 64, [200, 0], F32, 16),  # GQA 8:1: 512 rows = 8 tiles of 64
    (3, 64, 4, 2, 128, [0, 63, 150], BF16, None),
    (2, 33, 6, 2, 80, [50, 3], F16, 1),  # G = 3, N over one mask word, page 1
    (1, 5, 2, 1, 300, [40], F32, None),  # head dim above the Triton kernel's 256
    (2, 9, 3, 3, 16, [7, 0], BF16, 4),
]


@pytest.mark.parametrize("b,n,hq,hkv,d,seqlens,dtype,page", CASES)
def test_cpu_matches_float64(b, n, hq, hkv, d, seqlens, dtype, page):
    q, k, v, L, tree, bt = _inputs(b, n, hq, hkv, d, seqlens, dtype, page, seed=n * 7 + b + d)
    out, lse = _cpu(q, k, v, L, tree, block_table=bt)
    check_against_float64(out, lse, q, k, v, L, tree.ancestors, bt)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_cpu_strided_views(dtype):
    """q a slice of a fused qkv projection; caches views of a stacked [layers, 2, B, S, H, D];
    a head-major cache [B, H, S, D] seen as [B, S, H, D]; a D-strided cache; q expanded over the
    batch (stride 0); mask_bits wider than ceil(N/32) and expanded; int64 seqlens; sm_scale."""
    gen = torch.Generator().manual_seed(5)
    b, n, hq, hkv, d, s = 3, 40, 4, 2, 64, 120
    qkv = torch.randn(b, n, hq + 2 * hkv, d, generator=gen).to(dtype)
    q = qkv[:, :, :hq]
    stacked = torch.randn(2, 2, b, s, hkv, d, generator=gen).to(dtype)
    k, v = stacked[1, 0], stacked[1, 1]
    tree = make_tree("random", n, batch=1, generator=gen)
    bits = torch.cat([tree.mask_bits, torch.zeros_like(tree.mask_bits)], -1).expand(b, -1, -1)
    L = torch.tensor([70, 3, 80])
    out, lse = _cpu(q, k, v, L, bits, sm_scale=0.3)
    check_against_float64(out, lse, q, k, v, L, tree.ancestors, sm_scale=0.3)
    kh = torch.randn(b, hkv, s, d, generator=gen).to(dtype).transpose(1, 2)  # head-major
    vh = torch.randn(b, hkv, s, 2 * d, generator=gen).to(dtype)[..., ::2].transpose(1, 2)
    q1 = torch.randn(1, n, hq, d, generator=gen).to(dtype).expand(b, -1, -1, -1)
    out, lse = _cpu(q1, kh, vh, L, bits)
    check_against_float64(out, lse, q1, kh, vh, L, tree.ancestors)


def test_cpu_paged_int64_block_table_and_sliced_table():
    q, k, v, L, tree, bt = _inputs(3, 12, 8, 2, 64, [33, 0, 50], F16, page=16, seed=3)
    wide = torch.cat([bt, torch.zeros_like(bt)], 1)[:, : bt.shape[1]]  # a sliced view
    for table in (bt.long(), wide, bt.t().contiguous().t()):
        out, lse = _cpu(q, k, v, L.long(), tree, block_table=table)
        check_against_float64(out, lse, q, k, v, L, tree.ancestors, bt)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_cpu_out_buffers(dtype):
    q, k, v, L, tree, bt = _inputs(2, 7, 4, 2, 64, [20, 5], dtype, page=4, seed=9)
    want, want_lse = _cpu(q, k, v, L, tree, block_table=bt)
    out = torch.full_like(q, 7.0)
    lse = torch.full(q.shape[:3], 7.0)
    got = specops.tree_attention(
        q, k, v, L, tree, block_table=bt, return_lse=True, out=out, lse_out=lse, backend="cpu"
    )
    assert got[0] is out and got[1] is lse
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    strided = out.transpose(1, 2).contiguous().transpose(1, 2)  # not written in place
    with pytest.raises(ValueError, match="out"):
        specops.tree_attention(q, k, v, L, tree, block_table=bt, out=strided, backend="cpu")


def test_cpu_thread_count_does_not_change_bits():
    q, k, v, L, tree, bt = _inputs(3, 70, 8, 2, 64, [300, 0, 129], BF16, page=16, seed=4)
    n0 = specops.get_num_threads()
    try:
        outs = []
        for t in (1, 2, 3):
            specops.set_num_threads(t)
            outs.append(_cpu(q, k, v, L, tree, block_table=bt))
    finally:
        specops.set_num_threads(max(n0, 1))
    for o, lse in outs[1:]:
        assert torch.equal(o, outs[0][0]) and torch.equal(lse, outs[0][1])


def test_cpu_empty_rows_zero_sizes_and_head_dim_zero():
    q, k, v, L, tree, _ = _inputs(1, 3, 2, 1, 16, [0], F32, kind="chain")
    bits = tree.mask_bits.clone()
    bits[0, 1] = 0  # row 1 sees no key at all
    out, lse = _cpu(q, k, v, L, bits)
    assert (out[0, 1] == 0).all() and torch.isneginf(lse[0, 1]).all()
    ref, ref_lse = specops.tree_attention(q, k, v, L, bits, return_lse=True, backend="reference")
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse, atol=1e-6, rtol=1e-5)
    for b, n, d in ((0, 3, 16), (2, 0, 16), (2, 3, 0)):
        q, k, v, L, tree, _ = _inputs(
            max(b, 1), max(n, 1), 2, 1, d, [4] * max(b, 1), F32, kind="chain"
        )
        q, k, v, L = q[:b, :n], k[:b], v[:b], L[:b]
        bits = tree.mask_bits[:, :n].expand(max(b, 1), -1, -1)
        out, lse = _cpu(q, k, v, L, bits)
        ref, ref_lse = specops.tree_attention(
            q, k, v, L, bits, return_lse=True, backend="reference"
        )
        assert out.shape == ref.shape
        torch.testing.assert_close(lse, ref_lse.float(), atol=1e-6, rtol=1e-6)


def test_cpu_out_of_range_values_read_what_the_reference_reads():
    """Fast mode: seqlens negative or past the capacity, int64 seqlens past the int32 range and
    block-table entries outside [0, P) read exactly the positions the reference reads (pages
    clamped into range); nothing out of bounds (the ASan stage runs this)."""
    q, k, v, L, tree, bt = _inputs(4, 5, 2, 2, 16, [10, 3, 0, 0], F32, page=4, seed=6)
    bad_bt = bt.clone()
    bad_bt[1, 0], bad_bt[1, 1], bad_bt[2, :] = 10**6, -7, 2**31 - 1
    for lens in ([10_000, 3, -2, -9], [2**32, -(2**40), 1, 2**62]):
        L = torch.tensor(lens, dtype=torch.int64)
        for table in (None, bad_bt, bad_bt.long()):
            kk, vv = (k, v) if table is not None else (k[:4], v[:4])
            with specops.validation(False):
                got = _cpu(q, kk, vv, L, tree, block_table=table)
                want = specops.tree_attention(
                    q, kk, vv, L, tree, block_table=table, return_lse=True, backend="reference"
                )
            torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_auto_picks_cpu_and_float64_runs_the_reference():
    q, k, v, L, tree, _ = _inputs(1, 3, 2, 2, 16, [4], F32, kind="chain")
    assert pick_backend("tree_attention", "auto", q.device, ("triton", "cpu", "reference")) == "cpu"
    a = specops.tree_attention(q, k, v, L, tree)
    assert torch.equal(a, specops.tree_attention(q, k, v, L, tree, backend="cpu"))
    q64, k64, v64 = (t.double() for t in (q, k, v))
    assert specops.tree_attention(q64, k64, v64, L, tree).dtype == torch.float64
    with pytest.raises(ValueError, match="cpu backend"):
        specops.tree_attention(q64, k64, v64, L, tree, backend="cpu")


def test_cpu_binding_checks_layouts():
    """Direct calls of the binding with what the Python layer never passes: a ValueError naming
    the argument, not an out-of-bounds read."""
    from specops import _build

    q, k, v, L, tree, _ = _inputs(2, 5, 4, 2, 16, [3, 4], F32)
    out, lse = torch.empty(2, 5, 4, 16), torch.empty(2, 5, 4)
    f = _build._C.tree_attention_cpu
    with pytest.raises(ValueError, match="out"):
        f(q, k, v, L, tree.mask_bits, None, 0.25, out.transpose(0, 1), lse)
    with pytest.raises(ValueError, match="mask_bits"):
        f(q, k, v, L, tree.mask_bits[..., :0], None, 0.25, out, lse)
    with pytest.raises(ValueError, match="cache_seqlens"):
        f(q, k, v, L[:1], tree.mask_bits, None, 0.25, out, lse)
    with pytest.raises(ValueError, match="v_cache"):
        f(q, k, v[:, :3], L, tree.mask_bits, None, 0.25, out, lse)
    with pytest.raises(ValueError, match="k_cache"):
        f(q, k[:, :, :0], v[:, :, :0], L, tree.mask_bits, None, 0.25, out, lse)


def test_cpu_opcheck():
    q, k, v, L, tree, bt = _inputs(2, 5, 4, 2, 16, [3, 4], F32, page=4)
    torch.library.opcheck(
        torch.ops.specops.tree_attention.default,
        (q, k, v, L, tree.mask_bits, bt, 0.25, "cpu"),
        test_utils=("test_schema", "test_faketensor"),
    )
