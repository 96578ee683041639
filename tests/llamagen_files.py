"""Tiny random checkpoints in LlamaGen's released key layout (tests/data/llamagen_keys.json has
the real ones): a c2i GPT state dict and a VQ-16-layout tokenizer, and a directory holding both
as ``specops generate`` reads it."""

from __future__ import annotations

from pathlib import Path

import torch

V, C, D, LAYERS, HEADS, GRID = 64, 10, 128, 2, 2, 4


def official_gpt(seed=0, dim=D, layers=LAYERS, vocab=V, classes=C, ffn=256) -> dict:
    g = torch.Generator().manual_seed(seed)
    sd = {
        "cls_embedding.embedding_table.weight": torch.randn(classes + 1, dim, generator=g),
        "tok_embeddings.weight": torch.randn(vocab, dim, generator=g),
    }
    for i in range(layers):
        p = f"layers.{i}."
        sd[p + "attention.wqkv.weight"] = torch.randn(3 * dim, dim, generator=g) / dim**0.5
        sd[p + "attention.wo.weight"] = torch.randn(dim, dim, generator=g) / dim**0.5
        sd[p + "feed_forward.w1.weight"] = torch.randn(ffn, dim, generator=g) / dim**0.5
        sd[p + "feed_forward.w3.weight"] = torch.randn(ffn, dim, generator=g) / dim**0.5
        sd[p + "feed_forward.w2.weight"] = torch.randn(dim, ffn, generator=g) / ffn**0.5
        sd[p + "attention_norm.weight"] = 1 + 0.1 * torch.randn(dim, generator=g)
        sd[p + "ffn_norm.weight"] = 1 + 0.1 * torch.randn(dim, generator=g)
    sd["norm.weight"] = 1 + 0.1 * torch.randn(dim, generator=g)
    sd["output.weight"] = torch.randn(vocab, dim, generator=g) / dim**0.5
    return sd


def tiny_vq16(seed=0, ch=32, mult=(1, 2), n=16, d=8, z=64) -> dict:
    """A VQ-16-layout state dict, smaller: channels ``ch * mult``, two levels (factor 2),
    encoder keys included as in the released file."""
    g = torch.Generator().manual_seed(seed)

    def conv(o, i, k):
        return {"weight": torch.randn(o, i, k, k, generator=g) / (i * k * k) ** 0.5,
                "bias": 0.1 * torch.randn(o, generator=g)}  # fmt: skip

    def gn(c):
        return {"weight": 1 + 0.1 * torch.randn(c, generator=g),
                "bias": 0.1 * torch.randn(c, generator=g)}  # fmt: skip

    sd = {}

    def put(prefix, params):
        sd.update({f"{prefix}.{k}": v for k, v in params.items()})

    def res(p, i, o):
        put(p + ".norm1", gn(i)), put(p + ".conv1", conv(o, i, 3))
        put(p + ".norm2", gn(o)), put(p + ".conv2", conv(o, o, 3))
        if i != o:
            put(p + ".nin_shortcut", conv(o, i, 1))

    def attn(p, c):
        put(p + ".norm", gn(c))
        for w in ("q", "k", "v", "proj_out"):
            put(f"{p}.{w}", conv(c, c, 1))

    sd["quantize.embedding.weight"] = torch.randn(n, d, generator=g)
    sd["quantize.codebook_used"] = torch.zeros(65536)
    put("post_quant_conv", conv(z, d, 1))
    top = ch * mult[-1]
    put("decoder.conv_in", conv(top, z, 3))
    res("decoder.mid.0", top, top), attn("decoder.mid.1", top), res("decoder.mid.2", top, top)
    c = top
    for j, m in enumerate(mult[::-1]):
        for r in range(3):
            res(f"decoder.conv_blocks.{j}.res.{r}", c, ch * m)
            c = ch * m
            if j == 0:
                attn(f"decoder.conv_blocks.{j}.attn.{r}", c)
        if j < len(mult) - 1:
            put(f"decoder.conv_blocks.{j}.upsample.conv", conv(c, c, 3))
    put("decoder.norm_out", gn(c)), put("decoder.conv_out", conv(3, c, 3))
    put("encoder.conv_in", conv(ch, 3, 3)), put("quant_conv", conv(d, z, 1))  # read past
    return sd


def llamagen_dir(path: Path, *, vocab=V, image_size=GRID * 16, seed=0) -> Path:
    """A directory as released: ``c2i_T_<size>.pt`` (under "model") and ``vq_ds16_c2i.pt``; the
    tiny VQ has two levels, so an image is 2 * grid pixels a side."""
    path.mkdir(parents=True, exist_ok=True)
    torch.save({"model": official_gpt(seed, vocab=vocab)}, path / f"c2i_T_{image_size}.pt")
    torch.save({"model": tiny_vq16(seed, n=vocab)}, path / "vq_ds16_c2i.pt")
    return path
