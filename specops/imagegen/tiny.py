"""Tiny random checkpoints written as the released ones are read, for tests and for trying
``specops generate`` without a download (the pictures are noise: the weights are random).

    python -m specops.imagegen.tiny llamagen ckpts/tiny-llamagen     # c2i_T_64.pt + vq_ds16_c2i.pt
    python -m specops.imagegen.tiny llamagen-t2i ckpts/tiny-t2i      # t2i_T_64.pt + VQ + t5/
    python -m specops.imagegen.tiny janus ckpts/tiny-janus           # save_pretrained + processor
    python -m specops.imagegen.tiny emu3 ckpts/tiny-emu3
    python -m specops.imagegen.tiny chameleon ckpts/tiny-chameleon   # + tokenizer/vqgan.ckpt

LlamaGen: the official key layout with fewer channels and levels; Janus, Emu3, Chameleon: tiny
transformers models with character-level tokenizers built offline.  ``levels``: the VQ
decoder's levels (an image is 2^(levels - 1) pixels a code side).  What each writes, in full:
docs/generate.md, "Trying it without a download".
"""

from __future__ import annotations

import sys
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


def official_t2i_gpt(seed=0, dim=D, layers=LAYERS, vocab=V, tokens=8, caption_dim=32) -> dict:
    """A text-conditional GPT state dict: ``official_gpt``'s blocks with the caption embedder
    (``cap_proj`` fc1 / fc2, ``uncond_embedding`` [tokens, caption_dim]) for the class table."""
    g = torch.Generator().manual_seed(seed + 1000)
    sd = official_gpt(seed, dim, layers, vocab)
    del sd["cls_embedding.embedding_table.weight"]
    sd["cls_embedding.cap_proj.fc1.weight"] = torch.randn(dim, caption_dim, generator=g) / 4
    sd["cls_embedding.cap_proj.fc2.weight"] = torch.randn(dim, dim, generator=g) / dim**0.5 * 4
    sd["cls_embedding.uncond_embedding"] = torch.randn(tokens, caption_dim, generator=g)
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


def llamagen_dir(
    path: Path, *, vocab=V, classes=C, image_size=GRID * 16, seed=0, levels: int = 2
) -> Path:
    """A directory as released: ``c2i_T_<size>.pt`` (under "model") and ``vq_ds16_c2i.pt``; the
    tiny VQ has two levels, so an image is 2 * grid pixels a side."""
    path.mkdir(parents=True, exist_ok=True)
    gpt = official_gpt(seed, vocab=vocab, classes=classes)
    torch.save({"model": gpt}, path / f"c2i_T_{image_size}.pt")
    mult = (1,) * (levels - 1) + (2,)
    torch.save({"model": tiny_vq16(seed, n=vocab, mult=mult)}, path / "vq_ds16_c2i.pt")
    return path


CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,*:\n")


def llamagen_t2i_dir(path: Path, *, vocab=V, tokens=16, image_size=GRID * 16, seed=0,
                     levels: int = 2) -> Path:  # fmt: skip
    """A text-conditional directory: ``t2i_T_<size>.pt``, ``vq_ds16_t2i.pt`` and ``t5/`` (a tiny
    T5 encoder, d_model 32 = the GPT's caption width, with a character tokenizer)."""
    from transformers import T5Config, T5EncoderModel

    path.mkdir(parents=True, exist_ok=True)
    gpt = official_t2i_gpt(seed, vocab=vocab, tokens=tokens, caption_dim=32)
    torch.save({"model": gpt}, path / f"t2i_T_{image_size}.pt")
    mult = (1,) * (levels - 1) + (2,)
    torch.save({"model": tiny_vq16(seed, n=vocab, mult=mult)}, path / "vq_ds16_t2i.pt")
    tok = _char_tokenizer(dict(eos_token="</s>", pad_token="<pad>"))
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                   pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    T5EncoderModel(cfg).eval().save_pretrained(path / "t5")
    tok.save_pretrained(path / "t5")
    return path


def _char_tokenizer(specials: dict, extra: list[str] = (), post_bos: str | None = None, **kw):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(CHARS)}
    for name in specials.values():
        vocab.setdefault(name, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    if post_bos is not None:
        tk.post_processor = processors.TemplateProcessing(
            single=f"{post_bos} $A", special_tokens=[(post_bos, vocab[post_bos])]
        )
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, **specials, **kw)
    if extra:
        tok.add_tokens(list(extra), special_tokens=True)
    return tok


def _widen(model) -> None:
    """Default init (std 0.02) gives near-constant logits; std 0.2 outside the VQ discriminates."""
    with torch.no_grad():
        for n, w in model.named_parameters():
            if w.dim() == 2 and "vqmodel" not in n:
                w.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(len(n)))


def janus_dir(path: Path, grid: int = 4, levels: int = 2) -> Path:
    from transformers import (
        JanusConfig,
        JanusForConditionalGeneration,
        JanusImageProcessorPil,
        JanusProcessor,
    )

    bos, eos, pad = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
    tok = _char_tokenizer(
        dict(bos_token=bos, eos_token=eos, pad_token=pad), post_bos=bos,
        extra_special_tokens={"image_token": "<image_placeholder>", "boi_token": "<begin_of_image>",
                              "eoi_token": "<end_of_image>"},
    )  # fmt: skip
    torch.manual_seed(0)
    cfg = JanusConfig(
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=32,
                         intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, max_position_embeddings=256,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id),
        vision_config=dict(image_size=grid * 4, patch_size=4, num_image_tokens=grid * grid,
                           hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           mlp_ratio=2, projection_dim=32),
        vq_config=dict(embed_dim=8, num_embeddings=24, latent_channels=8, base_channels=32,
                       channel_multiplier=[1] * (levels - 1) + [2], num_res_blocks=1,
                       projection_dim=32,
                       image_token_embed_dim=32),
        image_token_id=tok.image_token_id,
    )  # fmt: skip
    model = JanusForConditionalGeneration(cfg).eval()
    _widen(model)
    gc = model.generation_config
    gc._from_model_config = False
    gc.pad_token_id, gc.bos_token_id = tok.pad_token_id, tok.bos_token_id
    gc.generation_kwargs = {"boi_token_id": tok.boi_token_id}
    gc.guidance_scale, gc.temperature = 5, 1.0
    proc = JanusProcessor(
        JanusImageProcessorPil(image_mean=[0.5] * 3, image_std=[0.5] * 3), tok,
        num_image_tokens=grid * grid,
    )  # fmt: skip
    model.save_pretrained(path)
    proc.save_pretrained(path)
    return path


def emu3_dir(path: Path, codebook: int = 32, levels: int = 2) -> Path:
    from transformers import (
        Emu3Config,
        Emu3ForConditionalGeneration,
        Emu3ImageProcessor,
        Emu3Processor,
        Emu3TextConfig,
    )

    tok = _char_tokenizer(
        dict(bos_token="<|extra_203|>", eos_token="<|extra_204|>", pad_token="<|endoftext|>"),
        extra_special_tokens={"image_token": "<image>", "boi_token": "<|image start|>",
                              "eoi_token": "<|image end|>",
                              "image_wrapper_token": "<|image token|>",
                              "eof_token": "<|extra_201|>"},
    )  # fmt: skip
    tok.add_tokens(["<|extra_200|>"], special_tokens=True)  # EOL
    tok.add_tokens([f"<|visual token{i:06d}|>" for i in range(codebook)], special_tokens=True)
    tok.padding_side = "left"
    torch.manual_seed(0)
    text = Emu3TextConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    vq = dict(codebook_size=codebook, embed_dim=4, latent_channels=4, base_channels=32,
              channel_multiplier=[1] * (levels - 1) + [2], num_res_blocks=1, attn_resolutions=[],
              hidden_size=64,
              temporal_downsample_factor=4)  # fmt: skip
    cfg = Emu3Config(text_config=text, vq_config=vq, vocabulary_map=tok.get_vocab())
    model = Emu3ForConditionalGeneration(cfg).eval()
    _widen(model)
    proc = Emu3Processor(Emu3ImageProcessor(image_mean=[0.5] * 3, image_std=[0.5] * 3), tok)
    model.save_pretrained(path)
    proc.save_pretrained(path)
    return path


def _img_name(code: int) -> str:
    # Chameleon's BPE names of VQ codes: IMGIMG + the code's digits as letters A-J + Z
    return "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"


def taming_vqgan(n_embed: int, seed: int = 0, levels: int = 2) -> tuple[dict, dict]:
    """A Lightning-style ``vqgan.ckpt`` dict in taming's decoder names (two levels, z 64,
    codebook n_embed x 8, no attention above the middle) with encoder and loss keys beside."""
    from specops.models.vqgan import VQGANConfig, VQGANDecoder

    torch.manual_seed(seed)
    mult = (1,) * (levels - 1) + (2,)
    cfg = VQGANConfig(n_embed=n_embed, embed_dim=8, z_channels=64, ch=32, ch_mult=mult,
                      attn_levels=(), l2_codebook=False)  # fmt: skip
    ours = VQGANDecoder(cfg).state_dict()
    out = {}
    for k, v in ours.items():  # conv_blocks.{j} is taming's up.{1 - j}; res -> block
        k = k.replace("decoder.mid.0.", "decoder.mid.block_1.")
        k = k.replace("decoder.mid.1.", "decoder.mid.attn_1.")
        k = k.replace("decoder.mid.2.", "decoder.mid.block_2.")
        for j in range(levels):  # conv_blocks.{j} is taming's up.{levels - 1 - j}
            i = levels - 1 - j
            k = k.replace(f"decoder.conv_blocks.{j}.res.", f"decoder.up.{i}.block.")
            k = k.replace(f"decoder.conv_blocks.{j}.upsample.", f"decoder.up.{i}.upsample.")
        out[k] = v
    out["encoder.conv_in.weight"] = torch.zeros(32, 3, 3, 3)
    out["loss.discriminator.main.0.weight"] = torch.zeros(4, 3, 4, 4)
    return {"state_dict": out}, ours


def chameleon_dir(path: Path, codebook: int = 16, size_tokens=range(1, 9), levels: int = 2) -> Path:
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    extra = ["<racm3:break>", "<eoss>", "<reserved08706>", "<reserved08799>"]
    extra += [f"<reserved0{8800 + n}>" for n in size_tokens]
    extra += [_img_name(i) for i in range(codebook)]
    tok = _char_tokenizer(dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>"), extra)
    torch.manual_seed(0)
    cfg = ChameleonConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
        vocabulary_map=tok.get_vocab(), bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        vq_config=dict(embed_dim=8, num_embeddings=codebook, latent_channels=8, base_channels=32,
                       channel_multiplier=[1, 2], num_res_blocks=1, resolution=16),
    )  # fmt: skip
    model = ChameleonForConditionalGeneration(cfg).eval()
    _widen(model)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    ckpt, _ = taming_vqgan(codebook, levels=levels)
    (path / "tokenizer").mkdir(exist_ok=True)
    torch.save(ckpt, path / "tokenizer" / "vqgan.ckpt")
    return path


WRITERS = {
    "llamagen": llamagen_dir,
    "llamagen-t2i": llamagen_t2i_dir,
    "janus": janus_dir,
    "emu3": emu3_dir,
    "chameleon": chameleon_dir,
}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m specops.imagegen.tiny",
        description=__doc__.split("\n")[0],
        allow_abbrev=False,
    )
    ap.add_argument("family", choices=sorted(WRITERS))
    ap.add_argument("dir")
    ap.add_argument(
        "--levels", type=int, default=4, help="VQ decoder levels (2^(levels-1) px/code)"
    )
    args = ap.parse_args(argv)
    extra = {"classes": 1000} if args.family == "llamagen" else {}  # ImageNet's, as released
    path = WRITERS[args.family](Path(args.dir), levels=args.levels, **extra)
    print(f"wrote a tiny random {args.family} checkpoint to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
