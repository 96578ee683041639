"""tree_attention backend "cascade" (issue 4): the prefix through flash-attn's
flash_attn_with_kvcache, the tree slots through the Triton kernel in tree-only mode, merged by
log-sum-exp.  On CPU: the tree-only kernel (interpreter) and the merge against the float64
reference, and the whole cascade with a torch stand-in for flash_attn; on a GPU with flash-attn
installed: bf16 against float64 and the Triton backend."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from test_reference_attention import logical_cache
from test_tree_attention import DEV, GPU, _inputs, check_against_float64

import specops


# cascade backend: prefix (flash-attn) + tree-only Triton + log-sum-exp merge ------------------
def _tree_slots(k_cache, v_cache, L, bt, n):
    """The N tree slots of every request as a contiguous cache [B, N, Hkv, D] whose prefix is
    empty: attention over it with cache_seqlens 0 is the tree-only part."""
    b = L.shape[0]
    ks = [logical_cache(k_cache.cpu(), None if bt is None else bt.cpu(), i) for i in range(b)]
    vs = [logical_cache(v_cache.cpu(), None if bt is None else bt.cpu(), i) for i in range(b)]
    li = [int(x) for x in L.cpu()]
    kt = torch.stack([k[x : x + n] for k, x in zip(ks, li)])
    vt = torch.stack([v[x : x + n] for v, x in zip(vs, li)])
    return kt.to(k_cache.device), vt.to(v_cache.device)


# b, n, hq, hkv, d, seqlens, page, dtype: N in {1, 5, 37}, prefixes 0/1/37, GQA 1 and 4,
# contiguous and paged (page 1, 16)
TREE_ONLY_CASES = [
    (1, 1, 4, 4, 32, [0], None, torch.float32),
    (3, 5, 4, 1, 32, [37, 0, 1], 16, torch.float32),
    (2, 37, 4, 4, 32, [1, 37], 1, torch.float32),
    (2, 37, 8, 2, 64, [0, 37], None, torch.float16),
    (3, 5, 2, 2, 16, [1, 37, 0], 1, torch.float16),
    (1, 37, 4, 1, 32, [37], 16, torch.float32),
]


@pytest.mark.parametrize("b,n,hq,hkv,d,seqlens,page,dtype", TREE_ONLY_CASES)
def test_tree_only_kernel_matches_reference(b, n, hq, hkv, d, seqlens, page, dtype):
    """tree_only=True attends to the tree slots only: the same as attention over a cache that
    holds just those slots (prefix 0); the prefix values never enter."""
    from specops.triton_kernels.tree_attention import tree_attention_triton

    q, k, v, L, tree, bt = _inputs(b, n, hq, hkv, d, seqlens, "random", dtype, page, seed=n + b)
    out = torch.empty(q.shape, dtype=torch.float32, device=DEV)  # the cascade's float32 part
    lse = torch.empty(q.shape[:3], device=DEV)
    tree_attention_triton(q, k, v, L, tree.mask_bits, bt, d**-0.5, out, lse, tree_only=True)
    kt, vt = _tree_slots(k, v, L, bt, n)
    zero = torch.zeros_like(L)
    check_against_float64(out.to(dtype), lse, q, kt, vt, zero, tree.ancestors)
    # also into q's dtype, and blind to NaN in the prefix
    k2, v2 = k.clone(), v.clone()
    for i, x in enumerate(seqlens):
        for cache in (k2, v2):
            if bt is None:
                cache[i, :x] = float("nan")
            elif x:
                pages = bt[i, : -(-x // page)].long()
                cache[pages] = torch.where(
                    torch.arange(page, device=DEV)[None, :, None, None]
                    + page * torch.arange(len(pages), device=DEV)[:, None, None, None]
                    < x,
                    float("nan"),
                    cache[pages],
                )
    out2 = torch.empty_like(q)
    tree_attention_triton(q, k2, v2, L, tree.mask_bits, bt, d**-0.5, out2, lse, tree_only=True)
    assert torch.isfinite(out2).all()
    check_against_float64(out2, lse, q, kt, vt, zero, tree.ancestors)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("page", [None, 16])
def test_merge_of_prefix_and_tree_is_the_full_attention(dtype, page):
    """prefix-only reference + tree-only reference + merge_states == the full reference, also
    with flash-attn's conventions for an empty prefix (lse +inf, whatever out holds)."""
    from specops.ops._attention_cascade import merge_states

    q, k, v, L, tree, bt = _inputs(3, 9, 4, 2, 32, [37, 0, 1], "random", torch.float32, page)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    ref = specops.reference.tree_attention
    want, want_lse = ref(q, k, v, L, tree, block_table=bt, return_lse=True)
    no_tree = torch.zeros_like(tree.mask_bits)
    out_p, lse_p = ref(q, k, v, L, no_tree, block_table=bt, return_lse=True)
    kt, vt = _tree_slots(k, v, L, bt, 9)
    out_t, lse_t = ref(q, kt, vt, torch.zeros_like(L), tree, return_lse=True)
    assert torch.isneginf(lse_p[1]).all()  # request 1 has no prefix
    tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=2e-6, rtol=1e-5)
    out, lse = merge_states(out_p, lse_p, out_t, lse_t)
    assert out.dtype == lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    torch.testing.assert_close(out.to(dtype), want, **tol)
    torch.testing.assert_close(lse, want_lse.to(lse.dtype), **tol)
    lse_p[1] = float("inf")  # flash-attn: a row with no key
    out_p[1] = float("nan")
    out, lse = merge_states(out_p, lse_p, out_t, lse_t)
    torch.testing.assert_close(out.to(dtype), want, **tol)
    torch.testing.assert_close(lse, want_lse.to(lse.dtype), **tol)
    # symmetric, and two empty states give 0 and -inf
    out2, lse2 = merge_states(out_t, lse_t, out_p, lse_p)
    torch.testing.assert_close(out2, out, **tol)
    empty = torch.full_like(lse_t, float("-inf"))
    out3, lse3 = merge_states(out_p, empty, out_t, empty)
    assert (out3 == 0).all() and torch.isneginf(lse3).all()


def test_merge_kernel_matches_merge_states():
    """The Triton merge (one launch) against the torch definition: flash-attn's [B, H, N] lse
    read through a transposed view, a float32 second state, empty (-inf, +inf, NaN) rows."""
    from specops.triton_kernels.tree_attention import merge_states_triton

    from specops.ops._attention_cascade import merge_states

    gen = torch.Generator().manual_seed(3)
    b, n, h, d = 2, 5, 3, 40
    out_a = torch.randn(b, n, h, d, generator=gen).half()
    lse_a = torch.randn(b, h, n, generator=gen) * 3  # flash-attn's layout
    out_b = torch.randn(b, n, h, d, generator=gen)
    lse_b = torch.randn(b, n, h, generator=gen) * 3
    lse_a[0, :, 1] = float("inf")  # no prefix keys: flash-attn's +inf
    lse_a[1, 2, 3] = float("nan")
    lse_b[1, 3, 0] = float("-inf")
    lse_a[1, 0, 4] = lse_b[1, 4, 0] = float("-inf")  # both empty
    out_a[0, 1] = float("nan")  # garbage in an empty state never enters
    want, want_lse = merge_states(out_a, lse_a.transpose(1, 2), out_b, lse_b)
    for dtype in (torch.float16, torch.float32):
        out = torch.empty(b, n, h, d, dtype=dtype, device=DEV)
        lse = torch.empty(b, n, h, device=DEV)
        merge_states_triton(
            out_a.to(DEV), lse_a.to(DEV).transpose(1, 2), out_b.to(DEV), lse_b.to(DEV), out, lse
        )
        tol = 1e-3 if dtype == torch.float16 else 2e-6
        torch.testing.assert_close(out.cpu().float(), want, atol=tol, rtol=tol)
        torch.testing.assert_close(lse.cpu(), want_lse, atol=2e-6, rtol=1e-6)
    assert (out[1, 4, 0] == 0).all() and torch.isneginf(lse[1, 4, 0])


def _fake_flash_attn_with_kvcache(
    q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
    cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
    window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
    return_softmax_lse=False,
):  # fmt: skip
    """flash-attn 2.x's flash_attn_with_kvcache in plain torch, with its argument checks and
    return conventions: out [B, N, Hq, D] in q's dtype, softmax_lse [B, Hq, N] float32, +inf
    (and out 0) for a row without keys; non-causal: every query sees keys [0, L_b)."""
    assert q.dtype in (torch.float16, torch.bfloat16), "only support fp16 and bf16"
    assert k_cache.dtype == v_cache.dtype == q.dtype
    assert k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    assert k is None and v is None and rotary_cos is None and cache_batch_idx is None
    assert not causal and window_size == (-1, -1) and softcap == 0.0 and alibi_slopes is None
    b, n, hq, d = q.shape
    assert cache_seqlens.dtype == torch.int32 and tuple(cache_seqlens.shape) == (b,)
    if block_table is not None:
        assert block_table.dtype == torch.int32 and block_table.stride(-1) == 1
        assert k_cache.shape[1] % 256 == 0, "Paged KV cache block size must be divisible by 256"
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.zeros(b, n, hq, d, dtype=q.dtype, device=q.device)
    lse = torch.full((b, hq, n), float("inf"), device=q.device)
    for i in range(b):
        x = int(cache_seqlens[i])
        if x == 0:
            continue
        kk = logical_cache(k_cache, block_table, i)[:x].float()
        vv = logical_cache(v_cache, block_table, i)[:x].float()
        g = hq // kk.shape[1]
        kk, vv = (t.repeat_interleave(g, 1).transpose(0, 1) for t in (kk, vv))  # [Hq, x, D]
        s = q[i].float().transpose(0, 1) @ kk.transpose(1, 2) * scale  # [Hq, N, x]
        lse[i] = torch.logsumexp(s, -1)
        out[i] = (torch.softmax(s, -1) @ vv).transpose(0, 1).to(q.dtype)
    return (out, lse) if return_softmax_lse else out


@pytest.fixture
def fake_flash(monkeypatch):
    """A stand-in ``flash_attn`` module (plain torch), so the cascade's wiring runs on CPU."""
    calls = []

    def fn(*args, **kwargs):
        calls.append(kwargs)
        return _fake_flash_attn_with_kvcache(*args, **kwargs)

    mod = types.ModuleType("flash_attn")
    mod.flash_attn_with_kvcache = fn
    monkeypatch.setitem(sys.modules, "flash_attn", mod)
    return calls


@pytest.mark.parametrize(
    "b,n,hq,hkv,seqlens,page",
    [(3, 5, 8, 2, [37, 0, 1], None), (2, 37, 4, 4, [0, 300], 256), (1, 1, 4, 1, [37], None)],
)
def test_cascade_with_fake_flash_attn(fake_flash, b, n, hq, hkv, seqlens, page):
    """The whole cascade (prefix through flash_attn_with_kvcache, tree-only Triton, merge) with
    a torch stand-in for flash-attn, against float64; flash-attn gets int32 seqlens and block
    table, causal=False, the lse, and L_b + N never reaches past the capacity."""
    from specops.ops._attention_cascade import tree_attention_cascade
    from specops.ops.attention import ATTENTION

    kernels = (ATTENTION.triton_kernel(), ATTENTION.triton_kernel("merge_states_triton"))
    dtype = torch.float16
    q, k, v, L, tree, bt = _inputs(b, n, hq, hkv, 32, seqlens, "random", dtype, page, seed=b)
    if bt is not None:
        bt = bt.long()  # any int dtype in, int32 to flash-attn
    out, lse = tree_attention_cascade(q, k, v, L, tree.mask_bits, bt, 32**-0.5, kernels=kernels)
    (call,) = fake_flash
    assert call["causal"] is False and call["return_softmax_lse"] is True
    assert call["softmax_scale"] == 32**-0.5 and call["cache_seqlens"].dtype == torch.int32
    assert (call["block_table"] is None) == (page is None)
    assert out.dtype == dtype and lse.dtype == torch.float32 and out.shape == q.shape
    check_against_float64(out, lse, q, k, v, L, tree.ancestors, bt)
    if bt is None:  # an empty batch never reaches flash-attn (it rejects batch 0)
        o0, l0 = tree_attention_cascade(q[:0], k[:0], v[:0], L[:0], tree.mask_bits[:0], None, 1.0,
                                        kernels=kernels)  # fmt: skip
        assert o0.shape == (0, *q.shape[1:]) and l0.shape == (0, *q.shape[1:3])
        assert len(fake_flash) == 1


def test_cascade_backend_choice_and_errors(monkeypatch, fake_flash):
    """cascade is asked for by name only ("auto" never takes it, nor probes flash-attn), needs
    CUDA, float16/bfloat16 and (paged) a page size flash-attn 2.x takes."""
    from specops import _build
    from specops.ops._common import pick_backend

    probed = []
    monkeypatch.setattr(_build, "has_flash_attn", lambda: probed.append(1) or True)
    cuda = torch.device("cuda")
    have = ("cascade", "reference")
    assert pick_backend("tree_attention", "auto", cuda, have) == "reference" and not probed
    assert pick_backend("tree_attention", "cascade", cuda, have) == "cascade" and probed
    with pytest.raises(RuntimeError, match="cascade.*this op has backends"):
        pick_backend("sample", "cascade", cuda, ("triton", "reference"))
    monkeypatch.setattr(_build, "has_flash_attn", lambda: False)
    with pytest.raises(RuntimeError, match=r"cascade.*flash-attn.*specops\[flash\]"):
        pick_backend("tree_attention", "cascade", cuda, have)

    ta = specops.tree_attention
    q, k, v, L, tree, _ = _inputs(2, 5, 4, 2, 32, [3, 4], "random", torch.float16)
    if not GPU:  # CPU tensors: not available, even with flash_attn importable
        with pytest.raises(RuntimeError, match="'cascade' is not available for cpu"):
            ta(q, k, v, L, tree, backend="cascade")
    with pytest.raises(ValueError, match="float16/bfloat16"):
        ta(q.float(), k.float(), v.float(), L, tree, backend="cascade")
    q, k, v, L, tree, bt = _inputs(2, 5, 4, 2, 32, [3, 40], "random", torch.float16, page=16)
    with pytest.raises(ValueError, match="divisible by 256"):
        ta(q, k, v, L, tree, block_table=bt, backend="cascade")
    kk = torch.randn(2, 60, 2, 64, device=DEV, dtype=torch.float16)[..., ::2]
    with pytest.raises(ValueError, match="contiguous last dim"):
        ta(q, kk, kk, L, tree, backend="cascade")


# GPU only ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 256])
def test_gpu_cascade_bf16(page):
    """backend="cascade" (flash-attn prefix + Triton tree + merge) against float64 and the
    Triton backend, bf16, with an empty prefix among the requests."""
    from specops import _build

    if not _build.has_flash_attn():
        pytest.skip("flash-attn is not installed (pip install 'specops[flash]')")
    for b, n, hq, hkv, seqlens in ((1, 16, 32, 8, [3000]), (4, 64, 32, 32, [0, 1, 777, 4000])):
        q, k, v, L, tree, bt = _inputs(b, n, hq, hkv, 128, seqlens, "random", torch.bfloat16, page)
        out, lse = specops.tree_attention(
            q, k, v, L, tree, block_table=bt, return_lse=True, backend="cascade"
        )
        check_against_float64(out, lse, q, k, v, L, tree.ancestors, bt)
        tri, tri_lse = specops.tree_attention(
            q, k, v, L, tree, block_table=bt, return_lse=True, backend="triton"
        )
        torch.testing.assert_close(out.float(), tri.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse, tri_lse, atol=2e-3, rtol=1e-3)
