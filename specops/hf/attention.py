"""Tree attention inside a transformers model: an ``AttentionInterface`` function.

transformers' attention layers hand k, v to ``past_key_values.update`` and call the function
registered under ``config._attn_implementation``.  The adapter calls the model with
``specops_tree=(mask_bits [B, N, W] int32, seqlens [B] int32, n_old)`` and a ``SpecopsCache``
whose ``update`` returned the layer's whole cache as [B, Hkv, S, D] views, so the attention of
every query over the committed prefix and its ancestor tree slots is one
``specops.tree_attention`` call on the cache slabs themselves (no copy, no [N, S] mask).
The implementation is not registered with ``AttentionMaskInterface``, so transformers builds no
attention mask for it.  The adapter switches the decoder's config to this implementation only
for its own calls (``use_tree_attention``); a call that reaches it without ``specops_tree`` is
an error.  The call in full, with the formula: docs/protocols.md, "The forward call and the
attention function".
"""

from __future__ import annotations

import contextlib

import torch
from transformers import AttentionInterface

import specops

__all__ = ["ATTN_NAME", "tree_attention_forward", "use_tree_attention", "decoder_config"]

ATTN_NAME = "specops_tree"


def tree_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    specops_tree=None,
    **kwargs,
):
    """-> (out [B, N, Hq, D], None), as transformers' attention functions return."""
    if specops_tree is None:
        raise ValueError(
            f"specops.hf: attention implementation {ATTN_NAME!r} runs only inside calls made by "
            "specops.hf.HFModel (it needs the tree bits and a SpecopsCache); use 'sdpa' or "
            "'eager' for other calls"
        )
    bits, seqlens, n_old = specops_tree  # n_old: tree slots written by earlier calls
    for name in ("softcap", "sliding_window"):
        if kwargs.get(name) is not None:
            raise ValueError(
                f"specops.hf: this model's attention uses {name}={kwargs[name]!r}, which "
                f"specops.tree_attention does not implement"
            )
    if getattr(module, "training", False) and dropout > 0:
        raise ValueError("specops.hf: attention dropout in training mode; call model.eval()")
    k_cache, v_cache = key.transpose(1, 2), value.transpose(1, 2)  # the [B, S, Hkv, D] slabs
    if k_cache.shape[0] != query.shape[0] or not k_cache.is_contiguous():
        raise ValueError(
            "specops.hf: the attention layer did not get a SpecopsCache's keys (key "
            f"{tuple(key.shape)}); the model must be called with past_key_values=SpecopsCache"
        )
    q = query.transpose(1, 2)  # [B, N, Hq, D]
    if n_old:  # queries of the earlier slots: dummies whose outputs are dropped
        q = torch.cat([q.new_zeros(q.shape[0], n_old, *q.shape[2:]), q], 1)
    out = specops.tree_attention(q, k_cache, v_cache, seqlens, bits, sm_scale=scaling)
    return out[:, n_old:], None


AttentionInterface.register(ATTN_NAME, tree_attention_forward)


def decoder_config(hf_model):
    """The config the decoder's attention layers read (the text config of a VLM)."""
    return hf_model.config.get_text_config(decoder=True)


@contextlib.contextmanager
def use_tree_attention(hf_model):
    """Route the decoder's attention through ``"specops_tree"`` for the duration of a call, and
    restore the model's own implementation after (``hf_model.generate`` is unaffected)."""
    cfg = decoder_config(hf_model)
    old = cfg._attn_implementation_internal
    cfg._attn_implementation_internal = ATTN_NAME
    try:
        yield
    finally:
        cfg._attn_implementation_internal = old
