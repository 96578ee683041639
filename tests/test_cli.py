"""The `specops` command (issue 15): help, info, first-run checks before any work, --plot, and
the decode progress hook the demo's progress line uses."""

from __future__ import annotations

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
