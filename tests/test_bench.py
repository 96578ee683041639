"""The benchmark runner works in CI-sized mode (numbers are not checked: speed lives in bench/)."""

import csv
import os
import subprocess
import sys


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


def test_e2e_step_suite_runs_on_tiny_shapes():
    from specops.bench import bench_e2e_step

    rows = bench_e2e_step.run("cpu", quick=True)
    names = {r.op for r in rows}
    assert "lumina_sjdpac.step_total" in names and "llamagen_eagle.verify_tree" in names
    assert all(r.median_us > 0 for r in rows)
