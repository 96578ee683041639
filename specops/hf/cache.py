"""A transformers ``Cache`` whose storage is specops's static KV layout.

``kv [layers, 2, B, S, Hkv, D]`` (``specops.commit_kv``'s stacked layout) and ``seqlens [B]``
int32, the committed prefix lengths.  Layer i's ``update`` writes the N new keys/values at
``seqlens[b] + n`` with ``specops.append_kv`` (in place, no copy of the cache) and returns the
whole cache of that layer as ``[B, Hkv, S, D]`` views (transposes of the ``[B, S, Hkv, D]``
slabs), which the ``"specops_tree"`` attention function turns back into the slabs without a copy.
``seqlens`` is never advanced here: the decoding loop verifies, then ``commit_kv`` moves the
accepted slots into place and advances it.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import specops
from specops.models.transformer import KVCache

__all__ = ["SpecopsCache", "SpecopsLayer"]


class SpecopsLayer(CacheLayerMixin):
    """One layer's K and V slabs [B, S, Hkv, D], views into the shared ``kv``."""

    is_compileable = True

    def __init__(self, k: torch.Tensor, v: torch.Tensor, seqlens: torch.Tensor, owner=None):
        super().__init__()
        self.k, self.v, self.seqlens, self.owner = k, v, seqlens, owner
        # what transformers code that inspects a layer expects: [B, Hkv, S, D]
        self.keys, self.values = k.transpose(1, 2), v.transpose(1, 2)
        self.dtype, self.device = k.dtype, k.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:
        pass  # allocated up front

    def update(self, key_states, value_states, *args, **kwargs):
        """key_states, value_states [B, Hkv, N, D] -> the layer's whole cache as [B, Hkv, S, D].
        The new entries land at seqlens + offset + n (offset: the owner's, 0 but while a drafter
        extends a tree whose first ``offset`` slots are already written)."""
        off = getattr(self.owner, "offset", 0)
        at = self.seqlens if off == 0 else self.seqlens + off
        specops.append_kv(
            self.k, self.v, key_states.transpose(1, 2), value_states.transpose(1, 2), at
        )
        return self.keys, self.values

    def get_mask_sizes(self, *args) -> tuple[int, int]:
        return self.k.shape[1], 0

    def get_seq_length(self) -> torch.Tensor:
        # a tensor, as transformers' StaticLayer returns (no host read); the longest request
        return self.seqlens.max()

    def get_max_length(self) -> int:
        return self.k.shape[1]

    get_max_cache_shape = get_max_length  # the name in transformers < 5

    def reset(self) -> None:
        self.seqlens.zero_()


class SpecopsCache(KVCache, Cache):
    """Static cache of every decoder layer in specops's layout: ``kv`` [layers, 2, B, S, Hkv, D]
    and ``seqlens`` [B] int32 (the embedded model's ``KVCache``, the protocol of
    ``specops.decode``), usable as a transformers ``past_key_values``."""

    def __init__(self, layers, batch, capacity, kv_heads, head_dim, *, dtype, device):
        KVCache.__init__(
            self, layers, batch, capacity, kv_heads, head_dim, dtype=dtype, device=device
        )
        self.offset = 0  # tree slots already written past seqlens (drafter extension)
        Cache.__init__(
            self,
            layers=[
                SpecopsLayer(self.kv[i, 0], self.kv[i, 1], self.seqlens, self)
                for i in range(layers)
            ],
        )
