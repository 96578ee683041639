"""LlamaGen's class-conditional GPTs (VVS's model) from their released checkpoints.

    model = load_llamagen("c2i_B_256.pt")            # a specops Transformer, grid 16
    tokens, stats = specops.decode.vvs(model, drafter, [207], codebook, relax=...)

The official GPT is the embedded model's architecture with three differences (fused ``wqkv``,
interleaved RoPE pairs, the class token rotated by zero), all absorbed when the state dict is
converted, so decoding runs the same ``Transformer`` with no LlamaGen-specific code on the hot
path.  Token ids follow the embedded model: [0, V) image codes, V + c class c, V + 1000 the
unconditional class.  The text-conditional GPTs load as ``LlamaGenT2I`` (``set_captions``).

The conversion and the t2i caption handling in full: docs/models.md, "LlamaGen's GPTs"; the
official model's spec: docs/notes/llamagen.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specops.models.transformer import ARConfig, Transformer, make_rope

__all__ = [
    "PRESETS",
    "llamagen_config",
    "from_official",
    "to_official",
    "read_state_dict",
    "load_llamagen",
    "LlamaGenT2I",
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
    t2i = "cls_embedding.cap_proj.fc1.weight" in sd
    table = "cls_embedding.uncond_embedding" if t2i else "cls_embedding.embedding_table.weight"
    need = ("tok_embeddings.weight", table, "output.weight")
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
    prefix = sd[table].shape[0] if t2i else 1  # t2i: 120 caption positions
    return ARConfig(
        vocab=vocab,
        num_classes=0 if t2i else sd[table].shape[0] - 1,
        dim=dim,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=sd["layers.0.feed_forward.w1.weight"].shape[0],
        max_seq=prefix + grid * grid + slack,
        grid=grid,
        prefix=prefix,
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
    tok = sd["tok_embeddings.weight"]
    if "cls_embedding.cap_proj.fc1.weight" in sd:  # t2i: the null row only pads the table
        table = torch.zeros(1, tok.shape[1], dtype=tok.dtype)
        captions = {k.removeprefix("cls_embedding."): v for k, v in sd.items()
                    if k.startswith("cls_embedding.")}  # fmt: skip
    else:
        table, captions = sd["cls_embedding.embedding_table.weight"], {}
    out = {
        "embed.weight": torch.cat([tok, table]),
        "norm.weight": sd["norm.weight"],
        "head.weight": sd["output.weight"],
        **captions,
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
    if isinstance(model, LlamaGenT2I):
        out = {"cls_embedding." + k: v for k, v in sd.items() if k.startswith(("cap_", "uncond"))}
    else:
        out = {"cls_embedding.embedding_table.weight": sd["embed.weight"][cfg.vocab :].clone()}
    out["tok_embeddings.weight"] = sd["embed.weight"][: cfg.vocab].clone()
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
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # a legacy (pre-zip) file cannot be memory-mapped
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
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
    """A released GPT (``c2i_B_256.pt``, ``t2i_XL_stage1_256.pt`` ...) as a ``Transformer``
    (t2i: ``LlamaGenT2I``) in eval mode.  ``grid`` (image tokens per side) defaults to the file
    name's image size / 16 (``_256`` -> 16)."""
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
    with torch.device("meta"):  # no random init of weights that are loaded next
        if "cls_embedding.uncond_embedding" in sd:
            cap = sd["cls_embedding.cap_proj.fc1.weight"].shape[1]
            model = LlamaGenT2I(cfg, caption_dim=cap)
        else:
            model = Transformer(cfg)
    weights = {k: v.to(device=device, dtype=dtype) for k, v in from_official(sd, cfg).items()}
    model.load_state_dict(weights, assign=True)
    model.rope = make_rope(cfg).to(device)  # the one buffer not in the state dict (float32)
    return model.eval().requires_grad_(False)


def _official_keys(cfg: ARConfig) -> set:
    keys = {"tok_embeddings.weight", "norm.weight", "output.weight"}
    if cfg.num_classes == 0:  # t2i
        keys |= {"cls_embedding.uncond_embedding", "cls_embedding.cap_proj.fc1.weight"}
        keys.add("cls_embedding.cap_proj.fc2.weight")
    else:
        keys.add("cls_embedding.embedding_table.weight")
    for i in range(cfg.layers):
        p = f"layers.{i}."
        keys |= {p + "attention.wqkv.weight", p + "attention.wo.weight"}
        keys |= {p + f"feed_forward.{w}.weight" for w in ("w1", "w2", "w3")}
        keys |= {p + "attention_norm.weight", p + "ffn_norm.weight"}
    return keys


class _CaptionMLP(nn.Module):
    """LlamaGen's ``cap_proj``: fc2(GELU_tanh(fc1(t5 features))), no biases."""

    def __init__(self, cin: int, dim: int):
        super().__init__()
        self.fc1 = nn.Linear(cin, dim, bias=False)
        self.fc2 = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class LlamaGenT2I(Transformer):
    """LlamaGen's text-conditional GPT: 120 caption positions (module docstring), then the image.
    Call ``set_captions`` before decoding; the prompt it returns goes to the decoding loop."""

    def __init__(self, cfg: ARConfig, caption_dim: int = 2048):
        super().__init__(cfg)
        self.cap_proj = _CaptionMLP(caption_dim, cfg.dim)
        self.register_buffer("uncond_embedding", torch.zeros(cfg.prefix, caption_dim))
        self.captions = None  # [B, T, D] cond then [B, T, D] uncond, valid rows first
        self.shift = None  # [B] 120 - n: the RoPE row of a position is position + shift

    def set_captions(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """T5 features [B, T, C] and their attention mask [B, T] (1 = a real token; T = the
        model's 120; padding on either side) -> the prompt [B, T] for the decoding loop: ids
        V + j for the n_b valid rows, then -1."""
        b, t, _ = feats.shape
        w = self.cap_proj.fc1.weight
        feats, mask = feats.to(w.device), mask.to(w.device)
        if t != self.cfg.prefix or tuple(mask.shape) != (b, t):
            raise ValueError(
                f"LlamaGenT2I.set_captions: feats must be [B, {self.cfg.prefix}, C] with a mask "
                f"[B, {self.cfg.prefix}], got {tuple(feats.shape)} and {tuple(mask.shape)}"
            )
        real = mask != 0
        n = real.sum(1)
        order = torch.sort((~real).to(torch.uint8), dim=1, stable=True).indices  # valid first
        cond = self.cap_proj(feats.to(w).gather(1, order[..., None].expand_as(feats)))
        # the uncond rows the official mask keeps: the last n of uncond_embedding, in order
        j = torch.arange(t, device=feats.device)
        src = (t - n[:, None] + j).clamp(max=t - 1)
        uncond = self.cap_proj(self.uncond_embedding.to(w)[src])
        self.captions = torch.cat([cond, uncond])
        self.shift = (t - n).long()
        v = self.cfg.vocab
        return torch.where(j < n[:, None], v + j, -1)

    def uncond_prompt(self, prompt: torch.Tensor) -> torch.Tensor:
        """The same caption slots; the uncond rows read their own embeddings."""
        if self.shift is None or prompt.shape[0] != self.shift.shape[0]:
            raise ValueError(
                f"LlamaGenT2I: a prompt of {prompt.shape[0]} requests, but the captions set "
                f"are for {None if self.shift is None else self.shift.shape[0]}: call "
                "set_captions() for this batch"
            )
        return prompt

    @property
    def prompt_vocab(self) -> int:
        """Image codes, then the caption slots V + j (``set_captions``)."""
        return self.cfg.vocab + self.cfg.prefix

    def drafter_positions(self, positions):
        # a drafter starts at the first image token: its entry 0 holds the feature of the last
        # caption row (T - 1), as a c2i drafter's holds the class row's
        return positions + (self.cfg.prefix - 1)

    def _rows(self, r: int) -> slice:
        b = self.shift.shape[0]
        if r not in (b, 2 * b):
            raise ValueError(f"LlamaGenT2I: {r} rows, but captions were set for {b} requests")
        return slice(0, r)

    def embed_tokens(self, tokens):
        v = self.cfg.vocab
        if self.captions is None:
            if bool((tokens >= v).any()):
                raise ValueError("LlamaGenT2I: call set_captions() before decoding")
            return self.embed(tokens)
        caps = self.captions[self._rows(tokens.shape[0])]  # [R, T, D]
        j = (tokens - v).clamp(0, caps.shape[1] - 1)
        cap = caps.gather(1, j[..., None].expand(-1, -1, caps.shape[-1]))
        return torch.where((tokens >= v)[..., None], cap, self.embed(tokens.clamp(max=v - 1)))

    def rope_positions(self, positions):
        if self.shift is None:
            return positions
        r = positions.shape[0]
        shift = self.shift.repeat(r // self.shift.shape[0])[self._rows(r)]
        return positions + shift[:, None]
