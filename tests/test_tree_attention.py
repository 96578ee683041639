"""specops.tree_attention / specops.append_kv: the Triton kernels (the interpreter on CPU, the
GPU when present) against a float64 dense-mask ground truth, plus the public layer's checks.

Tolerance in the style of flash-attention's tests: the kernel's error against float64 is at
most twice the error of the same-precision torch computation (scores and P @ V in the input
dtype, softmax in float32), plus a small absolute floor.  The interpreter costs ~10-20 ms per
program and K/V tile, so the cases below are a covering subset, not a product."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import aot_compile
from test_reference_attention import dense_attention, logical_cache, make_cache, make_tree

import specops
from specops import Tree
from specops.tree import unpack_bits

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
ATOL = {torch.float32: 1e-5, torch.float16: 2e-4, torch.bfloat16: 2e-3}
LSE_ATOL = {torch.float32: 1e-5, torch.float16: 1e-4, torch.bfloat16: 1e-3}


def _inputs(b, n, hq, hkv, d, seqlens, kind, dtype, page=None, seed=0, extra=3, tree_batch=None):
    gen = torch.Generator().manual_seed(seed)
    cap = max(seqlens) + n + extra
    q = torch.randn(b, n, hq, d, generator=gen).to(DEV, dtype)
    k, v, bt = make_cache(b, cap, hkv, d, dtype, page=page, generator=gen, device=DEV)
    tb = tree_batch if tree_batch is not None else (b if kind == "random" else 1)
    tree = make_tree(kind, n, batch=tb, generator=gen).to(DEV)
    L = torch.tensor(seqlens, dtype=torch.int32, device=DEV)
    return q, k, v, L, tree, bt


def check_against_float64(out, lse, q, k, v, L, anc, bt=None, sm_scale=None):
    """out/lse of the kernel vs float64, relative to the same-precision torch error."""
    cpu = [t.cpu() if t is not None else None for t in (q, k, v, L, anc, bt)]
    q, k, v, L, anc, bt = cpu
    want, want_lse = dense_attention(q, k, v, L, anc, block_table=bt, sm_scale=sm_scale)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    out, lse = out.cpu().double(), lse.cpu().double()
    err = (out - want).abs().max().item()
    err_lse = (lse - want_lse).abs().max().item()
    if q.dtype == torch.float32:
        err_pt, err_pt_lse = 0.0, 0.0
    else:
        pt, pt_lse = dense_attention(
            q, k, v, L, anc, block_table=bt, sm_scale=sm_scale, dtype=q.dtype
        )
        err_pt = (pt - want).abs().max().item()
        err_pt_lse = (pt_lse - want_lse).abs().max().item()
    assert err <= 2 * err_pt + ATOL[q.dtype], (err, err_pt)
    assert err_lse <= 2 * err_pt_lse + LSE_ATOL[q.dtype], (err_lse, err_pt_lse)


# the kernel against float64 --------------------------------------------------------------
# b, n, hq, hkv, d, seqlens, tree kind, dtype, page: N in {1, 5, 64, 128}, prefixes 0, 1, 37,
# 1000, B in {1, 3}, GQA groups 1, 4, 8, contiguous and paged (page 1, 16; shuffled table)
CASES = [
    (1, 1, 4, 4, 64, [0], "chain", torch.float32, None),
    (1, 1, 8, 1, 128, [1000], "chain", torch.float16, None),  # split-KV + merge
    (3, 5, 4, 1, 64, [37, 0, 1], "random", torch.float16, None),
    (3, 5, 8, 8, 64, [1, 1000, 37], "random", torch.float32, 16),
    (1, 64, 8, 1, 128, [1000], "kary_chain", torch.float16, None),
    (3, 64, 4, 1, 64, [1000, 0, 37], "random", torch.float16, 1),
    (1, 128, 4, 4, 64, [1], "random", torch.float32, 16),
    (3, 128, 8, 2, 64, [0, 37, 1000], "chain", torch.float16, None),
    (2, 9, 6, 2, 80, [50, 3], "random", torch.float16, 16),  # G = 3, D padded to 128
    (1, 5, 8, 1, 64, [1000], "random", torch.float16, 1),  # paged + split-KV
    (3, 128, 8, 2, 128, [1000, 37, 0], "kary_chain", torch.float16, 16),
    (3, 64, 8, 1, 64, [37, 1, 1000], "chain", torch.float32, None),
]


@pytest.mark.parametrize("b,n,hq,hkv,d,seqlens,kind,dtype,page", CASES)
def test_kernel_matches_float64(b, n, hq, hkv, d, seqlens, kind, dtype, page):
    q, k, v, L, tree, bt = _inputs(b, n, hq, hkv, d, seqlens, kind, dtype, page, seed=n * 7 + b)
    out, lse = specops.tree_attention(
        q, k, v, L, tree, block_table=bt, return_lse=True, backend="triton"
    )
    check_against_float64(out, lse, q, k, v, L, tree.ancestors, bt)


@pytest.mark.parametrize("num_splits,page", [(1, None), (2, 16), (5, None), (3, 1)])
def test_split_counts_agree(num_splits, page):
    """Any split count gives the same result: splits of an empty prefix (request 2) and
    splits past a short prefix contribute nothing (lse -inf) to the merge."""
    from specops.triton_kernels.tree_attention import tree_attention_triton

    q, k, v, L, tree, bt = _inputs(3, 5, 4, 2, 64, [300, 1, 0], "random", torch.float32, page)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=DEV)
    tree_attention_triton(q, k, v, L, tree.mask_bits, bt, 0.125, out, lse, num_splits=num_splits)
    check_against_float64(out, lse, q, k, v, L, tree.ancestors, bt, sm_scale=0.125)


def test_broadcast_tree_mask_bits_and_strided_inputs():
    """A batch-1 tree for B requests, mask_bits wider than ceil(N/32), q a strided view (a
    slice of a fused qkv projection), caches views of a stacked [layers, 2, B, S, H, D]."""
    gen = torch.Generator().manual_seed(5)
    b, n, hq, hkv, d, s = 3, 40, 4, 2, 64, 120
    qkv = torch.randn(b, n, hq + 2 * hkv, d, generator=gen).to(DEV, torch.float16)
    q = qkv[:, :, :hq]
    stacked = torch.randn(2, 2, b, s, hkv, d, generator=gen).to(DEV, torch.float16)
    k, v = stacked[1, 0], stacked[1, 1]
    tree = make_tree("random", n, batch=1, generator=gen).to(DEV)
    bits = torch.cat([tree.mask_bits, torch.zeros_like(tree.mask_bits)], -1)
    L = torch.tensor([70, 3, 80], dtype=torch.int32, device=DEV)
    out, lse = specops.tree_attention(q, k, v, L, bits, return_lse=True, backend="triton")
    check_against_float64(out, lse, q, k, v, L, tree.ancestors)


def test_sm_scale_and_matches_reference_backend():
    q, k, v, L, tree, bt = _inputs(2, 7, 2, 1, 32, [20, 5], "random", torch.float32, page=4)
    got = specops.tree_attention(q, k, v, L, tree, block_table=bt, sm_scale=0.7, backend="triton")
    ref = specops.tree_attention(
        q, k, v, L, tree, block_table=bt, sm_scale=0.7, backend="reference"
    )
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=1e-5)


def test_empty_rows_give_zero_and_minus_inf():
    q, k, v, L, tree, _ = _inputs(1, 3, 2, 1, 16, [0], "chain", torch.float32)
    bits = tree.mask_bits.clone()
    bits[0, 1] = 0  # row 1 sees no key at all
    out, lse = specops.tree_attention(q, k, v, L, bits, return_lse=True, backend="triton")
    assert (out[0, 1] == 0).all() and torch.isneginf(lse[0, 1]).all()
    ref_out, ref_lse = specops.tree_attention(
        q, k, v, L, bits, return_lse=True, backend="reference"
    )
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse, atol=1e-6, rtol=1e-5)


def test_out_of_range_values_stay_in_bounds():
    """Fast mode (no validation): seqlens past the capacity clamp to it, block-table entries
    outside [0, P) clamp into range; nothing is read out of bounds, results are finite."""
    q, k, v, L, tree, bt = _inputs(2, 5, 2, 2, 16, [10, 3], "random", torch.float32, page=4)
    L_big = torch.tensor([10_000, 3], dtype=torch.int32, device=DEV)
    bad_bt = bt.clone()
    bad_bt[1, 0] = 10**6
    bad_bt[1, 1] = -7
    with specops.validation(False):
        got = specops.tree_attention(q, k, v, L_big, tree, block_table=bad_bt, backend="triton")
        ref = specops.tree_attention(q, k, v, L_big, tree, block_table=bad_bt, backend="reference")
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=1e-5)
    # int64 seqlens past the int32 range clamp to the capacity too (no wrap to 2**32 -> 0)
    L_64 = torch.tensor([2**32, 3], dtype=torch.int64, device=DEV)
    with specops.validation(False):
        got = specops.tree_attention(q, k, v, L_64, tree, block_table=bt, backend="triton")
        want = specops.tree_attention(q, k, v, L_big, tree, block_table=bt, backend="triton")
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("page", [None, 4])
def test_negative_seqlens_read_what_the_reference_reads(page):
    """Fast mode: a negative cache_seqlens leaves no prefix and puts tree slot j at position
    L + j, visible only from 0 on (L = -2: slots 0-1 hidden, the rest seen), as the reference
    and the C++ twin do; int64 lengths far below zero hide every slot (rows out: 0)."""
    q, k, v, _, tree, bt = _inputs(3, 5, 2, 1, 16, [4, 4, 4], "random", torch.float32, page=page)
    L = torch.tensor([-2, -(2**40), -1], dtype=torch.int64, device=DEV)
    with specops.validation(False):
        got, lse = specops.tree_attention(
            q, k, v, L, tree, block_table=bt, return_lse=True, backend="triton"
        )
        want, want_lse = specops.tree_attention(
            q, k, v, L, tree, block_table=bt, return_lse=True, backend="reference"
        )
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse, atol=2e-6, rtol=1e-5)
    assert (want[1] == 0).all() and want[0].abs().sum() > 0


# append_kv ---------------------------------------------------------------------------------
@pytest.mark.parametrize("page", [None, 1, 16])
def test_append_kv_matches_reference(page):
    gen = torch.Generator().manual_seed(11)
    b, n, hkv, d = 3, 6, 2, 64
    k_cache, v_cache, bt = make_cache(b, 60, hkv, d, torch.float16, page=page, generator=gen)
    k = torch.randn(b, n, hkv, d, generator=gen).half()
    v = torch.randn(b, n, hkv, d, generator=gen).half()
    L = torch.tensor([0, 17, 54], dtype=torch.int32)
    results = {}
    for be in ("reference", "triton", "cpu"):
        dev = "cpu" if be == "cpu" else DEV
        kc, vc = k_cache.clone().to(dev), v_cache.clone().to(dev)
        specops.append_kv(
            kc, vc, k.to(dev), v.to(dev), L.to(dev),
            block_table=None if bt is None else bt.to(dev), backend=be,
        )  # fmt: skip
        results[be] = (kc.cpu(), vc.cpu())
    want_k, want_v = results["reference"]
    for be in ("triton", "cpu"):
        assert torch.equal(results[be][0], want_k) and torch.equal(results[be][1], want_v), be
    assert not torch.equal(want_k, k_cache)


def test_append_kv_drops_out_of_range_rows():
    gen = torch.Generator().manual_seed(12)
    k_cache, v_cache, bt = make_cache(3, 12, 1, 16, torch.float32, page=4, generator=gen)
    k = torch.randn(3, 6, 1, 16, generator=gen)
    L = torch.tensor([9, -2, 40], dtype=torch.int32)
    bad_bt = bt.clone()
    bad_bt[2] = 10**6  # request 2 is entirely out of range anyway
    results = []
    for be in ("triton", "reference", "cpu"):
        dev = "cpu" if be == "cpu" else DEV
        kc, vc = k_cache.clone().to(dev), v_cache.clone().to(dev)
        with specops.validation(False):
            specops.append_kv(kc, vc, k.to(dev), k.to(dev), L.to(dev), block_table=bt.to(dev))
            specops.append_kv(
                kc, vc, k.to(dev), k.to(dev), L.to(dev), block_table=bad_bt.to(dev), backend=be
            )
        results.append(kc.cpu())
    assert torch.equal(results[0], results[1]) and torch.equal(results[2], results[1])


@pytest.mark.parametrize("page", [None, 16])
def test_append_then_attend_end_to_end(page):
    """append_kv the tree's K/V, then tree_attention = dense attention over [prefix; tree]."""
    gen = torch.Generator().manual_seed(13)
    b, n, hq, hkv, d = 3, 12, 8, 2, 64
    k_cache, v_cache, bt = make_cache(b, 80, hkv, d, torch.float16, page=page, generator=gen)
    k_cache, v_cache = k_cache.to(DEV), v_cache.to(DEV)
    bt = None if bt is None else bt.to(DEV)
    q = torch.randn(b, n, hq, d, generator=gen).to(DEV, torch.float16)
    k = torch.randn(b, n, hkv, d, generator=gen).to(DEV, torch.float16)
    v = torch.randn(b, n, hkv, d, generator=gen).to(DEV, torch.float16)
    L = torch.tensor([60, 0, 33], dtype=torch.int32, device=DEV)
    tree = make_tree("kary_chain", n).to(DEV)
    specops.append_kv(k_cache, v_cache, k, v, L, block_table=bt, backend="triton")
    for i in range(b):  # the new rows are where the op will read them
        li = int(L[i])
        got = logical_cache(k_cache.cpu(), None if bt is None else bt.cpu(), i)[li : li + n]
        assert torch.equal(got, k[i].cpu())
    out, lse = specops.tree_attention(
        q, k_cache, v_cache, L, tree, block_table=bt, return_lse=True, backend="triton"
    )
    check_against_float64(out, lse, q, k_cache, v_cache, L, tree.ancestors, bt)


# the public layer -------------------------------------------------------------------------
def test_auto_backend():
    q, k, v, L, tree, _ = _inputs(1, 3, 2, 2, 16, [4], "chain", torch.float32)
    from specops.ops._common import backend_table, pick_backend

    want = "triton" if GPU else ("cpu" if specops._build.has_cpp() else "reference")
    have = backend_table()["tree_attention"]
    assert pick_backend("tree_attention", "auto", q.device, have) == want
    a = specops.tree_attention(q, k, v, L, tree)
    b = specops.tree_attention(q, k, v, L, tree, backend="reference")
    torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)
    # head_dim above the kernel's 256 or float64: auto falls back to the reference
    q64, k64, v64 = (t.double() for t in (q, k, v))
    out = specops.tree_attention(q64, k64, v64, L, tree)
    assert out.dtype == torch.float64


def test_bad_inputs():
    # every input on DEV: a CPU tensor among CUDA ones is a device error before the one tested
    q, k, v, L, tree, bt = _inputs(2, 5, 4, 2, 16, [3, 4], "random", torch.float32, page=4)
    kc, vc, _ = make_cache(2, 12, 2, 16, torch.float32, device=DEV)
    ta = specops.tree_attention
    with pytest.raises(ValueError, match="mask_bits"):
        ta(q, kc, vc, L, torch.zeros(2, 5, 0, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="mask_bits"):  # N = 40 needs 2 words
        q40 = torch.randn(2, 40, 4, 16, device=DEV)
        kc2, vc2, _ = make_cache(2, 60, 2, 16, torch.float32, device=DEV)
        ta(q40, kc2, vc2, L, torch.zeros(2, 40, 1, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="nodes"):
        ta(q, kc, vc, L, Tree.chain(6).to(DEV))
    with pytest.raises(TypeError, match="tree"):
        ta(q, kc, vc, L, [0, 1])
    with pytest.raises(TypeError, match="tree"):
        ta(q, kc, vc, L, tree.mask_bits.long())
    with pytest.raises(ValueError, match="head dims"):
        ta(q, kc[..., :8], vc[..., :8], L, tree)
    with pytest.raises(ValueError, match="KV heads"):
        ta(torch.randn(2, 5, 3, 16, device=DEV), kc, vc, L, tree)
    with pytest.raises(TypeError, match="k_cache"):
        ta(q, kc.half(), vc.half(), L, tree)
    with pytest.raises(TypeError, match="q"):
        ta(q.long(), kc, vc, L, tree)
    with pytest.raises(ValueError, match="v_cache"):
        ta(q, kc, vc[:, :5], L, tree)
    with pytest.raises(ValueError, match="k_cache.*meta"):
        ta(q, kc.to("meta"), vc.to("meta"), L, tree)
    with pytest.raises(ValueError, match="cache_seqlens"):
        ta(q, kc, vc, L[:1], tree)
    with pytest.raises(TypeError, match="cache_seqlens"):
        ta(q, kc, vc, L.float(), tree)
    with pytest.raises(ValueError, match="k_cache"):  # contiguous cache for 3 requests, B = 2
        kc3, vc3, _ = make_cache(3, 12, 2, 16, torch.float32, device=DEV)
        ta(q, kc3, vc3, L, tree)
    with pytest.raises(ValueError, match="block_table"):
        ta(q, k, v, L, tree, block_table=bt[:1])
    with pytest.raises(TypeError, match="block_table"):
        ta(q, k, v, L, tree, block_table=bt.float())
    with pytest.raises(ValueError, match="block_table"):
        ta(q, k, v, L, tree, block_table=bt[0])
    # value checks (validation mode, on in the test suite)
    with pytest.raises(ValueError, match="cache_seqlens.*capacity"):
        ta(q, kc, vc, torch.tensor([3, 8], dtype=torch.int32, device=DEV), tree)
    with pytest.raises(ValueError, match="cache_seqlens"):
        ta(q, kc, vc, torch.tensor([3, -1], dtype=torch.int32, device=DEV), tree)
    bad = bt.clone()
    bad[1, 0] = 999
    with pytest.raises(ValueError, match=r"block_table\[1, 0\]"):
        ta(q, k, v, L, tree, block_table=bad)
    with pytest.raises(ValueError, match="backend"):
        ta(q, kc, vc, L, tree, backend="metal")
    with pytest.raises(ValueError, match="head_dim"):
        q5, k5, v5, L5, t5, _ = _inputs(1, 2, 1, 1, 300, [1], "chain", torch.float32)
        ta(q5, k5, v5, L5, t5, backend="triton")
    # append_kv
    nk = torch.randn(2, 5, 2, 16, device=DEV)
    k1 = torch.randn(2, 5, 1, 16, device=DEV)
    with pytest.raises(ValueError, match="KV heads"):
        specops.append_kv(kc, vc, k1, k1, L)
    with pytest.raises(TypeError, match="v"):
        specops.append_kv(kc, vc, nk, nk.half(), L)
    with pytest.raises(TypeError, match="k_cache"):
        specops.append_kv(kc.half(), vc.half(), nk, nk, L)
    with pytest.raises(ValueError, match="head dims"):
        specops.append_kv(kc, vc, nk[..., :8], nk[..., :8], L)
    with pytest.raises(ValueError, match="capacity"):
        specops.append_kv(kc, vc, nk, nk, torch.tensor([0, 8], dtype=torch.int32, device=DEV))


def test_opcheck_and_compile():
    q, k, v, L, tree, bt = _inputs(2, 5, 4, 2, 16, [3, 4], "random", torch.float32, page=4)
    for be in ("reference", "triton"):
        torch.library.opcheck(
            torch.ops.specops.tree_attention.default,
            (q, k, v, L, tree.mask_bits, bt, 0.25, be),
            test_utils=("test_schema", "test_faketensor"),
        )
    nk, nv = torch.randn(2, 5, 2, 16, device=DEV), torch.randn(2, 5, 2, 16, device=DEV)
    for be in ("reference", "triton"):  # the mutation of both caches is declared
        torch.library.opcheck(
            torch.ops.specops.append_kv.default,
            (k.clone(), v.clone(), nk, nv, L, bt, be),
            test_utils=("test_schema", "test_faketensor"),
        )

    def step(q, k, v, L, nk, nv):
        specops.append_kv(k, v, nk, nv, L, block_table=bt, backend="reference")
        return specops.tree_attention(
            q, k, v, L, tree, block_table=bt, return_lse=True, backend="reference"
        )

    k1, v1, k2, v2 = k.clone(), v.clone(), k.clone(), v.clone()
    with specops.validation(False):
        f = torch.compile(step, fullgraph=True)
        got = f(q, k1, v1, L, nk, nv)
    want = step(q, k2, v2, L, nk, nv)
    assert torch.equal(k1, k2) and torch.equal(v1, v2)
    torch.testing.assert_close(got, want)


def test_mask_bits_are_the_ancestors():
    """The kernels read tree.mask_bits; the tests' ground truth reads tree.ancestors."""
    tree = make_tree("random", 70, batch=2)
    assert torch.equal(unpack_bits(tree.mask_bits, 70), tree.ancestors)


def test_bench_quick_runs():
    """bench/bench_tree_attention.py in its CI-sized mode (numbers not checked)."""
    from specops.bench import bench_tree_attention

    rows = bench_tree_attention.run(DEV, quick=True)
    names = {r.backend for r in rows}
    assert {"specops", "specops chain", "specops paged", "sdpa dense mask"} <= names
    assert all(r.median_us > 0 for r in rows)


def test_kernel_lowers_for_sm90_without_spills(tmp_path):
    """Ahead-of-time compile for sm_90 (no GPU needed, out of the interpreter): catches what the
    interpreter accepts but the compiler does not, and register spills of the bf16 tiles."""
    import os
    import subprocess

    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    res = subprocess.run(  # the installed copy (specops.bench), not a source tree on the path
        [sys.executable, "-m", "specops.bench.bench_tree_attention", "--aot", "--smoke"],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    if res.returncode != 0 and "ptxas" in res.stderr and "not found" in res.stderr:
        pytest.skip("no ptxas for ahead-of-time compilation")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("sm_90")]
    assert res.returncode == 0 and len(lines) == 2, res.stdout + res.stderr[-3000:]
    assert all("STACK:0 " in ln for ln in lines), res.stdout
    assert "wgmma" in lines[0], res.stdout  # the packed 128-row tile runs on wgmma


_AOT = """
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from specops.triton_kernels import append_kv as a, tree_attention as ta


def compile_(fn, types, consts, **options):
    sig = {n: "i32" for n in fn.arg_names}
    sig.update(types)
    sig.update({n: "constexpr" for n in consts})
    src = ASTSource(fn, signature=sig, constexprs=consts)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


for paged in (False, True):
    ty = dict(KC="*bf16", VC="*bf16", K="*bf16", V="*bf16", SEQLENS="*i32", BT="*i32")
    consts = dict(HKV=8, D=128, BLOCK_H=8, BLOCK_D=128, PAGED=paged, PAGE_SIZE=16 if paged else 1)
    compile_(a._append_kv, ty, consts, num_warps=4)
ty = dict(O_PART="*fp32", LSE_PART="*fp32", OUT="*bf16", LSE="*fp32")
compile_(ta._merge_splits, ty, dict(D=128, NUM_SPLITS=4, ROWS=16, BLOCK_D=128), num_warps=4)
ty = dict(OA="*bf16", LA="*fp32", OB="*bf16", LB="*fp32", OUT="*bf16", LSE="*fp32")
compile_(ta._merge_two_states, ty, dict(D=128, ROWS=16, BLOCK_D=128), num_warps=4)
ty = dict(Q="*bf16", K="*bf16", V="*bf16", SEQLENS="*i32", MASK="*i32", BT="*i32", OUT="*bf16")
ty.update(LSE="*fp32", qk_scale="fp32")
bm, bn, bd, warps, stages = ta._config(16, 4, 128, torch.bfloat16)
consts = dict(G=4, D=128, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, NUM_SPLITS=1, PAGED=False,
              PAGE_SIZE=1, PREC="tf32", TREE_ONLY=True)
compile_(ta._tree_attn_fwd, ty, consts, num_warps=warps, num_stages=stages)
print("compiled")
"""


def test_other_kernels_lower_for_sm90():
    """append_kv, both merges and the tree-only forward, compiled ahead of time for sm_90."""
    aot_compile(_AOT)


# GPU only ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 16, 256])
@pytest.mark.parametrize("hq,hkv", [(32, 32), (32, 8)])
def test_gpu_bf16_large(page, hq, hkv):
    """bf16 (the interpreter's tl.dot is wrong on bf16) at benchmark-like sizes."""
    for b, n, seqlens in ((1, 16, [16000]), (8, 64, [4096, 1, 0, 37, 1000, 4000, 2048, 777])):
        q, k, v, L, tree, bt = _inputs(b, n, hq, hkv, 128, seqlens, "random", torch.bfloat16, page)
        out, lse = specops.tree_attention(
            q, k, v, L, tree, block_table=bt, return_lse=True, backend="triton"
        )
        check_against_float64(out, lse, q, k, v, L, tree.ancestors, bt)


@pytest.mark.gpu
def test_gpu_cuda_graph_replay():
    """Captured once, replayed with new cache_seqlens and inputs written in place."""
    q, k, v, L, tree, bt = _inputs(2, 16, 8, 2, 128, [500, 900], "random", torch.float16, 16)
    nk = torch.randn(2, 16, 2, 128, device=DEV, dtype=torch.float16)
    with specops.validation(False):
        specops.tree_attention(q, k, v, L, tree, block_table=bt)  # compile outside capture
        specops.append_kv(k, v, nk, nk, L, block_table=bt)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            specops.append_kv(k, v, nk, nk, L, block_table=bt)
            out = specops.tree_attention(q, k, v, L, tree, block_table=bt)
    for lens in ([10, 0], [300, 901]):
        L.copy_(torch.tensor(lens, dtype=torch.int32))
        q.normal_()
        nk.normal_()
        g.replay()
        want = specops.tree_attention(q, k, v, L, tree, block_table=bt, backend="reference")
        torch.testing.assert_close(out.float(), want.float(), atol=2e-3, rtol=2e-3)
