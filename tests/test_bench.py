"""The benchmark runner works in CI-sized mode (numbers are not checked: speed lives in bench/)."""

import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the bench package lives in the checkout
    sys.path.insert(0, ROOT)


def test_runner_quick_cpu(tmp_path):
    out = tmp_path / "rows.csv"
    env = dict(os.environ, PYTHONPATH=ROOT)  # the bench package lives in the checkout
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
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


def test_e2e_step_suite_runs_on_tiny_shapes():
    from bench import bench_e2e_step

    rows = bench_e2e_step.run("cpu", quick=True)
    names = {r.op for r in rows}
    assert "lumina_sjdpac.step_total" in names and "llamagen_eagle.verify_tree" in names
    assert all(r.median_us > 0 for r in rows)
