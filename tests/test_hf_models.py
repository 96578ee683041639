"""specops.hf on the architectures of the methods' papers, tiny random-weight configs: greedy
``specops.hf.generate`` is token-identical to ``model.generate(do_sample=False)`` for every
method on Chameleon (Lumina-mGPT's architecture) and Emu3 in text mode, and on LLaVA with an
image prefix; image generation restricted to the image vocabulary (``allowed_tokens``) equals a
cache-free greedy loop over transformers' forward."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import specops.hf  # noqa: E402

METHOD_OPTIONS = {
    "ar": {},
    "sjd": {"window": 6},
    "sjd_pac": {"window": 16, "branch": 3, "depth": 3},
}
SMALL = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.3,
)  # fmt: skip


def hf_greedy(m, ids, n, **kw):
    with torch.no_grad():
        return m.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, **kw
        )


def check_greedy(m, ids, method, n=16, **kw):
    ref = hf_greedy(m, ids, n, **kw)
    out, _ = specops.hf.generate(
        m, ids, method=method, max_new_tokens=n, do_sample=False, **METHOD_OPTIONS[method],
        prefill_inputs=kw or None,
    )  # fmt: skip
    assert torch.equal(out, ref)


def check_image_tokens(m, ids, image, method, n=12):
    """Greedy over the image vocabulary = argmax over ``image`` of lm_head(last hidden state)
    of transformers' cache-free forward; sampled tokens stay in the image vocabulary."""
    out, _ = specops.hf.generate(
        m, ids, method=method, max_new_tokens=n, do_sample=False, allowed_tokens=image,
        **METHOD_OPTIONS[method],
    )  # fmt: skip
    seq = ids
    with torch.no_grad():
        for _ in range(n):
            h = m(seq, output_hidden_states=True).hidden_states[-1][:, -1]
            nxt = m.get_output_embeddings()(h)[:, image].argmax(-1)
            seq = torch.cat([seq, torch.tensor(image)[nxt][:, None]], 1)
    assert torch.equal(out, seq)
    sampled, _ = specops.hf.generate(
        m, ids, method=method, max_new_tokens=n, allowed_tokens=image, seed=3,
        **METHOD_OPTIONS[method],
    )  # fmt: skip
    assert bool(torch.isin(sampled[:, ids.shape[1] :], torch.tensor(image)).all())


# ---------------------------------------------------------------- Chameleon (Lumina-mGPT)


def _img_name(i: int) -> str:
    # Chameleon's BPE names of VQ codes: IMGIMG + the code's digits as letters A-J + Z
    return "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(i)) + "Z"


@pytest.fixture(scope="module")
def chameleon():
    """128 tokens: 0-62 text, 63 <image>, 64-127 the VQ codes 0-63."""
    vm = {f"t{i}": i for i in range(63)} | {"<image>": 63}
    vm |= {_img_name(i): 64 + i for i in range(64)}
    torch.manual_seed(0)
    cfg = transformers.ChameleonConfig(
        vocab_size=128, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        vocabulary_map=vm, **SMALL,
    )  # fmt: skip
    return transformers.ChameleonForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_chameleon_text_greedy(chameleon, method):
    check_greedy(
        chameleon, torch.randint(0, 63, (2, 6), generator=torch.Generator().manual_seed(4)), method
    )


@pytest.mark.parametrize("method", ["ar", "sjd_pac"])
def test_chameleon_image_tokens(chameleon, method):
    """Image generation as Lumina-mGPT samples it: every token from the image vocabulary, which
    the model's own forward forbids in text mode."""
    ids = torch.randint(0, 63, (2, 6), generator=torch.Generator().manual_seed(5))
    ids[:, -1] = 63  # <image>
    check_image_tokens(chameleon, ids, chameleon.model.vocabulary_mapping.image_tokens, method)


# ---------------------------------------------------------------- Emu3


@pytest.fixture(scope="module")
def emu3():
    """128 tokens: 0-59 text, 60 <image>, 61 end of line, 64-127 visual tokens 0-63."""
    vm = {f"t{i}": i for i in range(60)} | {"<image>": 60, "<|extra_200|>": 61}
    vm |= {f"<|visual token {i:06d}|>": 64 + i for i in range(64)}
    torch.manual_seed(1)
    vq = transformers.Emu3VQVAEConfig(
        codebook_size=64, embed_dim=4, latent_channels=4, base_channels=32,
        channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[], hidden_size=16,
        num_attention_heads=1,
    )  # fmt: skip
    text = transformers.Emu3TextConfig(
        vocab_size=128, bos_token_id=1, eos_token_id=2, pad_token_id=0, **SMALL
    )
    cfg = transformers.Emu3Config(vq_config=vq, text_config=text, vocabulary_map=vm)
    return transformers.Emu3ForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_emu3_text_greedy(emu3, method):
    """Greedy with the config's EOS (2) and pad (0) as transformers applies them."""
    check_greedy(
        emu3, torch.randint(3, 60, (2, 6), generator=torch.Generator().manual_seed(6)), method
    )


def test_emu3_image_tokens(emu3):
    ids = torch.randint(3, 60, (2, 6), generator=torch.Generator().manual_seed(7))
    check_image_tokens(emu3, ids, emu3.model.vocabulary_mapping.image_tokens, "sjd")


# ---------------------------------------------------------------- LLaVA


@pytest.fixture(scope="module")
def llava():
    """A Llama text model behind a one-layer CLIP tower: a 16x16 image is 4 patches, i.e. 4
    image tokens (id 127) in the prompt."""
    torch.manual_seed(2)
    vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=16, patch_size=8, projection_dim=32,
    )  # fmt: skip
    text = transformers.LlamaConfig(
        vocab_size=128, bos_token_id=None, eos_token_id=None, pad_token_id=None, **SMALL
    )
    cfg = transformers.LlavaConfig(
        vision_config=vision, text_config=text, image_token_id=127, vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )  # fmt: skip
    return transformers.LlavaForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_llava_image_prefix_greedy(llava, method):
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(0, 120, (2, 8), generator=g)
    ids[:, 1:5] = 127
    check_greedy(llava, ids, method, pixel_values=torch.randn(2, 3, 16, 16, generator=g))
    assert llava.config.get_text_config()._attn_implementation == "sdpa"


def test_llava_ragged(llava):
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(0, 120, (2, 8), generator=g)
    ids[:, 2:6] = 127
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding
    pix = torch.randn(2, 3, 16, 16, generator=g)
    with torch.no_grad():
        ref = llava.generate(
            ids, pixel_values=pix, attention_mask=mask, do_sample=False, max_new_tokens=12
        )
    out, _ = specops.hf.generate(
        llava, ids, attention_mask=mask, method="sjd", window=6, max_new_tokens=12,
        do_sample=False, prefill_inputs={"pixel_values": pix},
    )  # fmt: skip
    assert torch.equal(out, ref)


# ---------------------------------------------------------------- Qwen2 (q/k/v biases)


def test_qwen2_greedy():
    """Qwen2 keeps a sliding_window in its config that it does not use (layer_types say full)."""
    torch.manual_seed(3)
    cfg = transformers.Qwen2Config(
        vocab_size=96, bos_token_id=None, eos_token_id=None, pad_token_id=None, **SMALL
    )
    m = transformers.Qwen2ForCausalLM(cfg).eval()
    ids = torch.randint(0, 96, (2, 6), generator=torch.Generator().manual_seed(10))
    for method in sorted(METHOD_OPTIONS):
        check_greedy(m, ids, method)


# ---------------------------------------------------------------- Janus


OLD = int(transformers.__version__.split(".")[0]) < 5


@pytest.fixture(scope="module")
def janus():
    """Text vocabulary 128 (127 = image token), a 48-code VQ codebook for generation.
    transformers 4.x's Janus does not expose its Llama decoder (get_decoder) to the adapter."""
    if OLD:
        pytest.skip("Janus through specops.hf needs transformers >= 5")
    torch.manual_seed(4)
    text = transformers.LlamaConfig(
        vocab_size=128, bos_token_id=None, eos_token_id=None, pad_token_id=None, **SMALL
    )
    vision = transformers.JanusVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=16, patch_size=8, projection_dim=64,
    )  # fmt: skip
    vq = transformers.JanusVQVAEConfig(
        embed_dim=8, num_embeddings=48, latent_channels=8, base_channels=32,
        channel_multiplier=[1, 1], num_res_blocks=1, image_token_embed_dim=64, projection_dim=64,
        num_patches=4,
    )  # fmt: skip
    cfg = transformers.JanusConfig(
        text_config=text, vision_config=vision, vq_config=vq, image_token_id=127
    )
    return transformers.JanusForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_janus_text_greedy(janus, method):
    ids = torch.randint(0, 120, (2, 5), generator=torch.Generator().manual_seed(11))
    check_greedy(janus, ids, method, n=10)


@pytest.mark.parametrize("method", ["ar", "sjd_pac"])
def test_janus_image_head(janus, method):
    """Janus image generation: the prompt read as text, every new token a VQ code from the
    generation head, fed back through the generation embedding; == a cache-free greedy loop."""
    ids = torch.randint(0, 120, (2, 5), generator=torch.Generator().manual_seed(12))
    out, _ = specops.hf.generate(
        janus, ids, method=method, max_new_tokens=10, do_sample=False, image_head=True,
        **METHOD_OPTIONS[method],
    )  # fmt: skip
    emb, codes = janus.get_input_embeddings()(ids), []
    with torch.no_grad():
        for _ in range(10):
            h = janus.model.language_model(inputs_embeds=emb).last_hidden_state[:, -1]
            codes.append(janus.model.generation_head(h).argmax(-1))
            nxt = janus.prepare_embeddings_for_image_generation(codes[-1][:, None])
            emb = torch.cat([emb, nxt], 1)
    assert torch.equal(out, torch.cat([ids, torch.stack(codes, 1)], 1))
    with pytest.raises(ValueError, match="image_head=True needs a model with an image-generation"):
        specops.hf.HFModel(transformers.LlamaForCausalLM(janus.config.text_config), image_head=True)
