"""The VQGAN decoder of the visual AR models specops serves: codebook ids -> RGB pixels.

    vq = load_vq16("vq_ds16_c2i.pt")                 # LlamaGen's VQ-16
    images = vq.decode(codes [B, h * w], (h, w))      # float [B, 3, 16h, 16w], nominal [-1, 1]
    pixels = to_uint8(images)                         # uint8 [B, 16h, 16w, 3]

One module, the taming-transformers decoder as LlamaGen writes it (its parameter names are this
module's): conv_in, a middle of ResNet / attention / ResNet, then one level per channel multiplier
from the lowest resolution up (num_res_blocks + 1 ResNet blocks, attention after each on the
levels in ``attn_levels``, a nearest x2 upsample and 3x3 conv between levels), GroupNorm(32,
eps 1e-6), swish, conv_out.  Codes are looked up in the codebook (l2-normalised first when
``l2_codebook``, as LlamaGen's VQ-16 does), laid out in raster order and passed through
``post_quant_conv``.  docs/notes/llamagen.md section 3 has the key layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from specops.models.llamagen_gpt import read_state_dict

__all__ = ["VQGANConfig", "VQGANDecoder", "load_vq16", "load_chameleon_vqgan", "to_uint8"]


@dataclass
class VQGANConfig:
    n_embed: int = 16384  # codebook entries
    embed_dim: int = 8  # codebook vector width
    z_channels: int = 256
    ch: int = 128
    ch_mult: tuple = (1, 1, 2, 2, 4)
    num_res_blocks: int = 2
    attn_levels: tuple = (0,)  # decoder levels (0 = lowest resolution) with attention
    l2_codebook: bool = True

    @property
    def factor(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)


def _norm(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, c, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm1, self.conv1 = _norm(cin), nn.Conv2d(cin, cout, 3, 1, 1)
        self.norm2, self.conv2 = _norm(cout), nn.Conv2d(cout, cout, 3, 1, 1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        # x' = shortcut(x) + conv2(swish(norm2(conv1(swish(norm1(x))))))
        h = self.conv2(F.silu(self.norm2(self.conv1(F.silu(self.norm1(x))))))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    """Single-head spatial self-attention: x + proj_out(softmax(q^T k / sqrt(c)) v)."""

    def __init__(self, c: int):
        super().__init__()
        self.norm = _norm(c)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x):
        b, c, h, w = x.shape
        n = self.norm(x)
        q, k, v = (f(n).flatten(2).transpose(1, 2) for f in (self.q, self.k, self.v))  # [B,HW,C]
        o = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        return x + self.proj_out(o.transpose(1, 2).reshape(b, c, h, w))


class Upsample(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _Level(nn.Module):
    def __init__(self, cin: int, cout: int, blocks: int, attn: bool, upsample: bool):
        super().__init__()
        self.res = nn.ModuleList(ResnetBlock(cin if i == 0 else cout, cout) for i in range(blocks))
        self.attn = nn.ModuleList(AttnBlock(cout) for _ in range(blocks if attn else 0))
        self.upsample = Upsample(cout) if upsample else None

    def forward(self, h):
        for i, res in enumerate(self.res):
            h = res(h)
            if len(self.attn):
                h = self.attn[i](h)
        return h if self.upsample is None else self.upsample(h)


class _Decoder(nn.Module):
    def __init__(self, cfg: VQGANConfig):
        super().__init__()
        mult = cfg.ch_mult[::-1]  # level 0 = the lowest resolution
        c = cfg.ch * mult[0]
        self.conv_in = nn.Conv2d(cfg.z_channels, c, 3, 1, 1)
        self.mid = nn.ModuleList([ResnetBlock(c, c), AttnBlock(c), ResnetBlock(c, c)])
        levels = []
        for j, m in enumerate(mult):
            last = j == len(mult) - 1
            attn = j in cfg.attn_levels
            levels.append(_Level(c, cfg.ch * m, cfg.num_res_blocks + 1, attn, not last))
            c = cfg.ch * m
        self.conv_blocks = nn.ModuleList(levels)
        self.norm_out = _norm(c)
        self.conv_out = nn.Conv2d(c, 3, 3, 1, 1)

    def forward(self, z):
        h = self.conv_in(z)
        for blk in self.mid:
            h = blk(h)
        for level in self.conv_blocks:
            h = level(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class _Codebook(nn.Module):
    def __init__(self, n: int, d: int):
        super().__init__()
        self.embedding = nn.Embedding(n, d)


class VQGANDecoder(nn.Module):
    """Codebook ids [B, h * w] (raster order) -> images float [B, 3, f h, f w] (f = 2^(levels-1)),
    nominally in [-1, 1], not clamped."""

    def __init__(self, cfg: VQGANConfig):
        super().__init__()
        self.cfg = cfg
        self.quantize = _Codebook(cfg.n_embed, cfg.embed_dim)
        self.post_quant_conv = nn.Conv2d(cfg.embed_dim, cfg.z_channels, 1)
        self.decoder = _Decoder(cfg)

    @property
    def codebook(self) -> torch.Tensor:
        """[n_embed, embed_dim]: the vectors the codes stand for (l2-normalised when the model
        normalises at lookup), the latent embedding VVS's path similarity compares."""
        e = self.quantize.embedding.weight
        return F.normalize(e, p=2, dim=-1) if self.cfg.l2_codebook else e

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, grid) -> torch.Tensor:
        h, w = (grid, grid) if isinstance(grid, int) else grid
        if codes.dim() != 2 or codes.shape[1] != h * w:
            raise ValueError(
                f"VQGANDecoder.decode: codes must have shape [B, {h * w}] for grid {h}x{w}, "
                f"got {tuple(codes.shape)}"
            )
        if bool(((codes < 0) | (codes >= self.cfg.n_embed)).any()):
            raise ValueError(f"VQGANDecoder.decode: codes must lie in [0, {self.cfg.n_embed})")
        z = self.codebook[codes.long()]  # [B, h w, d]
        z = z.view(codes.shape[0], h, w, -1).permute(0, 3, 1, 2)
        return self.decoder(self.post_quant_conv(z.to(self.post_quant_conv.weight.dtype)))


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """float [B, 3, H, W] in [-1, 1] -> uint8 [B, H, W, 3] (LlamaGen's clamp(127.5 x + 128))."""
    x = (images.float() * 127.5 + 128.0).clamp(0, 255)
    return x.to(torch.uint8).permute(0, 2, 3, 1).cpu()


_ENCODER = re.compile(r"^(encoder\.|quant_conv\.)")


def _infer_config(sd: dict) -> VQGANConfig:
    """The decoder's shape from its weights (VQ-16: 16384 x 8 codes, channels 128 x (1,1,2,2,4),
    attention on the lowest level; smaller models of the same layout load too)."""
    n, d = sd["quantize.embedding.weight"].shape
    levels = sorted(
        {int(m.group(1)) for k in sd if (m := re.match(r"decoder\.conv_blocks\.(\d+)\.", k))}
    )
    couts = [sd[f"decoder.conv_blocks.{j}.res.0.conv1.weight"].shape[0] for j in levels]
    ch = couts[-1]  # the top level's multiplier is 1
    blocks = len({k.split(".")[4] for k in sd if k.startswith("decoder.conv_blocks.0.res.")})
    return VQGANConfig(
        n_embed=n,
        embed_dim=d,
        z_channels=sd["post_quant_conv.weight"].shape[0],
        ch=ch,
        ch_mult=tuple(c // ch for c in couts[::-1]),
        num_res_blocks=blocks - 1,
        attn_levels=tuple(j for j in levels if f"decoder.conv_blocks.{j}.attn.0.q.weight" in sd),
    )


def load_vq16(path, *, device="cpu", dtype=torch.float32) -> VQGANDecoder:
    """LlamaGen's VQ-16 tokenizer (``vq_ds16_c2i.pt``) as a decoder; the encoder's keys and the
    codebook usage counter are read past.  The codebook size and width come from the file."""
    sd = read_state_dict(path, "VQ-16 checkpoint")
    sd = {k: v for k, v in sd.items() if not _ENCODER.match(k) and k != "quantize.codebook_used"}
    if any(k not in sd for k in _NEED):
        raise ValueError(f"VQ-16 checkpoint {path}: expected the keys {_NEED} (not a VQ model?)")
    return _decoder(sd, True, f"VQ-16 checkpoint {path}", device, dtype)


_NEED = ("quantize.embedding.weight", "post_quant_conv.weight", "decoder.conv_out.weight")


def _decoder(sd: dict, l2_codebook: bool, what: str, device, dtype) -> VQGANDecoder:
    """A decoder of the shape ``sd`` (this module's names) has, holding exactly its weights."""
    cfg = _infer_config(sd)
    cfg.l2_codebook = l2_codebook
    vq = VQGANDecoder(cfg)
    missing, extra = vq.load_state_dict(sd, strict=False)
    if missing or extra:
        raise ValueError(f"{what}: missing keys {missing[:5]}, unexpected keys {extra[:5]}")
    return vq.to(device=device, dtype=dtype).eval().requires_grad_(False)


_TAMING = [  # taming-transformers' decoder names -> this module's (level j = levels - 1 - i)
    (re.compile(r"^decoder\.mid\.block_1\."), lambda m, n: "decoder.mid.0."),
    (re.compile(r"^decoder\.mid\.attn_1\."), lambda m, n: "decoder.mid.1."),
    (re.compile(r"^decoder\.mid\.block_2\."), lambda m, n: "decoder.mid.2."),
    (
        re.compile(r"^decoder\.up\.(\d+)\.block\."),
        lambda m, n: f"decoder.conv_blocks.{n - 1 - int(m.group(1))}.res.",
    ),
    (
        re.compile(r"^decoder\.up\.(\d+)\.(attn|upsample)\."),
        lambda m, n: f"decoder.conv_blocks.{n - 1 - int(m.group(1))}.{m.group(2)}.",
    ),
]


def load_chameleon_vqgan(path, *, device="cpu", dtype=torch.float32) -> VQGANDecoder:
    """The Chameleon tokenizer's VQGAN (``vqgan.ckpt``, Lightning's "state_dict", taming names:
    decoder.up.{i}.block.{j}, mid.block_1 ...; 8192 x 256 codes looked up as stored, no
    attention above the middle), used by Lumina-mGPT; docs/notes/chameleon_lumina.md."""
    sd = read_state_dict(path, "Chameleon VQGAN checkpoint")
    levels = len({m.group(1) for k in sd if (m := re.match(r"decoder\.up\.(\d+)\.", k))})
    out = {}
    for k, v in sd.items():
        if not k.startswith(("decoder.", "post_quant_conv.", "quantize.embedding.")):
            continue  # encoder, quant_conv, the GAN loss
        for pat, new in _TAMING:
            if m := pat.match(k):
                k = new(m, levels) + k[m.end() :]
                break
        out[k] = v
    if any(k not in out for k in _NEED) or not levels:
        raise ValueError(f"Chameleon VQGAN checkpoint {path}: expected taming decoder keys {_NEED}")
    return _decoder(out, False, f"Chameleon VQGAN checkpoint {path}", device, dtype)
