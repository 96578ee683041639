"""LlamaGen's released layout: a tiny random c2i GPT and VQ-16 in the official key layout
(tests/data/llamagen_keys.json) load into specops and compute what the official code computes.

The references here are written from docs/notes/llamagen.md, independently of the conversion:
fused wqkv, interleaved RoPE pairs with the class token rotated by cos = sin = 0, plain causal
attention without a cache, CFG ``uncond + s (cond - uncond)`` before the argmax; the VQ decoder as
functional convolutions over the state dict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from specops import decode
from specops.imagegen.tiny import (
    GRID,
    HEADS,
    LAYERS,
    C,
    V,
    official_gpt,
    official_t2i_gpt,
    tiny_vq16,
)
from specops.models.llamagen_gpt import load_llamagen, to_official
from specops.models.vqgan import load_vq16, to_uint8

KEYS = json.loads((Path(__file__).parent / "data" / "llamagen_keys.json").read_text())


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def _rope_2d(grid, hd, n):
    """[n, hd/2] cos and sin: position 0 (the class token) all zero, image token k at 1 + k."""
    q = hd // 4
    inv = 1.0 / 10000 ** (torch.arange(q, dtype=torch.float64) * 2 / (hd // 2))
    k = torch.arange(n - 1, dtype=torch.float64)
    ang = torch.cat([(k // grid)[:, None] * inv, (k % grid)[:, None] * inv], 1)
    cos = torch.cat([torch.zeros(1, hd // 2), ang.cos()]).float()
    sin = torch.cat([torch.zeros(1, hd // 2), ang.sin()]).float()
    return cos, sin


def _interleaved(x, cos, sin):  # pairs (2p, 2p + 1) turned by angle p
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1).flatten(-2)


def official_logits(sd, labels, tokens, grid=GRID, heads=HEADS):
    """The official c2i teacher-forcing forward: [B] labels, [B, T] tokens -> [B, 1 + T, V]."""
    x = torch.cat([sd["cls_embedding.embedding_table.weight"][labels][:, None],
                   sd["tok_embeddings.weight"][tokens]], 1)  # fmt: skip
    b, n, dim = x.shape
    hd = dim // heads
    cos, sin = (t[None, :, None] for t in _rope_2d(grid, hd, n))
    for i in range(len({k.split(".")[1] for k in sd if k.startswith("layers.")})):
        p = f"layers.{i}."
        h = _rms(x, sd[p + "attention_norm.weight"])
        q, k, v = (h @ sd[p + "attention.wqkv.weight"].T).view(b, n, 3, heads, hd).unbind(2)
        q, k = _interleaved(q, cos, sin), _interleaved(k, cos, sin)
        o = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
        x = x + o.transpose(1, 2).reshape(b, n, dim) @ sd[p + "attention.wo.weight"].T
        h = _rms(x, sd[p + "ffn_norm.weight"])
        w1, w2, w3 = (sd[p + f"feed_forward.{w}.weight"] for w in ("w1", "w2", "w3"))
        x = x + (F.silu(h @ w1.T) * (h @ w3.T)) @ w2.T
    return _rms(x, sd["norm.weight"]) @ sd["output.weight"].T


def official_greedy(sd, labels, steps, cfg_scale=None, grid=GRID):
    """generate.py's loop at temperature -> 0, recomputing the whole prefix each step."""
    labels = torch.as_tensor(labels)
    toks = torch.zeros(len(labels), 0, dtype=torch.long)
    for _ in range(steps):
        lg = official_logits(sd, labels, toks, grid)[:, -1]
        if cfg_scale is not None:
            un = official_logits(sd, torch.full_like(labels, C), toks, grid)[:, -1]
            lg = un + (lg - un) * cfg_scale
        toks = torch.cat([toks, lg.argmax(-1, keepdim=True)], 1)
    return toks


def official_t2i_logits(sd, prefix, mask, tokens, grid=GRID, heads=HEADS):
    """The official t2i forward over the full caption window: ``prefix`` [B, T, C] features
    (left-padded, padded rows zero), ``mask`` [B, T]; every query is barred from the padded
    caption keys except its own position (generate.py's causal_mask * emb_mask + eye)."""
    t = prefix.shape[1]
    cap = F.gelu(prefix @ sd["cls_embedding.cap_proj.fc1.weight"].T, approximate="tanh")
    x = torch.cat([cap @ sd["cls_embedding.cap_proj.fc2.weight"].T,
                   sd["tok_embeddings.weight"][tokens]], 1)  # fmt: skip
    b, n, dim = x.shape
    hd = dim // heads
    cos, sin = _rope_2d(grid, hd, n - t + 1)
    cos = torch.cat([torch.zeros(t - 1, hd // 2), cos])[None, :, None]
    sin = torch.cat([torch.zeros(t - 1, hd // 2), sin])[None, :, None]
    keep = torch.ones(b, n, n, dtype=torch.bool).tril()
    keep[:, :, :t] &= mask.bool()[:, None, :]
    keep |= torch.eye(n, dtype=torch.bool)
    for i in range(LAYERS):
        p = f"layers.{i}."
        h = _rms(x, sd[p + "attention_norm.weight"])
        q, k, v = (h @ sd[p + "attention.wqkv.weight"].T).view(b, n, 3, heads, hd).unbind(2)
        q, k = _interleaved(q, cos, sin), _interleaved(k, cos, sin)
        qkv = (z.transpose(1, 2) for z in (q, k, v))
        o = F.scaled_dot_product_attention(*qkv, attn_mask=keep[:, None])
        x = x + o.transpose(1, 2).reshape(b, n, dim) @ sd[p + "attention.wo.weight"].T
        h = _rms(x, sd[p + "ffn_norm.weight"])
        w1, w2, w3 = (sd[p + f"feed_forward.{w}.weight"] for w in ("w1", "w2", "w3"))
        x = x + (F.silu(h @ w1.T) * (h @ w3.T)) @ w2.T
    return _rms(x, sd["norm.weight"]) @ sd["output.weight"].T


def official_t2i_greedy(sd, feats, mask, cfg, steps=GRID * GRID):
    """generate.py's t2i loop at temperature -> 0: CFG against ``uncond_embedding`` under the
    same caption mask, the whole window recomputed every step."""
    uncond = sd["cls_embedding.uncond_embedding"].expand(feats.shape[0], -1, -1)
    toks = torch.zeros(feats.shape[0], 0, dtype=torch.long)
    for _ in range(steps):
        c = official_t2i_logits(sd, feats, mask, toks)[:, -1]
        u = official_t2i_logits(sd, uncond, mask, toks)[:, -1]
        toks = torch.cat([toks, (u + (c - u) * cfg).argmax(-1, keepdim=True)], 1)
    return toks


def test_t2i_greedy_equals_the_official_masked_loop(tmp_path):
    """Captions of 3 and 8 valid tokens (of T = 8), CFG 7.5 against uncond_embedding under the
    same mask, greedy: the compacted caption prefix gives the official tokens."""
    sd = official_t2i_gpt()
    torch.save({"model": sd}, tmp_path / "t2i_T_64.pt")
    m = load_llamagen(tmp_path / "t2i_T_64.pt")
    assert type(m).__name__ == "LlamaGenT2I" and m.cfg.prefix == 8
    g = torch.Generator().manual_seed(5)
    feats = torch.randn(2, 8, 32, generator=g)
    mask = torch.tensor([[0] * 5 + [1] * 3, [1] * 8])  # left padding, as sample_t2i.py builds it
    feats = feats * mask[..., None]
    toks = official_t2i_greedy(sd, feats, mask, 7.5)
    prompt = m.set_captions(feats, mask)
    assert prompt.tolist()[0] == [V, V + 1, V + 2, -1, -1, -1, -1, -1]
    for method in ("ar", "sjd_pac"):
        got, _ = getattr(decode, method)(m, prompt, temperature=0.0, cfg_scale=7.5)
        assert torch.equal(got.long(), toks), method
    back = to_official(m)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    # a drafter's entry 0 holds the last caption row's feature: RoPE row T - 1, then the image's
    assert m.drafter_positions(torch.tensor([[0, 1, 2]])).tolist() == [[7, 8, 9]]
    with pytest.raises(ValueError, match="captions set are for 2"):  # stale captions, CFG
        decode.ar(m, prompt[:1], temperature=0.0, cfg_scale=7.5)


def test_rope_table_stays_float32(gpt_file):
    """bf16 weights, float32 rotation angles (LlamaGen's freqs_cis): a bf16 table is off ~1e-3."""
    m = load_llamagen(gpt_file, dtype=torch.bfloat16)
    assert m.embed.weight.dtype == torch.bfloat16 and m.rope.dtype == torch.float32
    m = load_llamagen(gpt_file).to(torch.float16)
    assert m.rope.dtype == torch.float32 and torch.equal(m.rope, load_llamagen(gpt_file).rope)


@pytest.fixture
def gpt_file(tmp_path):
    f = tmp_path / "c2i_T_64.pt"  # image size 64 -> grid 4
    torch.save({"model": official_gpt(), "steps": 1}, f)
    return f


def test_key_layout_matches_the_released_gpt():
    """The converter writes exactly the official GPT-B key set and shapes (from the real code)."""
    sd = {k: torch.zeros(v) for k, v in KEYS["gpt_B"].items()}
    sd = {k: v.normal_() for k, v in sd.items()}
    f = Path(__import__("tempfile").mkdtemp()) / "c2i_B_256.pt"
    torch.save(sd, f)  # the FSDP-style file: the state dict itself
    m = load_llamagen(f)
    assert (m.cfg.layers, m.cfg.heads, m.cfg.dim, m.cfg.grid) == (12, 12, 768, 16)
    back = to_official(m)
    assert {k: list(v.shape) for k, v in back.items()} == KEYS["gpt_B"]
    assert all(torch.equal(back[k], sd[k]) for k in sd)


def test_logits_equal_the_official_forward(gpt_file):
    sd = official_gpt()
    m = load_llamagen(gpt_file)
    g = torch.Generator().manual_seed(1)
    labels = torch.tensor([3, C])  # a class and the unconditional row
    toks = torch.randint(0, V, (2, GRID * GRID - 1), generator=g)
    want = official_logits(sd, labels, toks)
    seq = torch.cat([labels[:, None] + V, toks], 1)
    got, _ = m.forward_train(seq)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("cfg_scale", [None, 4.0])
@pytest.mark.parametrize("method", ["ar", "sjd", "sjd_pac"])
def test_greedy_tokens_equal_the_official_loop(gpt_file, method, cfg_scale):
    """Through the KV cache, tree attention and each method: the official greedy CFG tokens."""
    m = load_llamagen(gpt_file)
    want = official_greedy(official_gpt(), [3, 7], GRID * GRID, cfg_scale)
    fn = getattr(decode, method)
    got, _ = fn(m, [3, 7], temperature=0.0, cfg_scale=cfg_scale)
    assert torch.equal(got.long(), want)


def test_load_errors(tmp_path, gpt_file):
    with pytest.raises(FileNotFoundError, match="no file"):
        load_llamagen(tmp_path / "c2i_B_256.pt")
    sd = official_gpt()
    del sd["layers.1.ffn_norm.weight"]
    torch.save(sd, tmp_path / "c2i_bad_64.pt")
    with pytest.raises(ValueError, match="missing keys.*layers.1.ffn_norm"):
        load_llamagen(tmp_path / "c2i_bad_64.pt")
    sd = official_t2i_gpt()
    del sd["cls_embedding.cap_proj.fc2.weight"]
    torch.save(sd, tmp_path / "t2i_64.pt")
    with pytest.raises(ValueError, match="missing keys.*cap_proj.fc2"):
        load_llamagen(tmp_path / "t2i_64.pt")
    torch.save(official_gpt(), tmp_path / "gpt.pt")
    with pytest.raises(ValueError, match="image size"):
        load_llamagen(tmp_path / "gpt.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a loadable"):
        load_llamagen(tmp_path / "junk.pt", grid=4)
    assert load_llamagen(gpt_file, grid=8).cfg.grid == 8


# VQ-16 ---------------------------------------------------------------------------------------


def official_decode(sd, codes, grid, mult=(1, 2)):
    """decode_code: l2-normalised codebook lookup, raster layout, post_quant_conv, decoder."""

    def conv(x, p, pad=None):
        w = sd[p + ".weight"]
        return F.conv2d(x, w, sd[p + ".bias"], padding=w.shape[-1] // 2 if pad is None else pad)

    def gn(x, p):
        return F.group_norm(x, 32, sd[p + ".weight"], sd[p + ".bias"], eps=1e-6)

    def res(x, p):
        h = conv(F.silu(gn(conv(F.silu(gn(x, p + ".norm1")), p + ".conv1"), p + ".norm2")),
                 p + ".conv2")  # fmt: skip
        return (conv(x, p + ".nin_shortcut") if p + ".nin_shortcut.weight" in sd else x) + h

    def attn(x, p):
        b, c, h, w = x.shape
        n = gn(x, p + ".norm")
        q, k, v = (conv(n, f"{p}.{t}").reshape(b, c, h * w) for t in "qkv")
        wts = torch.softmax(q.transpose(1, 2) @ k * c**-0.5, -1)  # [B, hw (query), hw (key)]
        return x + conv((v @ wts.transpose(1, 2)).reshape(b, c, h, w), p + ".proj_out")

    e = F.normalize(sd["quantize.embedding.weight"], p=2, dim=-1)
    z = e[codes].reshape(codes.shape[0], grid, grid, -1).permute(0, 3, 1, 2)
    x = conv(conv(z, "post_quant_conv"), "decoder.conv_in")
    x = res(attn(res(x, "decoder.mid.0"), "decoder.mid.1"), "decoder.mid.2")
    for j in range(len(mult)):
        for r in range(3):
            x = res(x, f"decoder.conv_blocks.{j}.res.{r}")
            if j == 0:
                x = attn(x, f"decoder.conv_blocks.{j}.attn.{r}")
        if j < len(mult) - 1:
            x = conv(F.interpolate(x, scale_factor=2, mode="nearest"),
                     f"decoder.conv_blocks.{j}.upsample.conv")  # fmt: skip
    return conv(F.silu(gn(x, "decoder.norm_out")), "decoder.conv_out")


def test_vq16_key_layout_matches_the_released_tokenizer(tmp_path):
    sd = {k: torch.randn(v) for k, v in KEYS["vq16_decoder"].items()}
    sd |= {k: torch.randn(v) for k, v in KEYS["vq16_encoder"].items()}
    torch.save({"model": sd}, tmp_path / "vq_ds16_c2i.pt")
    vq = load_vq16(tmp_path / "vq_ds16_c2i.pt")
    assert vq.cfg.n_embed == 16384 and vq.cfg.factor == 16


@pytest.mark.parametrize("grid", [1, 3, 4])
def test_vq16_decode_equals_the_official_path(tmp_path, grid):
    from specops.models.vqgan import VQGANConfig, VQGANDecoder

    sd = tiny_vq16()
    vq = VQGANDecoder(VQGANConfig(n_embed=16, embed_dim=8, z_channels=64, ch=32, ch_mult=(1, 2)))
    keep = ("decoder", "post_quant", "quantize.embedding")
    vq.load_state_dict({k: v for k, v in sd.items() if k.startswith(keep)})
    codes = torch.randint(0, 16, (2, grid * grid), generator=torch.Generator().manual_seed(grid))
    got = vq.decode(codes, grid)
    assert got.shape == (2, 3, 2 * grid, 2 * grid)
    torch.testing.assert_close(got, official_decode(sd, codes, grid), atol=1e-4, rtol=1e-4)
    px = to_uint8(got)
    assert px.dtype == torch.uint8 and px.shape == (2, 2 * grid, 2 * grid, 3)
    with pytest.raises(ValueError, match=r"codes must have shape \[B, 4\]"):
        vq.decode(codes[:, :3], 2)
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\)"):
        vq.decode(torch.full((1, grid * grid), 16), grid)
