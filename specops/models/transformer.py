"""A small Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU) with a static KV cache.

Two forward paths share the weights: ``forward_train(tokens)`` (teacher forcing, plain causal
attention, used by the training script) and ``model(tokens [B, N], positions [B, N], cache,
tree=None) -> (logits, hidden)``, the decoding protocol of ``specops.decode``: the new tokens'
K/V are appended at ``cache.seqlens[b] + n`` and attention runs through
``specops.tree_attention``; the cache length is not advanced here (``specops.commit_kv`` does).

Token ids: ``[0, vocab)`` are image codes, ``vocab + c`` is class c and ``vocab + num_classes``
the null class (classifier-free guidance's unconditional prompt).  ``hidden`` is the last hidden
state after the final norm: the feature an EAGLE/HiViS drafter consumes.

Both paths in full: docs/models.md, "The embedded decoder".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

import specops
from specops.tree import call_bits

__all__ = [
    "ARConfig",
    "KVCache",
    "Transformer",
    "RMSNorm",
    "Block",
    "rope_table",
    "rope_table_2d",
    "make_rope",
    "apply_rope",
    "Fp32Rope",
]


@dataclass
class ARConfig:
    vocab: int = 512  # image codes
    num_classes: int = 10
    dim: int = 128
    layers: int = 4
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 64
    ffn: int = 384
    max_seq: int = 320  # positions the RoPE table covers (prefix + image + draft slack)
    rope_base: float = 10000.0
    grid: int = 16  # image = grid x grid tokens in raster order
    prefix: int = 1  # class tokens before the image
    rope_2d: bool = True  # LlamaGen's 2D RoPE over the token grid
    # LlamaGen's released models rotate the class tokens by cos = sin = 0 (their q and k are
    # zero vectors: they act through their values only); False leaves them unrotated
    zero_prefix_rope: bool = False

    @property
    def num_embeddings(self) -> int:
        return self.vocab + self.num_classes + 1

    @property
    def null_class(self) -> int:
        return self.vocab + self.num_classes

    def to_dict(self) -> dict:
        return asdict(self)


class KVCache:
    """Static cache of every layer: ``kv`` [layers, 2, B, S, Hkv, D] (the stacked layout
    ``specops.commit_kv`` takes) and ``seqlens`` [B] int32, the committed prefix lengths."""

    def __init__(self, layers, batch, capacity, kv_heads, head_dim, *, dtype, device):
        self.kv = torch.zeros(
            layers, 2, batch, capacity, kv_heads, head_dim, dtype=dtype, device=device
        )
        self.seqlens = torch.zeros(batch, dtype=torch.int32, device=device)

    @property
    def capacity(self) -> int:
        return self.kv.shape[3]

    @property
    def batch(self) -> int:
        return self.kv.shape[2]

    def layer(self, i: int):
        return self.kv[i, 0], self.kv[i, 1]

    def reset(self) -> None:
        self.seqlens.zero_()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # x / sqrt(mean(x^2) + eps) * w
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * (
            self.weight
        )


def rope_table(max_seq: int, head_dim: int, base: float) -> torch.Tensor:
    """1D RoPE: [max_seq, head_dim / 2, 2] (cos, sin) of angle pos * base^(-2i / head_dim)."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(max_seq, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.stack([ang.cos(), ang.sin()], -1).float()


def rope_table_2d(
    max_seq: int, head_dim: int, base: float, grid: int, prefix: int, zero_prefix: bool = False
):
    """2D RoPE (LlamaGen): sequence position p >= prefix is image token i = p - prefix at
    (row, col) = divmod(i, grid); rotation pair j < D/4 turns by row * w_j, pair D/4 + j by
    col * w_j, w_j = base^(-4j / D).  Prefix (class) tokens are not rotated, or with
    ``zero_prefix`` multiplied by cos = sin = 0 (LlamaGen's checkpoints); positions past the
    image (draft slack) continue the raster order."""
    quarter = head_dim // 4
    w = base ** (-torch.arange(quarter, dtype=torch.float64) * 4 / head_dim)
    i = (torch.arange(max_seq, dtype=torch.float64) - prefix).clamp(min=0)
    row, col = torch.div(i, grid, rounding_mode="floor"), torch.remainder(i, grid)
    ang = torch.cat([row[:, None] * w[None, :], col[:, None] * w[None, :]], 1)
    ang[:prefix] = 0
    table = torch.stack([ang.cos(), ang.sin()], -1).float()
    if zero_prefix:
        table[:prefix] = 0
    return table


def make_rope(cfg: ARConfig) -> torch.Tensor:
    if cfg.rope_2d:
        return rope_table_2d(
            cfg.max_seq, cfg.head_dim, cfg.rope_base, cfg.grid, cfg.prefix, cfg.zero_prefix_rope
        )
    return rope_table(cfg.max_seq, cfg.head_dim, cfg.rope_base)


class Fp32Rope:
    """Keeps a module's ``rope`` table in float32 whatever ``.to(dtype)`` does to the rest (the
    angles of a bf16 table are off by ~1e-3; LlamaGen keeps its table in float32 too)."""

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.rope.dtype != torch.float32:
            self.rope = make_rope(self.cfg).to(self.rope.device)
        return self


def apply_rope(x: torch.Tensor, table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i + D/2}) of x [B, N, H, D] by the angle of ``positions`` [B, N]."""
    cs = table[positions.long().clamp(0, table.shape[0] - 1)]  # [B, N, D/2, 2]
    cos, sin = cs[..., 0][:, :, None, :], cs[..., 1][:, :, None, :]
    x1, x2 = x.float().chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.wq = nn.Linear(dim, heads * head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(heads * head_dim, dim, bias=False)

    def qkv(self, x, rope, positions):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.heads, self.head_dim)
        k = self.wk(x).view(b, n, self.kv_heads, self.head_dim)
        v = self.wv(x).view(b, n, self.kv_heads, self.head_dim)
        return apply_rope(q, rope, positions), apply_rope(k, rope, positions), v

    def forward_masked(self, x, rope, positions, mask=None, *, kv_extra=None):
        """Plain attention for training: ``mask`` [N, M] bool (True = attend) or causal when None;
        ``kv_extra`` = (k, v) [B, M - N, Hkv, D] keys placed before the N new ones (drafter
        training).  Returns the output and the N new (k, v)."""
        b, n, _ = x.shape
        q, k_new, v_new = self.qkv(x, rope, positions)
        k, v = k_new, v_new
        if kv_extra is not None:
            k, v = torch.cat([kv_extra[0], k], 1), torch.cat([kv_extra[1], v], 1)
        rep = self.heads // self.kv_heads
        qh = q.transpose(1, 2)
        kh = k.transpose(1, 2).repeat_interleave(rep, 1)
        vh = v.transpose(1, 2).repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, is_causal=mask is None)
        return self.wo(o.transpose(1, 2).reshape(b, n, -1)), (k_new, v_new)

    def forward_cached(self, x, rope, positions, k_cache, v_cache, seqlens, mask_bits):
        """Decoding: append the N new K/V at seqlens + n, attend over prefix + tree ancestors."""
        b, n, _ = x.shape
        q, k, v = self.qkv(x, rope, positions)
        specops.append_kv(k_cache, v_cache, k, v, seqlens)
        o = specops.tree_attention(q, k_cache, v_cache, seqlens, mask_bits)
        return self.wo(o.reshape(b, n, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        # SwiGLU: W2 (silu(W1 x) * W3 x)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, head_dim, ffn):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads, head_dim)
        self.ffn_norm = RMSNorm(dim)
        self.ffn = FeedForward(dim, ffn)

    def forward_masked(self, x, rope, positions, mask=None, kv_extra=None):
        a, kv = self.attn.forward_masked(
            self.attn_norm(x), rope, positions, mask, kv_extra=kv_extra
        )
        x = x + a
        return x + self.ffn(self.ffn_norm(x)), kv

    def forward_cached(self, x, rope, positions, k_cache, v_cache, seqlens, mask_bits):
        x = x + self.attn.forward_cached(
            self.attn_norm(x), rope, positions, k_cache, v_cache, seqlens, mask_bits
        )
        return x + self.ffn(self.ffn_norm(x))


class Transformer(Fp32Rope, nn.Module):
    """Class-conditional visual AR decoder (LlamaGen style: class token, then raster tokens)."""

    def __init__(self, cfg: ARConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.num_embeddings, cfg.dim)
        self.blocks = nn.ModuleList(
            Block(cfg.dim, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn)
            for _ in range(cfg.layers)
        )
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.register_buffer("rope", make_rope(cfg), persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # scaled init of the residual output projections (GPT-2)
                out_proj = name.endswith(("wo.weight", "w2.weight"))
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.cfg.layers) if out_proj else std)

    # training --------------------------------------------------------------------------------
    def forward_train(self, tokens: torch.Tensor):
        """tokens [B, T] -> (logits [B, T, vocab] float32, hidden [B, T, dim]), causal."""
        b, t = tokens.shape
        pos = torch.arange(t, device=tokens.device).expand(b, t)
        x = self.embed(tokens)
        for blk in self.blocks:
            x, _ = blk.forward_masked(x, self.rope, pos)
        h = self.norm(x)
        return self.head(h).float(), h

    # decoding --------------------------------------------------------------------------------
    @property
    def prompt_vocab(self) -> int:
        """Token ids a prompt may hold: image codes, class tokens and the null class."""
        return self.cfg.num_embeddings

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids [R, N] -> embeddings (a model with per-request prompt embeddings, such as
        LlamaGen's text-conditional GPT, overrides this)."""
        return self.embed(tokens)

    def rope_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Sequence positions [R, N] -> rows of the RoPE table (the identity here)."""
        return positions

    def drafter_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """A feature drafter's entry positions [B, M] -> its RoPE rows: entry i holds the
        feature of target row i (the identity here)."""
        return positions

    def new_cache(self, batch: int, capacity: int | None = None, *, dtype=None, device=None):
        cfg = self.cfg
        dev = device or self.embed.weight.device
        return KVCache(
            cfg.layers,
            batch,
            capacity or cfg.max_seq,
            cfg.kv_heads,
            cfg.head_dim,
            dtype=dtype or self.embed.weight.dtype,
            device=dev,
        )

    def forward(self, tokens, positions, cache: KVCache, tree=None):
        """tokens, positions [B, N]; tree: None (causal chain), a Tree, or mask_bits
        [B, N, ceil(N/32)].  -> (logits [B, N, vocab] float32, hidden [B, N, dim]).
        Token -1 marks a padding node (its outputs are meaningless and never used)."""
        b, n = tokens.shape
        bits = call_bits(tree, b, n, tokens.device)
        x = self.embed_tokens(tokens.long().clamp(min=0))  # -1 = padding node: any will do
        positions = self.rope_positions(positions)
        for i, blk in enumerate(self.blocks):
            kc, vc = cache.layer(i)
            x = blk.forward_cached(x, self.rope, positions, kc, vc, cache.seqlens, bits)
        h = self.norm(x)
        return self.head(h).float(), h
