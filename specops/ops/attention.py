"""specops.tree_attention and specops.append_kv: tree-masked attention over a KV cache.

Semantics in specops/reference/attention.py; the Triton kernels in
triton_kernels/tree_attention.py and append_kv.py, the C++ CPU twins in csrc/tree_attention.cpp
and csrc/append_kv.cpp.  Backends: "triton" (CUDA, or the interpreter on CPU when asked for
explicitly), "cpu" (the C++ twins, float32/float16/bfloat16) and "reference"; "auto" picks triton
on CUDA and the C++ twin on CPU (the reference for float64).
tree_attention also has "cascade" (CUDA with the optional flash-attn, ``specops[flash]``; by name
only, never "auto"): the prefix through flash-attn, the tree through the Triton kernel, merged
by log-sum-exp (specops/ops/_attention_cascade.py).
"""

from __future__ import annotations

import inspect
import math

import torch

from specops import reference
from specops.ops import _attention_cascade as cascade
from specops.ops import _common as c
from specops.ops._decl import OpDecl, Out, Ten, Value, register_decl
from specops.tree import Tree

# the public functions tree_attention and append_kv: written from these declarations to
# specops/ops/_generated_attention.py by scripts/gen_ops.py
__all__: list[str] = []

_KW = inspect.Parameter.KEYWORD_ONLY

_ATTN_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_IDX_DTYPES = (torch.int32, torch.int64)
_TRITON_MAX_HEAD_DIM = 256  # = specops.triton_kernels.tree_attention.MAX_HEAD_DIM


def _check_cache(op, q_like, k_cache, v_cache, cache_seqlens, block_table, batch):
    """Shared checks of (k_cache, v_cache, cache_seqlens, block_table) against a
    [B, N, H, D] tensor ``q_like``; returns (Hkv, capacity)."""
    dev = q_like.device
    d = q_like.shape[-1]
    c.check_tensor(op, "k_cache", k_cache, ndim=4, device=dev)
    c.check_tensor(op, "v_cache", v_cache, ndim=4, device=dev, shape=tuple(k_cache.shape))
    if k_cache.dtype != q_like.dtype or v_cache.dtype != q_like.dtype:
        what = "q" if op == "tree_attention" else "k"
        raise TypeError(
            f"specops.{op}: k_cache and v_cache must have {what}'s dtype {q_like.dtype}, got "
            f"{k_cache.dtype} and {v_cache.dtype}"
        )
    if k_cache.shape[-1] != d:
        raise ValueError(
            f"specops.{op}: head dims differ: {'q' if op == 'tree_attention' else 'k'} has "
            f"D = {d} but k_cache {tuple(k_cache.shape)} has D = {k_cache.shape[-1]}"
        )
    hkv = k_cache.shape[2]
    c.check_ids(op, "cache_seqlens", cache_seqlens, device=dev, shape=(batch,))
    if block_table is None:
        if k_cache.shape[0] != batch:
            raise ValueError(
                f"specops.{op}: a contiguous k_cache must have shape [B={batch}, S_max, Hkv, D], "
                f"got {tuple(k_cache.shape)} (pass block_table for a paged cache)"
            )
        cap = k_cache.shape[1]
    else:
        c.check_tensor(op, "block_table", block_table, ndim=2, dtypes=_IDX_DTYPES, device=dev)
        if block_table.shape[0] != batch:
            raise ValueError(
                f"specops.{op}: block_table must have shape [B={batch}, max_pages], got "
                f"{tuple(block_table.shape)}"
            )
        if k_cache.shape[0] == 0:
            raise ValueError(
                f"specops.{op}: a paged k_cache must have at least one page, got shape "
                f"{tuple(k_cache.shape)} (P = 0)"
            )
        cap = block_table.shape[1] * k_cache.shape[1]
    return hkv, cap


def _check_capacity(op, cache_seqlens, n, cap, block_table, num_pages, page):
    """Validation mode: 0 <= L_b and L_b + N <= capacity; used block-table entries in range."""
    if not c.validating() or cache_seqlens.numel() == 0:
        return
    end = cache_seqlens.long() + n
    if (cache_seqlens < 0).any() or (end > cap).any():
        i = int(((cache_seqlens < 0) | (end > cap)).nonzero()[0, 0])
        raise ValueError(
            f"specops.{op}: cache_seqlens[{i}] = {int(cache_seqlens[i])} plus the N = {n} new "
            f"tokens does not fit the cache capacity {cap}"
        )
    if block_table is not None and block_table.numel():
        first = torch.arange(block_table.shape[1], device=block_table.device) * page
        used = first[None, :] < end[:, None]
        bad = used & ((block_table < 0) | (block_table >= num_pages))
        if bad.any():
            i, j = (int(x) for x in bad.nonzero()[0])
            raise ValueError(
                f"specops.{op}: block_table[{i}, {j}] = {int(block_table[i, j])} is not a page "
                f"of the cache (it has {num_pages} pages)"
            )


def _mask_bits(op, tree, batch, n, dev):
    if isinstance(tree, Tree):
        if tree.num_nodes != n:
            raise ValueError(
                f"specops.{op}: tree has {tree.num_nodes} nodes but q has N = {n} tokens"
            )
        mask = tree.mask_bits
        name = "tree"
    elif isinstance(tree, torch.Tensor):
        mask = tree
        name = "tree (mask_bits)"
    else:
        raise TypeError(
            f"specops.{op}: tree must be a specops.Tree or a mask_bits int32 tensor, got "
            f"{type(tree).__name__}"
        )
    c.check_tensor(op, name, mask, ndim=3, dtypes=(torch.int32,), device=dev)
    words = (n + 31) // 32
    if mask.shape[0] not in (1, batch) or mask.shape[1] != n or mask.shape[2] < words:
        raise ValueError(
            f"specops.{op}: {name} mask_bits must have shape [1 or B={batch}, N={n}, >= {words}] "
            f"(ceil(N/32) words per row), got {tuple(mask.shape)}"
        )
    return mask


def _check_attention(q, k_cache, v_cache, cache_seqlens, tree, block_table, sm_scale, return_lse,
                     backend) -> None:  # fmt: skip
    op = "tree_attention"
    c.check_tensor(op, "q", q, ndim=4, dtypes=_ATTN_DTYPES, backend=backend)
    dev = q.device
    b, n, hq, d = q.shape
    hkv, cap = _check_cache(op, q, k_cache, v_cache, cache_seqlens, block_table, b)
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(
            f"specops.{op}: q's {hq} heads must be a multiple of the cache's {hkv} KV heads "
            f"(q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)})"
        )
    _mask_bits(op, tree, b, n, dev)
    if backend == "triton" and (d > _TRITON_MAX_HEAD_DIM or q.dtype == torch.float64):
        raise ValueError(
            f"specops.{op}: the triton backend takes head_dim <= {_TRITON_MAX_HEAD_DIM} and "
            f"float16/bfloat16/float32, got D = {d}, {q.dtype}"
        )
    if backend == "cpu" and q.dtype == torch.float64:
        raise ValueError(
            f"specops.{op}: the cpu backend takes float16/bfloat16/float32, got {q.dtype} "
            "(float64 runs on the reference)"
        )
    if sm_scale is not None and not math.isfinite(sm_scale):  # checked for free, in every mode
        raise ValueError(f"specops.{op}: sm_scale must be finite, got {sm_scale}")
    _check_capacity(op, cache_seqlens, n, cap, block_table, k_cache.shape[0], k_cache.shape[1])


class _Scales(dict):
    """head dim D -> the default softmax scale 1/sqrt(D), memoised (a dict read costs less
    than the sqrt in the eager fast path); D = 0: every score is 0 whatever the scale."""

    def __missing__(self, d: int) -> float:
        scale = self[d] = 1.0 / math.sqrt(d) if d else 1.0
        return scale


_SCALES = _Scales()
_F32, _INF = torch.float32, math.inf


def _attention_backends(a, backend: str) -> tuple[str, ...]:
    """float64 runs on the reference, head dims past the Triton kernel's on the C++ twin; the
    cascade (by name only) where flash-attn takes the inputs."""
    q, k_cache, v_cache, block_table = a.q, a.k_cache, a.v_cache, a.block_table
    if q.dtype == torch.float64:
        have = ("reference",)
    elif q.shape[-1] > _TRITON_MAX_HEAD_DIM:
        have = ("cpu", "reference")
    else:
        have = ATTENTION.backends
    if backend == "cascade":  # checked here, so direct torch.ops calls get the same error
        if why := cascade.unsupported(q, k_cache, v_cache, block_table):
            raise ValueError(f"specops.tree_attention: {why}")
        have = have + ("cascade",)
    return have


def _attention_reference(q, k_cache, v_cache, cache_seqlens, mask_bits, block_table, sm_scale):
    o, lse = reference.tree_attention(
        q, k_cache, v_cache, cache_seqlens, mask_bits,
        block_table=block_table, sm_scale=sm_scale, return_lse=True,
    )  # fmt: skip
    return o.contiguous(), lse.float().contiguous()


def _attention_kernel(be, a, out):
    """cascade, the C++ twin (it writes float32: other dtypes through one rounding copy) and
    Triton (both entries take the flat arguments in the declared order)."""
    q = a.q
    if be == "cascade":
        kernels = (ATTENTION.triton_kernel(), ATTENTION.triton_kernel("merge_states_triton"))
        return c.write_outs(out, cascade.tree_attention_cascade(*a, kernels=kernels))
    b, n, hq, d = q.shape
    if out is None:
        out = (q.new_empty((b, n, hq, d)), q.new_empty((b, n, hq), dtype=torch.float32))
    if be == "triton":
        ATTENTION.triton_kernel()(*a, *out)
        return tuple(out)
    o32 = out[0] if q.dtype == torch.float32 else q.new_empty((b, n, hq, d), dtype=torch.float32)
    ATTENTION.launch(be, *a, out=(o32, out[1]))
    if o32 is not out[0]:
        out[0].copy_(o32)
    return tuple(out)


def _both_outs(out, lse_out, q):
    """``out=`` and ``lse_out=`` as the op's two outputs: the one not given is made."""
    if isinstance(q, torch.Tensor) and q.dim() == 4:
        b, n, hq, d = q.shape
        out = q.new_empty((b, n, hq, d)) if out is None else out
        lse_out = q.new_empty((b, n, hq), dtype=torch.float32) if lse_out is None else lse_out
    return (out, lse_out)


ATTENTION = OpDecl(
    "tree_attention",
    args=(
        Ten("q", "B N H D", fast_rank=4),
        Ten("k_cache", "P S G D"),
        Ten("v_cache", "P S G D"),
        Ten("cache_seqlens", "B"),
        Value(
            "tree",
            (("mask_bits", "Tensor"),),
            lower=lambda tree: tree.mask_bits if type(tree) is Tree else tree,
            fast_if=lambda tree: type(tree) is Tree,
            fast=lambda tree: tree.mask_bits,
        ),
        Ten("block_table", "B M", optional=True),
        Value(
            "sm_scale",
            (("sm_scale", "float"),),
            lower=lambda sm_scale, q: _SCALES[q.shape[-1]] if sm_scale is None else float(sm_scale),
            fast_if=lambda sm_scale: (
                sm_scale is None or (type(sm_scale) is float and -_INF < sm_scale < _INF)
            ),
            fast=lambda sm_scale, q: _SCALES[q.shape[-1]] if sm_scale is None else sm_scale,
        ),
        Value("return_lse"),  # the public function's option: not a kernel argument
    ),
    outs=(Out("out", "B, N, H, D", dtype="q"), Out("lse", "B, N, H", torch.float32)),
    backends=("triton", "cpu", "reference"),
    backends_for=_attention_backends,
    check=_check_attention,
    reference=_attention_reference,
    kernel=_attention_kernel,
    triton="tree_attention:tree_attention_triton",
    fast_when=lambda q: q.dtype == _F32,  # the C++ twin writes float32
)

ATTENTION.public(
    reference.tree_attention,
    prepare=lambda out, lse_out, q: (
        out if out is None and lse_out is None else _both_outs(out, lse_out, q)
    ),
    options=tuple(
        inspect.Parameter(name, _KW, default=None, annotation="torch.Tensor | None")
        for name in ("out", "lse_out")  # out: the attention output; lse_out: the lse
    ),
    result=lambda r, return_lse: r if return_lse else r[0],  # (out, lse): the binding's tuple
    doc="""Attention of N tree tokens over a committed prefix plus their ancestors.

    Parameters
    ----------
    q : [B, N, Hq, D] float16/bfloat16/float32/float64
        The tree tokens' queries.
    k_cache : [B, S_max, Hkv, D] or [P, page, Hkv, D] q's dtype
        Keys: contiguous per request, or paged with ``block_table``; the tree tokens' K already
        sit at positions L_b + n (``append_kv``).
    v_cache : k_cache's shape, q's dtype
        Values, laid out as ``k_cache``.
    cache_seqlens : [B] int32/int64
        L_b, the committed prefix length of each request.
    tree : Tree or [1 or B, N, >= ceil(N/32)] int32
        A Tree (batch 1 or B) or its mask_bits: query n sees the tree slots whose bit is set in
        its mask row (itself and its ancestors).
    block_table : [B, max_pages] int32/int64 or None
        The pages of each request in a paged cache; None: a contiguous cache.
    sm_scale : float or None
        Softmax scale, finite; None: 1/sqrt(D).
    return_lse : bool
        Also return lse [B, N, Hq] float32 (natural log).
    backend : str
        "auto" (triton on CUDA, cpu on CPU; the reference for float64), "triton", "cpu",
        "reference" or "cascade" (below).
    out : [B, N, Hq, D] q's dtype or None
        A preallocated output (contiguous; checked).
    lse_out : [B, N, Hq] float32 or None
        A preallocated lse output (contiguous; checked).

    Query n sees the whole prefix [0, L_b) and the tree slots its mask row names.  Hq % Hkv == 0
    (GQA: head h reads KV head h // (Hq / Hkv)).  Returns out [B, N, Hq, D] in q's dtype, and
    (out, lse) when ``return_lse``.

    Backends: "triton" (CUDA, or the Triton interpreter on CPU), "cpu" (the C++ twin:
    float32/float16/bfloat16, any head dim, float32 accumulation, reads only the prefix and the
    tree slots, each K/V row once per GQA group), "reference" (plain PyTorch, any device/dtype;
    scores the whole cache capacity), or "cascade" (CUDA with flash-attn installed,
    ``pip install 'specops[flash]'``; never chosen by "auto"): the prefix through
    ``flash_attn_with_kvcache``, the tree slots through the Triton kernel, merged by
    log-sum-exp.  cascade takes float16/bfloat16, D <= 256 and, for paged caches, a page size
    divisible by 256 (flash-attn 2.x).""",
)


register_decl(ATTENTION)


def _check_append(k_cache, v_cache, k, v, cache_seqlens, block_table, backend) -> None:
    op = "append_kv"
    c.check_tensor(op, "k", k, ndim=4, dtypes=_ATTN_DTYPES, backend=backend)
    dev = k.device
    b, n, hkv, d = k.shape
    c.check_tensor(op, "v", v, device=dev, shape=tuple(k.shape))
    if v.dtype != k.dtype:
        raise TypeError(f"specops.{op}: v must have k's dtype {k.dtype}, got {v.dtype}")
    _, cap = _check_cache(op, k, k_cache, v_cache, cache_seqlens, block_table, b)
    c.check_writable(op, "k_cache", k_cache)
    c.check_writable(op, "v_cache", v_cache)
    c.check_written_apart(op, [("k_cache", k_cache), ("v_cache", v_cache)], [("k", k), ("v", v)])
    if k_cache.shape[2] != hkv:
        raise ValueError(
            f"specops.{op}: k has {hkv} KV heads but k_cache {tuple(k_cache.shape)} has "
            f"{k_cache.shape[2]}"
        )
    _check_capacity(op, cache_seqlens, n, cap, block_table, k_cache.shape[0], k_cache.shape[1])


def _append_reference(k_cache, v_cache, k, v, cache_seqlens, block_table):
    reference.append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table=block_table)


APPEND = OpDecl(
    "append_kv",
    args=(
        Ten("k_cache", "P S H D"),
        Ten("v_cache", "P S H D"),
        Ten("k", "B N H D"),
        Ten("v", "B N H D"),
        Ten("cache_seqlens", "B"),
        Ten("block_table", "B M", optional=True),
    ),
    outs=(),
    mutates=("k_cache", "v_cache"),
    backends=("triton", "cpu", "reference"),
    # float64 runs on the reference; the C++ twin and Triton read every tensor with its strides
    backends_for=lambda a, be: APPEND.backends if a.k.dtype != torch.float64 else ("reference",),
    check=_check_append,
    reference=_append_reference,
    triton="append_kv:append_kv_triton",
)
APPEND.public(
    reference.append_kv,
    doc="""Write the new tokens' k, v into the caches at positions cache_seqlens[b] + n, in place.

    Parameters
    ----------
    k_cache : [B, S_max, Hkv, D] or [P, page, Hkv, D] k's dtype
        Keys, written in place: contiguous per request, or paged with ``block_table``.
    v_cache : k_cache's shape, k's dtype
        Values, laid out as ``k_cache``, written in place.
    k : [B, N, Hkv, D] float16/bfloat16/float32/float64
        The N new tokens' keys.
    v : [B, N, Hkv, D] k's dtype
        Their values.
    cache_seqlens : [B] int32/int64
        L_b, the committed prefix length: token n goes to position L_b + n.
    block_table : [B, max_pages] int32/int64 or None
        The pages of each request in a paged cache; None: a contiguous cache.
    backend : str
        "auto" (triton on CUDA, cpu on CPU; the reference for float64), "triton", "cpu" (the
        C++ twin) or "reference".

    ``cache_seqlens`` is not advanced (``commit_kv`` does that after verification).  Positions
    outside the cache are an error in validation mode and dropped otherwise.""",
)


register_decl(APPEND)
