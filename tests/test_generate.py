"""``specops generate`` / ``specops.imagegen.generate_image`` on tiny random checkpoints in the
released layouts: the PNG of the expected size, the step table, greedy tokens equal to the
official loop, lossless sampling through this path, clear errors before any work."""

from __future__ import annotations

import re

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
            "--out", str(out), "--compare-ar", "--opt", "window=16", "--opt", "branch=2",
            "--opt", "depth=2"]  # fmt: skip
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    for i in range(2):
        img = Image.open(out.with_name(f"fox_{i}.png"))
        assert img.size == (2 * GRID, 2 * GRID) and img.mode == "RGB"
    assert "tokens/pass" in text and "\nsjd-pac " in text and "\nar " in text and "vs AR" in text
    assert "'cfg_scale': 4.0" in text and "'top_k': 2000" in text  # LlamaGen's defaults


def _one_line(capsys, pattern):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specops generate: error: "), err
    assert re.search(pattern, lines[0]), (pattern, err)


# (argv after --model DIR, the error's words): every check before loading (issue 38)
BEFORE_LOAD = [
    (["--prompt", "x", "--model", "NONE"], "NONE does not exist"),
    (["--class-id", "1", "--model", "EMPTY"], "EMPTY holds no supported checkpoint"),
    (["--class-id", "1", "--model", "FILE"], "model FILE is a file; pass the checkpoint directory"),
    (["--class-id", "-3"], "--class-id: must be an int >= 0, got -3"),
    (["--class-id", "1", "--method", "vvs"], "needs a drafter"),
    (["--class-id", "1", "--opt", "windw=3"], "takes the options"),
    (["--class-id", "1", "--opt", "window=abc"], "window='abc' of method 'sjd_pac' must be a int"),
    (
        ["--class-id", "1", "--opt", "window=-5"],
        r"window=-5 of method 'sjd_pac' must be an int in \[1, 16384\]",
    ),
    (["--class-id", "1", "--opt", "window=0"], "window=0 of method 'sjd_pac' must be an int in"),
    (
        ["--class-id", "1", "--opt", "window=100000"],
        r"window=100000 .* \[1, 16384\] \(Tree.MAX_NODES",
    ),
    (
        [
            "--class-id",
            "1",
            "--method",
            "speculative",
            "--drafter",
            "DRAFTER",
            "--opt",
            "num_draft=0",
        ],
        "option num_draft=0 of method 'speculative' must be an int in",
    ),
    (["--class-id", "1", "--method", "sjd", "--opt", "window=2.5"], "must be a int"),
    (["--class-id", "1", "--vqgan", "v.ckpt"], "--vqgan is for chameleon, not llamagen"),
    (
        ["--class-id", "1", "--drafter", "NONE", "--method", "speculative"],
        "--drafter NONE: no such",
    ),
    (["--class-id", "1", "--temperature", "-1"], "--temperature: must be a finite number >= 0"),
    (["--class-id", "1", "--top-p", "0"], "--top-p: must be a finite number > 0 and <= 1"),
    (["--class-id", "1", "--cfg", "nan"], "--cfg: must be a finite number > 0, got nan"),
    (["--class-id", "1", "--top-k", "-1"], "--top-k: must be an int >= 0, got -1"),
    (["--class-id", "1", "--seed", str(2**64)], "--seed: must be an int in"),
    (["--class-id", "1", "--device", "tpu"], "--device: expected cpu, cuda or cuda:N"),
    (["--class-id", "1", "--out", "OUT/x.jpg"], r"OUT/x.jpg: the file name must end in \.png"),
    (["--class-id", "1", "--out", "OUT/adir.png"], "--out OUT/adir.png: OUT/adir.png is a"),
    (["--class-id", "1", "2", "--out", "OUT/adir.png"], "OUT/adir_1.png is a directory"),
    (["--class-id", "1", "--out", "OUT/file.txt/x.png"], "OUT/file.txt is a file, so"),
    (["--class-id", "1", "--out", "/proc/x/y.png"], "--out /proc/x/y.png: cannot write into /proc"),
]

# checks that need the loaded model, still before any decoding
AFTER_LOAD = [
    (["--prompt", "a fox"], "class ids"),
    (["--class-id", str(C)], rf"integers in \[0, {C}\)"),
    (["--class-id", "1", "--image-size", "40"], "multiple of 16"),
    (
        ["--class-id", "1", "--method", "sjd", "--opt", "window=17"],
        "option window=17 of method 'sjd' must be at most the 16 tokens of this 4x4 image",
    ),
    (
        ["--class-id", "1", "--drafter", "VQ", "--method", "speculative"],
        "expected a specops.models.Drafter",
    ),
]


def _fill(argv, words, lg_dir, tmp_path):
    """The placeholders of a case -> paths under tmp_path (OUT holds a directory adir.png and
    adir_1.png and a file file.txt)."""
    out = tmp_path / "out"
    for d in ("adir.png", "adir_1.png"):
        (out / d).mkdir(parents=True, exist_ok=True)
    (out / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir(exist_ok=True)
    vq = lg_dir / "vq_ds16_c2i.pt"
    names = {"NONE": tmp_path / "none", "EMPTY": tmp_path / "empty", "FILE": out / "file.txt",
             "VQ": vq, "DRAFTER": vq, "OUT": out}  # fmt: skip
    argv = list(argv)
    if "--model" not in argv:
        argv = ["--model", str(lg_dir), *argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "new" / "dir" / "x.png")]
    for k, v in names.items():
        argv = [a.replace(k, str(v)) if not a.startswith("--") else a for a in argv]
        words = words.replace(k, re.escape(str(v)) if "\\" in words else str(v))
    return argv, words


@pytest.mark.parametrize("argv, words", BEFORE_LOAD)
def test_cli_errors_before_loading(argv, words, lg_dir, tmp_path, capsys, monkeypatch):
    import specops.imagegen.pipeline as pipeline

    monkeypatch.setattr(pipeline, "load_pipeline", lambda *a, **k: pytest.fail("loaded"))
    argv, words = _fill(argv, words, lg_dir, tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert cli.main(["generate", *argv]) == 2
    _one_line(capsys, words)
    assert sorted(tmp_path.rglob("*")) == before, "a failed check left something behind"


@pytest.mark.parametrize("argv, words", AFTER_LOAD)
def test_cli_errors_before_decoding(argv, words, lg_dir, tmp_path, capsys, monkeypatch):
    import specops.imagegen.base as base

    monkeypatch.setattr(base.Pipeline, "run", lambda *a, **k: pytest.fail("decoded"))
    argv, words = _fill(argv, words, lg_dir, tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert cli.main(["generate", *argv]) == 2
    _one_line(capsys, words)
    assert sorted(tmp_path.rglob("*")) == before, "a failed run left its --out directory behind"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_cli_cuda_without_a_gpu(lg_dir, tmp_path, capsys):
    argv = ["generate", "--model", str(lg_dir), "--class-id", "1", "--device", "cuda"]
    assert cli.main([*argv, "--out", str(tmp_path / "x.png")]) == 2
    _one_line(capsys, "--device: 'cuda', but this machine has no CUDA GPU")


def test_without_pillow_nothing_runs(lg_dir, tmp_path, capsys, monkeypatch):
    """pillow comes with the `images` extra: missing, the command says so before loading and the
    Python API before decoding (it used to decode everything, then fail on `import PIL`)."""
    import specops.imagegen.base as base
    import specops.imagegen.pipeline as pipeline

    pipe = load_pipeline(lg_dir)
    monkeypatch.setitem(__import__("sys").modules, "PIL", None)
    monkeypatch.setattr(pipeline, "load_pipeline", lambda *a, **k: pytest.fail("loaded"))
    monkeypatch.setattr(base.Pipeline, "run", lambda *a, **k: pytest.fail("decoded"))
    argv = ["generate", "--model", str(lg_dir), "--class-id", "1", "--out", str(tmp_path / "x.png")]
    assert cli.main(argv) == 2
    _one_line(capsys, r"needs pillow, not installed here: pip install 'specops\[images\]'")
    from specops._optional import MissingDependency

    with pytest.raises(MissingDependency, match=r"specops\[images\]"):
        generate_image(pipe, class_id=[1])


def test_generate_progress_hook(lg_dir):
    calls = []
    hook = lambda counts, length: calls.append((counts.clone(), length))  # noqa: E731
    generate_image(lg_dir, class_id=[1, 2], method="sjd", window=4, temperature=0.0, progress=hook)
    assert calls and all(n == GRID * GRID for _, n in calls)
    assert (calls[-1][0] >= GRID * GRID).all()


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
