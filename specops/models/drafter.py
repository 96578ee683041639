"""An EAGLE/HiViS-style one-layer feature drafter.

Input at drafter position i (HiViS Eqs. 3-4): the concatenation

    [ e(x_{i+1}) || f_i || e_seq^{min(s, 3)} ]

of the target's embedding of the next token, a feature f_i (the target's last hidden state at
position i when it is known -- step s = 0, the committed prefix -- or the drafter's own output
for positions it is drafting, s >= 1) and a step embedding.  ``fc`` maps it to the model width,
one decoder layer (the target's block shape) with its own KV cache attends over the drafter's
prefix and its draft-tree ancestors, and a final RMSNorm gives the predicted next feature
g_{i+1} ~ f_{i+1}; the target's own head turns it into draft logits for x_{i+2}.  Embedding and
head are shared with the target and not part of the drafter's weights.
"""

from __future__ import annotations

import torch
from torch import nn

import specops
from specops.models.transformer import (
    ARConfig,
    Block,
    Fp32Rope,
    KVCache,
    RMSNorm,
    Transformer,
    make_rope,
)
from specops.tree import call_bits

__all__ = ["Drafter"]


class Drafter(Fp32Rope, nn.Module):
    def __init__(self, cfg: ARConfig, step_dim: int = 32, max_step: int = 3):
        super().__init__()
        self.cfg = cfg
        self.max_step = max_step
        self.step_embed = nn.Embedding(max_step + 1, step_dim)
        self.fc = nn.Linear(2 * cfg.dim + step_dim, cfg.dim, bias=False)
        self.block = Block(cfg.dim, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn)
        self.norm = RMSNorm(cfg.dim)
        self.register_buffer("rope", make_rope(cfg), persistent=False)
        self._target: list[Transformer] = []  # shared embedding/head, not registered
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def bind(self, target: Transformer) -> Drafter:
        """Share the target's token embedding and head (EAGLE)."""
        self._target[:] = [target]
        return self

    @property
    def target(self) -> Transformer:
        return self._target[0]

    def _rope_rows(self, positions):
        """Entry positions -> RoPE rows, as the target says (LlamaGen t2i: entry i holds the
        feature of target row 119 + i)."""
        rows = getattr(self.target, "drafter_positions", None)
        return positions if rows is None else rows(positions)

    def new_cache(self, batch: int, capacity: int | None = None, *, dtype=None, device=None):
        cfg = self.cfg
        return KVCache(
            1,
            batch,
            capacity or cfg.max_seq,
            cfg.kv_heads,
            cfg.head_dim,
            dtype=dtype or self.fc.weight.dtype,
            device=device or self.fc.weight.device,
        )

    def inputs(self, tokens, features, step) -> torch.Tensor:
        """[e(tokens) || features || e_seq(step)]: ``step`` an int or ids [B, M] (clamped to
        max_step).  Token -1 (padding) reads a zero embedding."""
        if isinstance(step, int):
            se = self.step_embed.weight[min(step, self.max_step)]
        else:
            se = self.step_embed(step.long().clamp(0, self.max_step))
        return specops.drafter_inputs(self.target.embed.weight, tokens, features, se)

    def forward(self, tokens, features, step, positions, cache: KVCache, tree=None):
        """Decoding: tokens, positions [B, M]; features [B, M, H]; tree None (chain), Tree or
        mask bits.  Appends K/V at cache.seqlens + m (not committed).
        -> (draft logits [B, M, vocab] float32, predicted features [B, M, H])."""
        b, m = tokens.shape
        bits = call_bits(tree, b, m, tokens.device)
        positions = self._rope_rows(positions)
        x = self.fc(self.inputs(tokens, features, step))
        kc, vc = cache.layer(0)
        g = self.norm(
            self.block.forward_cached(x, self.rope, positions, kc, vc, cache.seqlens, bits)
        )
        return self.target.head(g).float(), g

    def extend(self, tokens, features, step, positions, cache: KVCache, bits, n_old: int):
        """One depth of tree drafting: the k new nodes [B, k] are slots n_old .. n_old + k - 1
        of the current draft tree, whose earlier slots' K/V are already in the cache at
        cache.seqlens + slot.  ``bits`` [B, n_old + k, W]: the tree mask of all slots so far.
        New K/V are written at cache.seqlens + n_old + j; the earlier slots' queries are dummies
        (zeros) whose outputs are dropped, so only the new nodes pay for the layer."""
        b, k = tokens.shape
        blk = self.block
        positions = self._rope_rows(positions)
        x = self.fc(self.inputs(tokens, features, step))
        q, kk, v = blk.attn.qkv(blk.attn_norm(x), self.rope, positions)
        kc, vc = cache.layer(0)
        specops.append_kv(kc, vc, kk, v, cache.seqlens + n_old)
        if n_old:
            q = torch.cat([q.new_zeros(b, n_old, *q.shape[2:]), q], 1)
        o = specops.tree_attention(q, kc, vc, cache.seqlens, bits)[:, n_old:]
        x = x + blk.attn.wo(o.reshape(b, k, -1))
        g = self.norm(x + blk.ffn(blk.ffn_norm(x)))
        return self.target.head(g).float(), g

    def forward_train(self, tokens, features, step: int, positions, mask=None, kv_extra=None):
        """Training (autograd): the same input concatenation in plain torch, then plain masked
        attention (``mask`` [T, M] bool, ``kv_extra`` keys before the T new ones).
        -> (logits, predicted features, the T new (k, v))."""
        se = self.step_embed.weight[min(step, self.max_step)]
        emb = self.target.embed(tokens)
        x = torch.cat([emb, features, se.expand(*emb.shape[:-1], -1)], -1)
        h, kv = self.block.forward_masked(self.fc(x), self.rope, positions, mask, kv_extra)
        g = self.norm(h)
        return self.target.head(g).float(), g, kv
