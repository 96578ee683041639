"""The `specops` command (issue 15): help, info, first-run checks before any work, --plot, and
the decode progress hook the demo's progress line uses."""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import subprocess
import sys

import pytest
import torch

import specops
from specops import cli
from specops._progress import Progress
from specops.decode import ar, progress, sjd
from specops.ops._common import backend_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NEUTRAL = os.path.join(ROOT, "tests")  # no specops/ package here
PNG = b"\x89PNG\r\n\x1a\n"


def _run(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "specops", *args],
        capture_output=True,
        text=True,
        timeout=300,
        # not the checkout: `python -m` puts the working directory first on sys.path, and the
        # checkout's source tree (without _C) would shadow an installed wheel
        cwd=_NEUTRAL,
        env=env,
    )


@pytest.mark.parametrize("cmd", [[], ["demo"], ["bench"], ["info"]])
def test_help(cmd):
    res = _run(*cmd, "--help")
    assert res.returncode == 0, res.stderr
    assert "usage: specops" in res.stdout
    if cmd:
        assert f"specops {cmd[0]}" in res.stdout


def test_usage_names_every_command():
    first = cli.__doc__.split("\n")[0]
    assert all(name in first for name in cli.COMMANDS), first
    assert all(name in cli._usage() for name in cli.COMMANDS)


def _parsers(path):
    """(line, passes allow_abbrev=False, is specops.cli_args's class) of each ArgumentParser
    call in a file."""
    text = open(path, encoding="utf-8").read()
    shared = "from specops.cli_args import" in text
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == "ArgumentParser":
                kw = {k.arg: k.value for k in node.keywords}
                off = getattr(kw.get("allow_abbrev"), "value", None) is False
                yield node.lineno, off, shared and isinstance(f, ast.Name)


def test_no_cli_abbreviates_options():
    """argparse's prefix matching turns a mistyped option into another one (``--batch -1`` read
    as ``--batch1``): every parser in specops/, bench/ and scripts/ turns it off, the shared
    specops.cli_args.ArgumentParser by default (issue 47)."""
    from specops.cli_args import ArgumentParser

    assert ArgumentParser().allow_abbrev is False
    bad = []
    for top in ("specops", "bench", "scripts"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                if not f.endswith(".py"):
                    continue
                for line, off, shared in _parsers(path):
                    if not (off or shared):
                        bad.append(f"{os.path.relpath(path, ROOT)}:{line}")
    assert not bad, f"argparse.ArgumentParser without allow_abbrev=False: {bad}"


def test_unknown_command_fails_with_usage():
    res = _run("trian")
    assert res.returncode == 2 and "unknown command 'trian'" in res.stderr


def test_info_json_lists_every_public_op():
    res = _run("info", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["version"] == specops.__version__
    assert data["cpp"] is True
    ops = [n for n in specops.ops.__all__ if callable(getattr(specops, n)) and n[0].islower()]
    ops = [n for n in ops if n != "validation"]
    missing = [n for n in ops if n not in data["backends"]]
    assert not missing, f"ops without a backend entry: {missing}"
    assert data["backends"]["verify_chain"][-1] == "reference"
    assert backend_table() == {k: tuple(v) for k, v in data["backends"].items()}


def _block(monkeypatch, *modules):
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)  # `import m` raises, find_spec raises


def test_demo_without_pillow_stops_before_model_work(monkeypatch, capsys):
    import specops.demo as demo

    _block(monkeypatch, "PIL")

    def no_model(*a, **k):
        raise AssertionError("the demo loaded the model before checking its dependencies")

    monkeypatch.setattr(demo, "load_default", no_model)
    assert cli.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "pillow" in err and "pip install 'specops[demo]'" in err


def test_bench_plot_without_matplotlib_stops_before_benchmarks(monkeypatch, capsys):
    import specops.bench.__main__ as runner

    _block(monkeypatch, "matplotlib")
    monkeypatch.setattr(runner, "_bench_module", lambda name: pytest.fail("benchmark ran"))
    assert cli.main(["bench", "--ops", "sample", "--plot", "x"]) == 2
    assert "pip install 'specops[plot]'" in capsys.readouterr().err


ROWS = [
    ("ceiling", "copy_gbps", "torch", "0", "", "20.0", ""),
    ("sample", "B=16 V=32000", "cpu", "500", "", "4.1", "reference=10.00;torch.multinomial=3.50"),
    ("sample", "B=16 V=32000", "reference", "5000", "", "0.4", ""),
    ("sample", "B=2 V=65536", "cpu", "100", "", "5.2", "reference=8.00"),
    ("verify_chain", "B=4 K=4", "cuda", "10", "", "", "flashinfer=1.30;cpu=40.00"),
    ("verify_chain", "B=4 K=4", "cpu", "400", "", "", "flashinfer=0.03"),
]


def _write_csv(path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "shape", "backend", "median_us", "p20_us", "p80_us", "gbps", "ratios"])
        for op, shape, be, t, _, gb, ratios in ROWS:
            w.writerow([op, shape, be, t, t, t, gb, ratios])


def test_plot_series_and_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    from specops.bench import plot

    src = tmp_path / "rows.csv"
    _write_csv(src)
    rows = plot.read_csv(str(src))
    ratios = plot.ratio_series(rows)
    # one series per op, from the compiled backend's row (cuda before cpu)
    assert ratios == {
        "sample (cpu)": {
            "B=16 V=32000": {"reference": 10.0, "torch.multinomial": 3.5},
            "B=2 V=65536": {"reference": 8.0},
        },
        "verify_chain (cuda)": {"B=4 K=4": {"flashinfer": 1.3, "cpu": 40.0}},
    }
    bw, ceiling = plot.bandwidth_series(rows)
    assert ceiling == 20.0
    assert bw == {
        "sample": {"B=16 V=32000": {"cpu": 4.1, "reference": 0.4}, "B=2 V=65536": {"cpu": 5.2}}
    }
    out = tmp_path / "plots"
    assert cli.main(["bench", "--plot", str(out), "--from-csv", str(src)]) == 0
    for name in ("ratios.png", "bandwidth.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG and len(data) > 5000


def test_bench_run_then_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    res = _run("bench", "--device", "cpu", "--quick", "--ops", "sample", "--plot", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "ratios.png").read_bytes()[:8] == PNG


def test_progress_line_only_when_forced_or_tty(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setenv("SPECOPS_PROGRESS", "0")
    p = Progress("x", 10, stream=buf)
    p.update(5, force=True)
    assert buf.getvalue() == ""
    monkeypatch.delenv("SPECOPS_PROGRESS")
    Progress("x", 10, stream=buf).update(5, force=True)  # StringIO is not a TTY
    assert buf.getvalue() == ""
    monkeypatch.setenv("SPECOPS_PROGRESS", "1")
    p = Progress("demo", 10, unit="tokens", stream=buf)
    p.update(10, note="ar")
    assert "demo  10/10 tokens" in buf.getvalue() and "ar" in buf.getvalue()
    p.close()
    assert buf.getvalue().endswith("\r")


@pytest.fixture(scope="module")
def model():
    from specops.models.loading import load_default

    return load_default(device="cpu")


@pytest.mark.parametrize("method", ["ar", "sjd"])
def test_decode_progress_hook(model, method):
    calls = []
    classes = torch.tensor([0, 3])
    run = (
        (lambda: ar(model.target, classes, length=12))
        if method == "ar"
        else (lambda: sjd(model.target, classes, window=4, length=12))
    )
    with progress(lambda counts, length: calls.append((counts.clone(), length))):
        tokens, _ = run()
    with progress(None):
        again, _ = run()
    assert torch.equal(tokens, again), "the hook changed the tokens"
    assert calls and all(length == 12 for _, length in calls)
    counts = torch.stack([c for c, _ in calls])
    assert counts.shape[1] == 2 and (counts[1:] >= counts[:-1]).all(), "counts must not decrease"
    assert (counts[-1] >= 12).all(), "the last call must report every request finished"
    if method == "ar":
        assert len(calls) == 12  # one per token


def test_decode_streaming_hook(model):
    """progress(hook, tokens=True): the hook sees each request's tokens so far; what it saw
    never changes later and ends as the returned tokens."""
    seen = []
    with progress(lambda c, n, emitted: seen.append((c.clone(), emitted.clone())), tokens=True):
        tokens, _ = sjd(model.target, torch.tensor([1, 4]), window=4, length=12)
    assert seen and all(e.shape == (2, 12) for _, e in seen)
    for (c0, e0), (_c1, e1) in zip(seen, seen[1:]):
        for b in range(2):
            k = min(int(c0[b]), 12)
            assert torch.equal(e0[b, :k], e1[b, :k]), "a streamed token changed later"
    assert torch.equal(seen[-1][1], tokens)


def test_ar_progress_with_eos_reports_the_last_token(model, monkeypatch):
    """With EOS ids set (none is ever emitted here), AR's stop check feeds the hook: one call per
    token, the last with every request finished."""
    monkeypatch.setattr(model.target, "eos_token_ids", [10**6], raising=False)
    calls = []
    with progress(lambda counts, length: calls.append(counts.clone())):
        ar(model.target, torch.tensor([0, 3]), length=12)
    assert len(calls) == 12 and (calls[-1] >= 12).all()


# -- issue 38: every bad value is one line `specops <cmd>: error: ...`, exit 2, before any work ---


def _one_line_error(capsys, cmd: str, words: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specops {cmd}: error: "), err
    assert words in lines[0], (words, err)
    return lines[0]


@pytest.fixture
def no_demo_model(monkeypatch):
    import specops.demo as demo

    def no_model(*a, **k):
        raise AssertionError("the demo loaded the model before checking its arguments")

    monkeypatch.setattr(demo, "load_default", no_model)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--threads", "0"], "--threads: must be an int in [1, 1024], got 0"),
        (["--device", "tpu"], "--device: expected auto, cpu, cuda or cuda:N, got 'tpu'"),
        (["--classes", "99999"], "--classes: the embedded model has classes 0-9, got [99999]"),
        (["--classes", "3", "-3"], "--classes: must be an int >= 0, got -3"),
        (["--classes"], "--classes: expected at least one argument"),
        (["--methods"], "--methods: expected at least one argument"),
        (["--methods", "sjd", "eagle"], "--methods: invalid choice: 'eagle'"),
        (["--temperature", "-1"], "--temperature: must be a finite number >= 0, got -1"),
        (["--temperature", "nan"], "--temperature: must be a finite number >= 0, got nan"),
        (["--cfg-scale", "inf"], "--cfg-scale: must be a finite number > 0, got inf"),
        (["--cfg-scale", "0"], "--cfg-scale: must be a finite number > 0, got 0"),
        (["--seed", str(2**64)], f"--seed: must be an int in [0, {2**63 - 1}], got {2**64}"),
        (["--seed", "-1"], "--seed: must be an int in [0"),
        (["--out", "/proc/x/y.png"], "--out /proc/x/y.png: cannot write into /proc"),
        (["--out", "OUT/grid.jpg"], "the file name must end in .png"),
        (["--out", "OUT"], "OUT: the file name must end in .png"),
        (["--out", "OUT/adir.png"], "OUT/adir.png is a directory"),
        (["--out", "OUT/file.txt/y.png"], "file.txt is a file, so OUT/file.txt/y.png cannot"),
        (["--json", "/proc/x/t.json"], "--json /proc/x/t.json: cannot write into /proc"),
        # no prefix matching: --batch is not --batch1 (issue 47)
        (["--batch", "-1"], "unrecognized arguments: --batch -1"),
        (["--thread", "2"], "unrecognized arguments: --thread 2"),
    ],
)
def test_demo_rejects_bad_values_before_any_work(
    argv, words, tmp_path, capsys, no_demo_model, monkeypatch
):
    out = tmp_path / "out"
    (out / "adir.png").mkdir(parents=True)
    (out / "file.txt").write_text("x")
    before = sorted(tmp_path.rglob("*"))
    argv = [str(out) + a[3:] if a.startswith("OUT") else a for a in argv]
    words = words.replace("OUT", str(out))
    if "--out" not in argv:
        argv += ["--out", str(out / "new" / "demo.png")]
    assert cli.main(["demo", *argv]) == 2
    _one_line_error(capsys, "demo", words)
    assert sorted(tmp_path.rglob("*")) == before, "a failed check left something behind"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_demo_cuda_without_a_gpu_is_one_line(capsys, no_demo_model):
    assert cli.main(["demo", "--device", "cuda"]) == 2
    _one_line_error(capsys, "demo", "--device: 'cuda', but this machine has no CUDA GPU")


def _stats(method, passes, wall, compression):
    from specops.decode.stats import Stats

    st = Stats(method, batch=1, tokens=256, target_passes=passes, wall_s=wall)
    st.passes_per_request = [256 / compression]
    return st


def test_demo_table_leads_with_the_wall_clock_speedup():
    """The demo's rows: speed-up against AR's wall time of the same run first, then the step
    compression, and the step cost that reconciles the two; the words follow the numbers."""
    from specops.demo import explain, format_table

    rows = [_stats("ar", 256, 1.0, 1.0), _stats("spec-chain", 128, 2.5, 3.5)]
    table = format_table(rows, rows[0]).splitlines()
    assert table[0].split()[:5] == ["method", "speed-up", "vs", "AR", "(wall)"]
    assert table[3].split()[:3] == ["spec-chain", "0.40x", "3.50"]
    assert "5.00x" in table[3]  # a step costs 2.5 / 128 s against AR's 1 / 256 s
    text = explain(rows, [], 10, 0.92)
    assert "Batch 10: no method beats AR (fastest: spec-chain, 0.40x)" in text.replace("\n", " ")
    single = [_stats("ar", 256, 1.0, 1.0), _stats("sjd", 64, 0.5, 4.0)]
    text = explain(rows, single, 10, 0.92).replace("\n", " ")
    assert (
        "sjd 2.00x (step cost 2.0x)" in text and "this is where speculative decoding pays" in text
    )


def test_demo_end_to_end_on_one_prompt(tmp_path, capsys):
    out = tmp_path / "d" / "grid.png"
    argv = ["demo", "--classes", "2", "--methods", "sjd", "--batch1", "sjd", "--out", str(out),
            "--json", str(tmp_path / "d" / "t.json")]  # fmt: skip
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "speed-up vs AR (wall)" in text and "batch 1 (class 2 alone" in text
    assert out.read_bytes()[:8] == PNG and (tmp_path / "d" / "grid_accept.png").exists()
    record = json.loads((tmp_path / "d" / "t.json").read_text())
    assert [r["method"] for r in record["rows"]] == ["ar", "sjd"]  # AR always: the baseline
    assert record["rows"][0]["speedup_vs_ar_wall"] == 1.0 and len(record["batch1_rows"]) == 2


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--ops", "nosuchop"], "--ops: unknown op 'nosuchop'; choose from sample,verify"),
        (["--ops", "sample,nope,x"], "--ops: unknown ops 'nope', 'x'"),
        (["--ops", ","], "--ops: no op named"),
        (["--device", "tpu"], "--device: expected cpu or cuda, got 'tpu'"),
        (["--plot", "P", "--from-csv", "MISSING.csv"], "--from-csv MISSING.csv: does not exist"),
        (["--plot", "P", "--from-csv", "BAD.csv"], "not a CSV that specops bench wrote"),
        (["--from-csv", "BAD.csv"], "--from-csv needs --plot"),
        (["--csv", "/proc/x/rows.csv", "--ops", "sample"], "--csv /proc/x/rows.csv: cannot"),
        (["--plot", "BAD.csv", "--ops", "sample"], "BAD.csv is a file, not a directory"),
    ],
)
def test_bench_rejects_bad_values_before_any_benchmark(argv, words, tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    import specops.bench.__main__ as runner

    monkeypatch.setattr(runner, "_bench_module", lambda name: pytest.fail("benchmark ran"))
    (tmp_path / "BAD.csv").write_text("a,b\n1,2\n")
    before = sorted(tmp_path.rglob("*"))
    fix = {
        "P": tmp_path / "plots",
        "MISSING.csv": tmp_path / "no.csv",
        "BAD.csv": tmp_path / "BAD.csv",
    }
    argv = [str(fix.get(a, a)) for a in argv]
    for k, v in fix.items():
        words = words.replace(k, str(v))
    assert cli.main(["bench", *argv]) == 2
    _one_line_error(capsys, "bench", words)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_bench_cuda_without_a_gpu_is_one_line(capsys, monkeypatch):
    import specops.bench.__main__ as runner

    monkeypatch.setattr(runner, "_bench_module", lambda name: pytest.fail("benchmark ran"))
    assert cli.main(["bench", "--device", "cuda", "--ops", "sample"]) == 2
    _one_line_error(capsys, "bench", "--device: 'cuda', but this machine has no CUDA GPU")
