"""tree_attention backend "cascade": the prefix through flash-attn, the tree through specops.

Query n of request b sees the prefix [0, L_b) and its ancestor tree slots (positions L_b + j);
softmax over these two disjoint key sets splits exactly, so the prefix attention
(``flash_attn_with_kvcache``, read-only) and the tree-only attention (specops' Triton kernel)
are merged by log-sum-exp: one Triton launch, and ``merge_states`` below is the same formula in
plain torch, the definition the tests check.  flash-attn is the optional extra
``specops[flash]``; "auto" never picks this backend, and inputs flash-attn 2.x cannot take get a
ValueError from ``unsupported``.  The merge formula, the flash-attn call and its limits:
docs/trees.md.
"""

from __future__ import annotations

import torch

__all__ = ["FLASH_PAGE_MULTIPLE", "unsupported", "merge_states", "tree_attention_cascade"]

FLASH_PAGE_MULTIPLE = 256  # flash-attn 2.x: "Paged KV cache block size must be divisible by 256"
_DTYPES = (torch.float16, torch.bfloat16)
_MAX_HEAD_DIM = 256


def unsupported(q, k_cache, v_cache, block_table) -> str | None:
    """Why flash-attn cannot take these inputs (None when it can): static properties only."""
    d = q.shape[-1]
    if q.dtype not in _DTYPES or d > _MAX_HEAD_DIM:
        return (
            f"the cascade backend (flash-attn) takes float16/bfloat16 and head_dim <= "
            f"{_MAX_HEAD_DIM}, got D = {d}, {q.dtype}"
        )
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        return "the cascade backend (flash-attn) needs k_cache/v_cache with a contiguous last dim"
    if block_table is not None and k_cache.shape[1] % FLASH_PAGE_MULTIPLE != 0:
        return (
            f"the cascade backend (flash-attn 2.x) takes paged caches only with a page size "
            f"divisible by {FLASH_PAGE_MULTIPLE}, got page size {k_cache.shape[1]} (use "
            f"backend='triton' for small pages)"
        )
    return None


def merge_states(out_a, lse_a, out_b, lse_b):
    """Merge two attention states of the same rows: out_* [..., D], lse_* [...] (natural log).
    Returns (out, lse) in float32 (float64 if any input is float64).  An lse of +inf or NaN
    counts as a state with no keys (-inf): it contributes nothing, whatever its out holds;
    two empty states give out 0 and lse -inf."""
    f64 = torch.float64 in (out_a.dtype, lse_a.dtype, out_b.dtype, lse_b.dtype)
    ct = torch.float64 if f64 else torch.float32
    ninf = float("-inf")
    la, lb = (torch.where(x < float("inf"), x.to(ct), ninf) for x in (lse_a, lse_b))
    m = torch.maximum(la, lb)
    m = torch.where(torch.isneginf(m), 0.0, m)
    wa, wb = torch.exp(la - m), torch.exp(lb - m)
    acc = torch.where(wa[..., None] > 0, wa[..., None] * out_a.to(ct), 0.0)
    acc = acc + torch.where(wb[..., None] > 0, wb[..., None] * out_b.to(ct), 0.0)
    l_sum = wa + wb
    has = l_sum > 0
    out = acc / torch.where(has, l_sum, 1.0)[..., None]
    lse = torch.where(has, m + torch.log(torch.where(has, l_sum, 1.0)), ninf)
    return out, lse


def tree_attention_cascade(q, k_cache, v_cache, cache_seqlens, mask_bits, block_table, sm_scale,
                           *, kernels):  # fmt: skip
    """(out [B, N, Hq, D] in q's dtype, lse [B, N, Hq] float32); arguments as
    ``torch.ops.specops.tree_attention`` (checked by the public layer); ``kernels``: the Triton
    (tree_attention, merge_states) entries the op's declaration names.  Runs wherever
    ``flash_attn`` imports and Triton runs (the tests inject a torch stand-in on CPU)."""
    from flash_attn import flash_attn_with_kvcache

    tree_attention_triton, merge_states_triton = kernels

    b, n, hq, d = q.shape
    out = torch.empty((b, n, hq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, n, hq), dtype=torch.float32, device=q.device)
    if b == 0 or n == 0:  # flash-attn rejects an empty batch
        return out, lse
    if block_table is None:
        cap = k_cache.shape[1]
        bt = None
    else:
        cap = block_table.shape[1] * k_cache.shape[1]
        # flash-attn wants int32 and does not clamp: the specops kernels clamp page ids into
        # [0, P) so that no value reads out of bounds, and so does this
        bt = block_table.clamp(0, k_cache.shape[0] - 1).to(torch.int32).contiguous()
    # int32 [B] as flash-attn wants; L_b clamped into [0, capacity] as the Triton kernel does
    seqlens = cache_seqlens.clamp(0, cap).to(torch.int32).contiguous()
    out_p, lse_p = flash_attn_with_kvcache(
        q, k_cache, v_cache,
        cache_seqlens=seqlens, block_table=bt,
        softmax_scale=sm_scale, causal=False, return_softmax_lse=True,
    )  # fmt: skip
    # tree part in float32 (it is merged, then rounded once)
    out_t = torch.empty((b, n, hq, d), dtype=torch.float32, device=q.device)
    lse_t = torch.empty((b, n, hq), dtype=torch.float32, device=q.device)
    tree_attention_triton(
        q, k_cache, v_cache, seqlens, mask_bits, block_table, sm_scale, out_t, lse_t,
        tree_only=True,
    )  # fmt: skip
    # flash-attn's lse is [B, Hq, N]: its transpose is a [B, N, Hq] view
    merge_states_triton(out_p, lse_p.transpose(1, 2), out_t, lse_t, out, lse)
    return out, lse
