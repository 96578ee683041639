"""``specops generate`` on tiny random Janus, Emu3 and Chameleon / Lumina-mGPT checkpoints
(tests/hf_image_files.py): greedy codes equal transformers' own image generation (Janus, Emu3)
or a plain recompute-everything loop written from Lumina-mGPT's layout (Chameleon, which
transformers cannot generate images with), a PNG per prompt, the first code's law under sampling,
and clear errors before any work."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from PIL import Image  # noqa: E402

from specops import cli  # noqa: E402
from specops.imagegen import generate_image, load_pipeline  # noqa: E402
from specops.imagegen.hf_models import EMU3_NEGATIVE  # noqa: E402
from specops.imagegen.tiny import chameleon_dir, emu3_dir, janus_dir, taming_vqgan  # noqa: E402

PROMPTS = ["a dog running in the rain", "a cat"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hfimg")
    return {
        "janus": janus_dir(root / "janus"),
        "emu3": emu3_dir(root / "emu3"),
        "chameleon": chameleon_dir(root / "chameleon"),
    }


SIZE = {"janus": None, "emu3": 32, "chameleon": 64}  # 4 x 4 codes each


def _pipe(dirs, name):
    kw = {} if SIZE[name] is None else {"image_size": SIZE[name]}
    return load_pipeline(dirs[name], **kw)


@pytest.mark.parametrize("method", ["ar", "sjd", "sjd_pac"])
def test_janus_greedy_equals_transformers(dirs, method):
    pipe = _pipe(dirs, "janus")
    inputs = pipe.processor(text=PROMPTS, generation_mode="image", padding=True,
                            return_tensors="pt")  # fmt: skip
    try:
        want = pipe.hf.generate(**inputs, generation_mode="image", do_sample=False)  # CFG 5
    except TypeError as e:  # some transformers releases' own Janus generate is broken
        if "_prepare_static_cache" not in str(e):
            raise
        pytest.skip(f"transformers {transformers.__version__}'s Janus generate fails: {e}")
    got = generate_image(pipe, prompt=PROMPTS, method=method, temperature=0.0)
    assert torch.equal(got.codes.long(), want.long())
    assert got.settings["cfg_scale"] == 5.0


@pytest.mark.parametrize("method", ["ar", "sjd_pac"])
def test_emu3_greedy_equals_transformers(dirs, method):
    pipe = _pipe(dirs, "emu3")
    proc, tok, vm = pipe.processor, pipe.processor.tokenizer, pipe.hf.model.vocabulary_mapping
    tok.padding_side = "left"
    inputs = proc(text=PROMPTS, return_for_image_generation=True, image_area=32 * 32,
                  padding=True, return_tensors="pt")  # fmt: skip
    h, w = (int(v) for v in inputs.pop("image_sizes")[0])
    neg = proc(text=[EMU3_NEGATIVE] * 2, padding=True, return_tensors="pt")
    wrap = tok.image_wrapper_token_id

    def allowed(batch_id, ids):  # transformers' documented Emu3 layout
        offset = ids.shape[0] - torch.nonzero(ids == wrap)[0, 0]
        if offset % (w + 1) == 0:
            return (vm.eol_token_id,)
        if offset > (w + 1) * h:
            return (tok.eof_token_id,)
        return vm.image_tokens

    out = pipe.hf.generate(
        **inputs, max_new_tokens=h * (w + 1), do_sample=False, prefix_allowed_tokens_fn=allowed,
        guidance_scale=3.0, negative_prompt_ids=neg.input_ids,
        negative_prompt_attention_mask=neg.attention_mask,
    )  # fmt: skip
    body = out[:, inputs.input_ids.shape[1] :].reshape(2, h, w + 1)
    want = vm.convert_bpe2img(body).reshape(2, -1)
    got = generate_image(pipe, prompt=PROMPTS, method=method, temperature=0.0)
    assert torch.equal(got.codes.long(), want.long())


@torch.no_grad()
def chameleon_reference(pipe, prompt: str, steps: int, cfg: float) -> torch.Tensor:
    """Lumina-mGPT's loop by hand: prompt ids, then <racm3:break> and the size tokens fed; at
    each body index k the row end is forced when k mod (W + 1) = W, else only image tokens; CFG
    uncond + s (cond - uncond) with the uncond sequence [<racm3:break>, size, size] + body; the
    whole prefix recomputed every step; codes through the BPE -> code names."""
    hf, tok = pipe.hf, pipe.tokenizer
    w = pipe.grid[1]
    text = f"Generate an image of {pipe.size}x{pipe.size} according to the following prompt:\n"
    size = tok.convert_tokens_to_ids(f"<reserved0{8800 + pipe.size // 32}>")
    head = [tok.convert_tokens_to_ids("<racm3:break>"), size, size]
    cond = [tok.bos_token_id, *tok(text + prompt, add_special_tokens=False)["input_ids"],
            tok.convert_tokens_to_ids("<reserved08706>"), *head]  # fmt: skip
    image = torch.tensor(hf.model.vocabulary_mapping.image_tokens)
    row_end = tok.convert_tokens_to_ids("<reserved08799>")
    body = []

    def last_logits(ids):
        h = hf.model(input_ids=torch.tensor([ids])).last_hidden_state[:, -1]
        return hf.lm_head(h)[0].float()

    for k in range(steps):
        c, u = last_logits(cond + body), last_logits(head + body)
        logits = u + cfg * (c - u)
        if k % (w + 1) == w:
            nxt = row_end
        else:
            nxt = int(image[logits[image].argmax()])
        body.append(nxt)
    names = hf.model.vocabulary_mapping.bpe2img
    return torch.tensor([names[t] for t in body if t != row_end])


def test_chameleon_greedy_equals_the_lumina_loop(dirs):
    pipe = _pipe(dirs, "chameleon")
    got = generate_image(pipe, prompt=PROMPTS, method="sjd_pac", temperature=0.0)
    for i, p in enumerate(PROMPTS):
        want = chameleon_reference(pipe, p, pipe.layout.length, 3.0)
        assert torch.equal(got.codes[i].long(), want)


def test_chameleon_vqgan_loads_taming_names(tmp_path):
    from specops.models.vqgan import VQGANConfig, VQGANDecoder, load_chameleon_vqgan

    ckpt, ours = taming_vqgan(16, seed=3)
    torch.save(ckpt, tmp_path / "vqgan.ckpt")
    vq = load_chameleon_vqgan(tmp_path / "vqgan.ckpt")
    ref = VQGANDecoder(VQGANConfig(n_embed=16, embed_dim=8, z_channels=64, ch=32,
                                   ch_mult=(1, 2), attn_levels=(), l2_codebook=False))  # fmt: skip
    ref.load_state_dict(ours)
    codes = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(vq.decode(codes, (3, 4)), ref.decode(codes, (3, 4)))
    assert not vq.cfg.l2_codebook and vq.cfg.attn_levels == ()


@pytest.mark.parametrize("name", ["janus", "emu3", "chameleon"])
def test_cli_writes_a_png_per_prompt(dirs, tmp_path, capsys, name):
    out = tmp_path / f"{name}.png"
    argv = ["generate", "--model", str(dirs[name]), "--prompt", "a red fox in snow",
            "--method", "sjd", "--out", str(out), "--compare-ar"]  # fmt: skip
    if SIZE[name] is not None:
        argv += ["--image-size", str(SIZE[name])]
    assert cli.main(argv) == 0
    assert Image.open(out).size == (8, 8)  # 4 x 4 codes, tiny VQs upsample 2x
    text = capsys.readouterr().out
    assert f"{name}: 1 image(s) of 8x8 from 4x4 tokens" in text and "\nar " in text


@pytest.mark.parametrize("name", ["janus", "emu3", "chameleon"])
def test_grouping_rows_are_the_codes_of_the_drawn_ids(dirs, name):
    # GSD's codebook is indexed by the ids the loop draws: Janus's head draws VQ codes; Emu3
    # and Chameleon draw BPE ids, each row its code's embedding, NaN for an id without a code
    pipe = _pipe(dirs, name)
    emb = pipe.hf.model.vqmodel.quantize.embedding.weight.detach().float()
    g = pipe.grouping()
    assert (g.window, g.p_threshold, g.d_threshold) == (7, 0.15, 0.5)
    if name == "janus":
        assert g.image_range is None and torch.equal(g.codebook, emb)
        return
    bpe2img = pipe.hf.model.vocabulary_mapping.bpe2img
    start, end = g.image_range
    assert start == min(bpe2img) and end == max(bpe2img) + 1
    for i in range(start, end):
        row = g.codebook[i - start]
        assert torch.equal(row, emb[bpe2img[i]]) if i in bpe2img else bool(row.isnan().all())


@pytest.mark.parametrize("name", ["janus", "emu3", "chameleon"])
def test_sjd_runs_with_grouped_acceptance(dirs, tmp_path, capsys, name):
    out = tmp_path / f"{name}.png"
    argv = ["generate", "--model", str(dirs[name]), "--prompt", "a cat", "--method", "sjd",
            "--gsd", "--out", str(out)]  # fmt: skip
    if SIZE[name] is not None:
        argv += ["--image-size", str(SIZE[name])]
    assert cli.main(argv) == 0
    assert Image.open(out).size == (8, 8)
    r = generate_image(_pipe(dirs, name), prompt="a cat", method="sjd",
                       relax=_pipe(dirs, name).grouping(d_threshold=10.0))  # fmt: skip
    assert r.codes.shape == (1, 16) and int(r.codes.min()) >= 0
    for bad, why in ((["--method", "ar"], "runs with --method sjd, not ar"),
                     (["--method", "sjd", "--temperature", "0"], "needs sampling")):  # fmt: skip
        argv = ["generate", "--model", str(dirs[name]), "--prompt", "a cat", "--gsd", *bad,
                "--out", str(out)]  # fmt: skip
        assert cli.main(argv) == 2
        assert why in capsys.readouterr().err


def test_errors_before_any_work(dirs, tmp_path):
    with pytest.raises(ValueError, match="text-to-image: pass prompt="):
        generate_image(_pipe(dirs, "emu3"), class_id=[3])
    with pytest.raises(ValueError, match="a text prompt is required"):
        generate_image(_pipe(dirs, "janus"))
    with pytest.raises(ValueError, match="do not fit the context of 512"):
        generate_image(load_pipeline(dirs["emu3"], image_size=256), prompt="x")  # 32 x 33 tokens
    with pytest.raises(ValueError, match="no <reserved08816> token"):
        load_pipeline(dirs["chameleon"], image_size=512)
    with pytest.raises(ValueError, match="drafter files are for LlamaGen"):
        load_pipeline(dirs["janus"], drafter="d.pt")
    with pytest.raises(ValueError, match="janus runs ar, sjd and sjd_pac"):
        generate_image(_pipe(dirs, "janus"), prompt="x", method="vvs")
    with pytest.raises(ValueError, match="image_size must be a positive"):
        load_pipeline(dirs["emu3"], image_size=-32)
    import shutil

    bare = shutil.copytree(dirs["chameleon"], tmp_path / "bare")
    shutil.rmtree(bare / "tokenizer")
    with pytest.raises(FileNotFoundError, match="no vqgan.ckpt"):
        load_pipeline(bare)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ValueError, match="found 'hf:bert'"):
        load_pipeline(tmp_path / "other")


def test_chameleon_first_code_law(dirs):
    """The first code of 600 images (sjd_pac, CFG 3, top-k 6 of 16 codes) against the exact
    law of the layout-restricted, guided distribution: chi-square; temperature 1.5 is rejected."""
    from helpers import chi2_pvalue

    pipe = _pipe(dirs, "chameleon")
    res = generate_image(pipe, prompt=["a cat"] * 600, method="sjd_pac", top_k=6, seed=5)
    counts = torch.bincount(res.codes[:, 0], minlength=16).numpy()

    def law(temperature):
        (ids, mask), (neg, neg_mask) = pipe.conditions("a cat", None)
        with torch.no_grad():
            c = pipe.hf.lm_head(pipe.hf.model(input_ids=ids).last_hidden_state[:, -1])[0]
            u = pipe.hf.lm_head(pipe.hf.model(input_ids=neg).last_hidden_state[:, -1])[0]
        image = torch.tensor(pipe.hf.model.vocabulary_mapping.image_tokens)
        lg = (u + 3.0 * (c - u))[image].float() / temperature
        lg = lg.masked_fill(lg < lg.topk(6).values[-1], float("-inf"))
        p = torch.softmax(lg, 0).double()
        codes = torch.tensor([pipe.hf.model.vocabulary_mapping.bpe2img[int(t)] for t in image])
        return torch.zeros(16, dtype=torch.float64).index_put_((codes,), p).numpy()

    assert chi2_pvalue(counts, law(1.0)) > 1e-3
    assert chi2_pvalue(counts, law(1.5)) < 1e-4


def test_an_adapter_reused_for_a_second_run_restarts_its_layout(dirs):
    """HFModel keeps each run's image start: a second run with a shorter prompt puts its row
    ends after its own prompt, not the first run's."""
    from specops import decode
    from specops.hf import HFModel

    pipe = _pipe(dirs, "emu3")
    ad = HFModel(pipe.hf, layout=pipe.layout)
    (ids, mask), _ = pipe.conditions(["a dog running in the rain", "two cats"], None)
    n = mask.sum(1).tolist()
    assert (n[0] - n[1]) % (pipe.grid[1] + 1) != 0  # a stale start would shift the row ends
    eol = pipe.hf.model.vocabulary_mapping.eol_token_id
    for prompt in (ids[:1], ids[1:, : n[1]]):
        toks, _ = decode.ar(ad, prompt, length=pipe.layout.length, temperature=0.0)
        rows = toks.view(pipe.grid[0], pipe.grid[1] + 1)
        assert bool((rows[:, -1] == eol).all()) and not bool((rows[:, :-1] == eol).any())


@pytest.mark.parametrize("name", ["janus", "emu3", "chameleon"])
def test_progress_hook_is_called(dirs, name):
    """generate_image(progress=) reaches the loop through specops.hf.generate (it used to set
    no hook there, which turned the caller's off: no progress for Janus, Emu3, Chameleon)."""
    pipe = _pipe(dirs, name)
    calls = []
    hook = lambda counts, length: calls.append((counts.clone(), length))  # noqa: E731
    generate_image(pipe, prompt=PROMPTS, method="sjd", temperature=0.0, progress=hook)
    assert calls and all(n == pipe.length and c.shape == (2,) for c, n in calls)
    assert (calls[-1][0] >= pipe.length).all()


def test_cli_shows_progress(dirs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECOPS_PROGRESS", "1")
    argv = ["generate", "--model", str(dirs["emu3"]), "--prompt", "a fox", "--method", "sjd",
            "--image-size", "32", "--out", str(tmp_path / "x.png")]  # fmt: skip
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "generate  20/20 tok" in err and "sjd" in err  # 4 rows of 4 codes and a row end


def test_streamer_keeps_an_enclosing_hook(dirs):
    """specops.hf.generate with a streamer and no progress= inside a progress block: both the
    streamer and the block's hook see every step."""
    from specops import decode
    from specops.hf import generate

    pipe = _pipe(dirs, "emu3")
    (ids, _), _ = pipe.conditions("a fox", None)
    seen, calls = [], []

    class Streamer:
        def put(self, t):
            seen.append(t.clone())

        def end(self):
            seen.append(None)

    with decode.progress(lambda counts, length: calls.append(int(counts[0]))):
        seqs, _ = generate(pipe.hf, ids, method="sjd", max_new_tokens=6, do_sample=False,
                           streamer=Streamer(), eos_token_id=[])  # fmt: skip
    assert calls and calls[-1] >= 6 and seen[-1] is None
    assert torch.equal(torch.cat([t.reshape(-1) for t in seen[1:-1]]), seqs[0, ids.shape[1] :])


def test_cli_checks_before_loading(dirs, tmp_path, capsys, monkeypatch):
    import specops.imagegen.pipeline as pipeline

    monkeypatch.setattr(pipeline, "load_pipeline", lambda *a, **k: pytest.fail("loaded"))
    out = ["--out", str(tmp_path / "x.png")]
    cases = [
        (["--model", str(dirs["janus"]), "--image-size", "64"], "image size is fixed"),
        (["--model", str(dirs["emu3"]), "--tokenizer", str(tmp_path / "t")], "no such directory"),
        (["--model", str(dirs["chameleon"]), "--vqgan", str(tmp_path / "v.ckpt")], "no such file"),
        (["--model", str(dirs["emu3"]), "--drafter", str(tmp_path / "d.pt")], "for llamagen"),
        (["--model", str(dirs["janus"]), "--method", "speculative"], "janus runs ar, sjd and"),
        (["--model", str(dirs["emu3"]), "--opt", "window=0"], "window=0 of method 'sjd_pac'"),
    ]
    for argv, words in cases:
        assert cli.main(["generate", "--prompt", "a fox", *argv, *out]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("specops generate: error: ") and words in err, (argv, err)
        assert len(err.strip().splitlines()) == 1
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)
    assert cli.main(["generate", "--prompt", "a fox", "--model", str(dirs["emu3"]), *out]) == 2
    err = capsys.readouterr().err
    assert "needs transformers" in err and "pip install 'specops[images]'" in err
    assert not (tmp_path / "x.png").exists()
