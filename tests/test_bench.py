"""The benchmark runner works in CI-sized mode (numbers are not checked: speed lives in bench/),
and every op of its registry runs there, so a benchmark that calls an op or a binding the old way
fails here rather than on the GPU machine (issue 38: the dispatch suite's binding call)."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from specops.bench.__main__ import REGISTRY


def test_runner_quick_cpu(tmp_path):
    out = tmp_path / "rows.csv"
    # the suite as installed (specops.bench ships in the package): the test runs against a wheel
    # as well as an editable checkout, and never puts the source tree (without _C) on the path
    env = dict(os.environ)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "specops.bench",
            "--device",
            "cpu",
            "--quick",
            "--ops",
            "sample",
            "--csv",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rows = list(csv.DictReader(open(out)))
    backends = {r["backend"] for r in rows if r["op"] == "sample"}
    assert {"cpu", "reference", "torch.multinomial"} <= backends
    assert all(float(r["median_us"]) > 0 for r in rows if r["op"] == "sample")
    assert rows[0]["device"] and rows[0]["torch"] and rows[0]["commit"]


def test_registry_is_every_bench_module():
    import specops.bench as pkg

    here = {p.stem[len("bench_") :] for p in Path(pkg.__file__).parent.glob("bench_*.py")}
    assert set(REGISTRY) == here


# the `sample` op runs in test_runner_quick_cpu, through the command
@pytest.mark.parametrize("op", [op for op in REGISTRY if op != "sample"])
def test_every_bench_op_runs_in_quick_mode(op):
    """Each suite's quick mode on the CPU, as `specops bench --device cpu --quick --ops OP` runs
    it (1-6 s each on the 2-core CI machine)."""
    import importlib

    rows = importlib.import_module(f"specops.bench.bench_{op}").run("cpu", True)
    assert rows and all(r.median_us > 0 or r.op == "ceiling" for r in rows), rows
    names = {r.op for r in rows}
    if op == "e2e_step":
        assert "lumina_sjdpac.step_total" in names and "llamagen_eagle.verify_tree" in names
    if op == "dispatch":
        shapes = {r.shape for r in rows}
        assert {"verify_chain binding alone", "verify_chain", "sample"} <= shapes
