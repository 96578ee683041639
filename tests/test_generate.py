"""``specops generate`` / ``specops.imagegen.generate_image`` on tiny random checkpoints in the
released layouts: the PNG of the expected size, the step table, greedy tokens equal to the
official loop, lossless sampling through this path, clear errors before any work."""

from __future__ import annotations

import pytest
import torch
from helpers import chi2_pvalue
from PIL import Image
from test_llamagen import official_greedy, official_logits

from specops import cli
from specops.imagegen import generate_image, load_pipeline
from specops.imagegen.tiny import GRID, C, V, llamagen_dir, official_gpt
from specops.models.drafter import Drafter


@pytest.fixture(scope="module")
def lg_dir(tmp_path_factory):
    return llamagen_dir(tmp_path_factory.mktemp("llamagen"))


def _with_drafter(path):
    pipe = load_pipeline(path)
    torch.manual_seed(0)  # the drafter's init: the same whatever ran before
    d = Drafter(pipe.model.cfg)
    torch.save({"state": d.state_dict(), "step_dim": 32, "max_step": 3}, path / "drafter.pt")
    return path


def test_cli_writes_pngs_and_the_table(lg_dir, tmp_path, capsys):
    out = tmp_path / "img" / "fox.png"
    argv = ["generate", "--model", str(lg_dir), "--class-id", "3", "7", "--method", "sjd_pac",
            "--out", str(out), "--compare-ar", "--opt", "window=24"]  # fmt: skip
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    for i in range(2):
        img = Image.open(out.with_name(f"fox_{i}.png"))
        assert img.size == (2 * GRID, 2 * GRID) and img.mode == "RGB"
    assert "tokens/pass" in text and "\nsjd-pac " in text and "\nar " in text and "vs AR" in text
    assert "'cfg_scale': 4.0" in text and "'top_k': 2000" in text  # LlamaGen's defaults


def test_cli_errors_are_one_line(lg_dir, tmp_path, capsys):
    cases = [
        (["--model", str(tmp_path / "none"), "--class-id", "1"], "does not exist"),
        (["--model", str(tmp_path), "--class-id", "1"], "no supported checkpoint"),
        (["--model", str(lg_dir), "--prompt", "a fox"], "class ids"),
        (["--model", str(lg_dir), "--class-id", str(C)], rf"integers in \[0, {C}\)"),
        (["--model", str(lg_dir), "--class-id", "1", "--method", "vvs"], "needs a drafter"),
        (["--model", str(lg_dir), "--class-id", "1", "--opt", "windw=3"], "takes the options"),
        (["--model", str(lg_dir), "--class-id", "1", "--image-size", "40"], "multiple of 16"),
        (["--model", str(lg_dir), "--class-id", "1", "--vqgan", "v.ckpt"], "takes no 'vqgan'"),
        (["--model", str(lg_dir), "--class-id", "1", "--temperature", "-1"], "temperature must"),
        (["--model", str(lg_dir), "--class-id", "1", "--top-p", "0"], r"top_p must lie in \(0"),
        (["--model", str(lg_dir), "--class-id", "1", "--cfg", "nan"], "cfg_scale must be"),
        (["--model", str(lg_dir), "--class-id", "1", "--opt", "window=abc"],
         "option window='abc' of method 'sjd_pac' must be a int"),
        (["--model", str(lg_dir), "--class-id", "1", "--drafter", str(lg_dir / "vq_ds16_c2i.pt"),
          "--method", "speculative"], "expected a specops.models.Drafter"),
    ]  # fmt: skip
    for argv, msg in cases:
        assert cli.main(["generate", *argv, "--out", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err
        assert "specops generate: error:" in err and "Traceback" not in err
        assert __import__("re").search(msg, err), (argv, err)
    assert not (tmp_path / "x.png").exists()
    if not torch.cuda.is_available():
        assert cli.main(["generate", "--model", str(lg_dir), "--class-id", "1", "--device",
                         "cuda", "--out", str(tmp_path / "x.png")]) == 2  # fmt: skip
        assert "no CUDA GPU" in capsys.readouterr().err


def test_a_loaded_pipeline_takes_no_device(lg_dir):
    with pytest.raises(ValueError, match="this Pipeline is already loaded"):
        generate_image(load_pipeline(lg_dir), class_id=[1], device="cpu")


def test_directory_errors(tmp_path):
    d = llamagen_dir(tmp_path / "two")
    torch.save({"model": official_gpt(1)}, d / "c2i_U_64.pt")
    with pytest.raises(ValueError, match="one GPT .pt and one vq"):
        load_pipeline(d)
    d = llamagen_dir(tmp_path / "mismatch", vocab=V)
    torch.save({"model": official_gpt(0, vocab=V // 2)}, d / f"c2i_T_{GRID * 16}.pt")
    with pytest.raises(ValueError, match="image codes but the VQ codebook"):
        load_pipeline(d)


@pytest.mark.parametrize("method", ["ar", "sjd", "sjd_pac", "speculative"])
def test_greedy_codes_equal_the_official_loop(lg_dir, tmp_path, method):
    import shutil

    d = _with_drafter(shutil.copytree(lg_dir, tmp_path / "m"))
    want = official_greedy(official_gpt(), [3, 7], GRID * GRID, cfg_scale=4.0)
    res = generate_image(d, class_id=[3, 7], method=method, temperature=0.0)
    assert torch.equal(res.codes.long(), want)
    assert res.stats.tokens == GRID * GRID and len(res.images) == 2


def test_vvs_runs_with_lantern_over_the_codebook(lg_dir, tmp_path):
    import shutil

    d = _with_drafter(shutil.copytree(lg_dir, tmp_path / "m"))
    res = generate_image(d, class_id=[1], method="vvs", delta=0.1, lantern_k=4, schedule="interval")
    assert res.codes.shape == (1, GRID * GRID) and bool(((res.codes >= 0) & (res.codes < V)).all())
    with pytest.raises(TypeError, match="takes the options"):
        generate_image(d, class_id=[1], method="sjd", delta=0.1)


def _exact_first_two(sd, label, cfg, top_k, temperature=1.0, grid=2):
    """p(x0, x1 | class) of the official model with CFG, temperature and top-k: [V, V]."""

    def probs(tokens):
        b = tokens.shape[0]
        lg = official_logits(sd, torch.full((b,), label), tokens, grid)[:, -1]
        un = official_logits(sd, torch.full((b,), C), tokens, grid)[:, -1]
        lg = (un + (lg - un) * cfg) / temperature
        kth = lg.topk(top_k, -1).values[:, -1:]
        return torch.softmax(lg.masked_fill(lg < kth, float("-inf")), -1).double()

    p0 = probs(torch.zeros(1, 0, dtype=torch.long))[0]
    p1 = probs(torch.arange(V)[:, None])  # row x0: p(x1 | x0)
    return p0[:, None] * p1


@pytest.mark.parametrize("method", ["sjd_pac", "speculative"])
def test_sampling_is_lossless_through_generate_image(lg_dir, tmp_path, method):
    """The joint law of the first two codes (V^2 = 4096 cells, top-k 6 keeps 36) of 800 2x2
    images against the exact one: a chi-square p-value; the same law at temperature 1.6 (the
    same support) is rejected, so a kernel that drew from a wrong law fails."""
    import shutil

    d = _with_drafter(shutil.copytree(lg_dir, tmp_path / "m"))
    pipe = load_pipeline(d, image_size=32)  # grid 2: 4 codes an image
    n, top_k, cfg = 800, 6, 2.0
    res = generate_image(pipe, class_id=[5] * n, method=method, top_k=top_k, cfg_scale=cfg, seed=11)
    x = res.codes[:, :2].long()
    counts = torch.bincount(x[:, 0] * V + x[:, 1], minlength=V * V).numpy()
    exact = _exact_first_two(official_gpt(), 5, cfg, top_k).flatten().numpy()
    assert chi2_pvalue(counts, exact) > 1e-3
    flatter = _exact_first_two(official_gpt(), 5, cfg, top_k, temperature=1.6).flatten().numpy()
    assert chi2_pvalue(counts, flatter) < 1e-4


def test_t2i_codes_equal_the_official_masked_loop(tmp_path):
    """LlamaGen t2i through the pipeline: T5 features as sample_t2i.py makes them (max-length
    padding, then valid rows moved to the end), the official 120-window masked loop with CFG
    7.5 (the t2i default), greedy; and VVS runs on it with a drafter."""
    pytest.importorskip("transformers")
    from test_llamagen import official_t2i_greedy

    from specops.imagegen.tiny import llamagen_t2i_dir, official_t2i_gpt

    d = llamagen_t2i_dir(tmp_path / "t2i", tokens=8)
    pipe = load_pipeline(d)
    prompts = ["a fox", "a red fox in the snow"]
    enc = pipe.t5_tokenizer(prompts, max_length=8, padding="max_length", truncation=True,
                            return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        feats = pipe.t5(**enc).last_hidden_state
    mask = enc["attention_mask"]
    n = mask.sum(1)
    left = torch.stack([torch.cat([f[k:], f[:k]]) for f, k in zip(feats, n.tolist())])
    lmask = mask.flip(-1)
    left = left * lmask[..., None]
    toks = official_t2i_greedy(official_t2i_gpt(tokens=8, caption_dim=32), left, lmask, 7.5)
    res = generate_image(pipe, prompt=prompts, method="sjd_pac", temperature=0.0)
    assert torch.equal(res.codes.long(), toks) and res.settings["top_k"] == 1000
    with pytest.raises(ValueError, match="take a text prompt"):
        generate_image(pipe, class_id=[3])
    d = _with_drafter(d)
    res = generate_image(d, prompt=prompts, method="vvs", schedule="interval")
    assert res.codes.shape == (2, GRID * GRID)
