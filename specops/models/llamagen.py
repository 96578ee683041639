"""LlamaGen's class-conditional GPTs (VVS's model) from their released checkpoints.

    model = load_llamagen("c2i_B_256.pt")            # a specops Transformer, grid 16
    tokens, stats = specops.decode.vvs(model, drafter, [207], codebook, relax=...)

The official GPT (FoundationVision/LlamaGen, autoregressive/models/gpt.py; docs/notes/llamagen.md
has the full spec) is the embedded model's architecture with three differences, all absorbed
when the state dict is converted, so decoding runs the same ``Transformer`` (tree attention,
paged or static cache, the drafter) with no LlamaGen-specific code on the hot path:

- q, k, v come from one fused ``wqkv`` [3D, D] (rows q | k | v): split into wq / wk / wv;
- RoPE rotates interleaved channel pairs (2p, 2p + 1) by angle p; ours rotates (p, p + D/2).
  Permuting each head's q and k output rows by [0, 2, 4, ..., 1, 3, 5, ...] maps one onto the
  other, and q . k is unchanged by a permutation applied to both;
- the class token is rotated by cos = sin = 0 (``ARConfig.zero_prefix_rope``): its q and k are
  zero, it acts through its value only.

Token ids follow the embedded model: [0, V) image codes, V + c class c, V + 1000 the
unconditional class of classifier-free guidance (row 1000 of LlamaGen's class table).  The text
conditional models (t2i, 120 T5 caption positions) are not converted: ``load_llamagen`` says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from specops.models.transformer import ARConfig, Transformer

__all__ = [
    "PRESETS",
    "llamagen_config",
    "from_official",
    "to_official",
    "read_state_dict",
    "load_llamagen",
]

# (layers, dim) -> heads of gpt.py's presets; head_dim 64 except GPT-3B's 100
PRESETS = {
    "GPT-B": (12, 768, 12),
    "GPT-L": (24, 1024, 16),
    "GPT-XL": (36, 1280, 20),
    "GPT-XXL": (48, 1536, 24),
    "GPT-XXXL": (48, 2560, 40),
    "GPT-1B": (22, 2048, 32),
    "GPT-3B": (24, 3200, 32),
    "GPT-7B": (32, 4096, 32),
}
_HEADS = {(layers, dim): heads for layers, dim, heads in PRESETS.values()}
_IGNORED = re.compile(r"(^|\.)freqs_cis$|kv_cache")  # runtime buffers, not weights


def _layers(sd: dict) -> int:
    ids = {int(m.group(1)) for k in sd if (m := re.match(r"layers\.(\d+)\.", k))}
    if not ids or ids != set(range(max(ids) + 1)):
        raise ValueError(f"LlamaGen state dict: layers must be numbered 0..L-1, got {sorted(ids)}")
    return max(ids) + 1


def llamagen_config(sd: dict, grid: int, *, heads: int | None = None, slack: int = 64) -> ARConfig:
    """The ``ARConfig`` of an official c2i state dict: shapes from the weights, the head count
    from gpt.py's presets (or ``heads``), ``grid`` x ``grid`` image tokens after one class token;
    RoPE covers the image plus ``slack`` draft positions."""
    need = ("tok_embeddings.weight", "cls_embedding.embedding_table.weight", "output.weight")
    if "cls_embedding.cap_proj.fc1.weight" in sd:
        raise ValueError(
            "LlamaGen state dict: this is a text-conditional (t2i) model; only the "
            "class-conditional (c2i) GPTs are supported"
        )
    missing = [k for k in need if k not in sd]
    if missing:
        raise ValueError(f"LlamaGen state dict: missing {missing} (is this a LlamaGen c2i GPT?)")
    vocab, dim = sd["tok_embeddings.weight"].shape
    layers = _layers(sd)
    heads = heads or _HEADS.get((layers, dim)) or (dim // 64 if dim % 64 == 0 else None)
    if heads is None or dim % heads:
        raise ValueError(f"LlamaGen: cannot tell the head count of dim {dim}; pass heads=")
    qkv = sd["layers.0.attention.wqkv.weight"].shape[0]
    head_dim = dim // heads
    kv_heads = (qkv - dim) // (2 * head_dim)
    return ARConfig(
        vocab=vocab,
        num_classes=sd["cls_embedding.embedding_table.weight"].shape[0] - 1,
        dim=dim,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=sd["layers.0.feed_forward.w1.weight"].shape[0],
        max_seq=1 + grid * grid + slack,
        grid=grid,
        prefix=1,
        rope_2d=True,
        zero_prefix_rope=True,
    )


def _pairs_to_halves(head_dim: int) -> torch.Tensor:
    """Row order taking interleaved RoPE pairs (2p, 2p+1) to halves (p, p + D/2)."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def _permute_heads(w: torch.Tensor, heads: int, perm: torch.Tensor) -> torch.Tensor:
    d = w.shape[1]
    return w.view(heads, -1, d)[:, perm].reshape(-1, d)


def from_official(sd: dict, cfg: ARConfig) -> dict:
    """Official c2i keys -> this package's ``Transformer`` keys (weights are views or copies)."""
    hd, q_rows, kv_rows = cfg.head_dim, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    perm = _pairs_to_halves(hd)
    out = {
        "embed.weight": torch.cat(
            [sd["tok_embeddings.weight"], sd["cls_embedding.embedding_table.weight"]]
        ),
        "norm.weight": sd["norm.weight"],
        "head.weight": sd["output.weight"],
    }
    for i in range(cfg.layers):
        p, o = f"layers.{i}.", f"blocks.{i}."
        wq, wk, wv = sd[p + "attention.wqkv.weight"].split([q_rows, kv_rows, kv_rows])
        out[o + "attn.wq.weight"] = _permute_heads(wq, cfg.heads, perm)
        out[o + "attn.wk.weight"] = _permute_heads(wk, cfg.kv_heads, perm)
        out[o + "attn.wv.weight"] = wv
        out[o + "attn.wo.weight"] = sd[p + "attention.wo.weight"]
        for w in ("w1", "w2", "w3"):
            out[o + f"ffn.{w}.weight"] = sd[p + f"feed_forward.{w}.weight"]
        out[o + "attn_norm.weight"] = sd[p + "attention_norm.weight"]
        out[o + "ffn_norm.weight"] = sd[p + "ffn_norm.weight"]
    return out


def to_official(model: Transformer) -> dict:
    """The inverse of ``from_official``: a state dict in the released checkpoints' layout."""
    cfg, sd = model.cfg, model.state_dict()
    inv = torch.argsort(_pairs_to_halves(cfg.head_dim))
    out = {
        "cls_embedding.embedding_table.weight": sd["embed.weight"][cfg.vocab :].clone(),
        "tok_embeddings.weight": sd["embed.weight"][: cfg.vocab].clone(),
    }
    for i in range(cfg.layers):
        p, o = f"layers.{i}.", f"blocks.{i}."
        wq = _permute_heads(sd[o + "attn.wq.weight"], cfg.heads, inv)
        wk = _permute_heads(sd[o + "attn.wk.weight"], cfg.kv_heads, inv)
        out[p + "attention.wqkv.weight"] = torch.cat([wq, wk, sd[o + "attn.wv.weight"]])
        out[p + "attention.wo.weight"] = sd[o + "attn.wo.weight"]
        for w in ("w1", "w3", "w2"):
            out[p + f"feed_forward.{w}.weight"] = sd[o + f"ffn.{w}.weight"]
        out[p + "attention_norm.weight"] = sd[o + "attn_norm.weight"]
        out[p + "ffn_norm.weight"] = sd[o + "ffn_norm.weight"]
    out["norm.weight"] = sd["norm.weight"]
    out["output.weight"] = sd["head.weight"]
    return out


def read_state_dict(path, what: str = "LlamaGen checkpoint") -> dict:
    """A released .pt file's weights, unwrapped as the official sample scripts do ("model", then
    "module", then "state_dict", else the file itself, as the FSDP files are)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what}: no file {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # not a torch file, or a pickle that needs code
        raise ValueError(f"{what}: {path} is not a loadable torch checkpoint ({e})") from None
    for key in ("model", "module", "state_dict"):
        if isinstance(ckpt, dict) and isinstance(ckpt.get(key), dict):
            ckpt = ckpt[key]
            break
    if not isinstance(ckpt, dict) or not all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        raise ValueError(f"{what}: {path} holds no state dict of tensors")
    return {k: v for k, v in ckpt.items() if not _IGNORED.search(k)}


def load_llamagen(
    path, *, grid: int | None = None, heads: int | None = None, slack: int = 64,
    device="cpu", dtype=torch.float32,
) -> Transformer:  # fmt: skip
    """A released c2i GPT (``c2i_B_256.pt`` ...) as a ``Transformer`` in eval mode.  ``grid``
    (image tokens per side) defaults to the file name's image size / 16 (``_256`` -> 16)."""
    sd = read_state_dict(path)
    if grid is None:
        m = re.search(r"_(\d+)\.pt$", Path(path).name)
        if m is None:
            raise ValueError(
                f"LlamaGen: cannot tell the image size of {Path(path).name}; pass grid= "
                "(image size / 16)"
            )
        grid = int(m.group(1)) // 16
    cfg = llamagen_config(sd, grid, heads=heads, slack=slack)
    missing = sorted(_official_keys(cfg) - set(sd))
    extra = sorted(set(sd) - _official_keys(cfg))
    if missing or extra:
        raise ValueError(
            f"LlamaGen checkpoint {path}: missing keys {missing[:5]}, unexpected keys {extra[:5]}"
        )
    model = Transformer(cfg)
    model.load_state_dict(from_official(sd, cfg))
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _official_keys(cfg: ARConfig) -> set:
    keys = {"cls_embedding.embedding_table.weight", "tok_embeddings.weight", "norm.weight"}
    keys.add("output.weight")
    for i in range(cfg.layers):
        p = f"layers.{i}."
        keys |= {p + "attention.wqkv.weight", p + "attention.wo.weight"}
        keys |= {p + f"feed_forward.{w}.weight" for w in ("w1", "w2", "w3")}
        keys |= {p + "attention_norm.weight", p + "ffn_norm.weight"}
    return keys
