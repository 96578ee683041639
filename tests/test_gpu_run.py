"""bench/gpu_run.sh rehearsed on the CPU (DRY_RUN=1), so a leased GPU's minutes are not lost to a
script bug: stage parsing, paths, the installed package, the test suite's collection, every
benchmark's CSV header and row schema (the same ops, --device cpu --quick), the demo's argument
parsing and the sanitizer stage's test selection."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "gpu_run.sh")
OPS = "sample,verify,jacobi,probs,tree_attention,kv,features,e2e_step"  # gpu_run.sh's default


def _run(out, stages, **env):
    e = dict(os.environ, DRY_RUN="1", PY=sys.executable, **env)
    e.pop("SPECOPS_TRITON_SPECS", None)
    for k in ("BENCH_OPS", "DEADLINE", "PARALLEL", "STAGES"):  # a GPU session's settings
        if k not in env:
            e.pop(k, None)
    return subprocess.run(
        ["bash", SCRIPT, str(out), stages], cwd=ROOT, env=e, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def _drives_this_checkout():
    """gpu_run.sh drives the checkout it sits in (its build stage makes an editable install):
    with specops installed from a wheel, its `python -m pytest` / `-m bench` from the checkout
    would import the source tree, not the wheel."""
    import specops

    return os.path.dirname(os.path.dirname(os.path.abspath(specops.__file__))) == ROOT


@pytest.mark.skipif(not _drives_this_checkout(), reason="specops is not this checkout's install")
def test_dry_run_every_stage(tmp_path):
    r = _run(tmp_path, "build,tests,bench,demo,sanitize,profile")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "build=0 tests=0 bench=0 demo=0 sanitize=0 profile=0" in r.stdout, r.stdout[-3000:]
    assert "whole step" in (tmp_path / "profile.log").read_text()
    assert os.path.exists(tmp_path / "build_info.json")
    with open(tmp_path / "bench.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    from specops.bench.harness import CSV_FIELDS, check_csv

    assert list(rows[0]) == CSV_FIELDS
    assert check_csv(str(tmp_path / "bench.csv")) == len(rows)
    ops = {r["op"] for r in rows}
    # every op of the default list wrote rows (e2e_step rows are named after the method)
    for op in ("sample", "verify_chain", "verify_jacobi", "probs_from_logits", "tree_attention",
               "commit_kv"):  # fmt: skip
        assert any(o.startswith(op) for o in ops), (op, sorted(ops))
    assert "collected" in (tmp_path / "tests.log").read_text()


def test_unknown_stage_is_an_error(tmp_path):
    r = _run(tmp_path, "build,bnech")
    assert r.returncode == 2
    assert "unknown stage 'bnech'" in r.stderr


def test_check_csv_rejects_a_broken_row(tmp_path):
    from specops.bench.harness import CSV_FIELDS, check_csv

    p = tmp_path / "b.csv"
    good = ["sample", "B=1", "cpu", "1.0", "0.9", "1.1", "", "ref=2.0", "", "cpu", "2.13",
            "", "3.9", "abc", "2026"]  # fmt: skip
    bad = list(good)
    bad[3] = "nan"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        w.writerow(good)
    assert check_csv(str(p)) == 1
    with open(p, "a", newline="") as f:
        csv.writer(f).writerow(bad)
    with pytest.raises(ValueError, match="median_us"):
        check_csv(str(p))


def test_check_csv_takes_ceilings_and_absent_peers_but_not_zero_times(tmp_path):
    """A GPU run writes the ceilings and each missing peer as rows without a time (the H200 run of
    940f467 failed its CSV check on them); any other row with a zero time is still an error."""
    from specops.bench.harness import CSV_FIELDS, check_csv

    env = ["NVIDIA H200", "2.11", "13.0", "3.6.0", "abc", "2026"]
    ceiling = ["ceiling", "copy_gbps", "torch", "0.00", "0.00", "0.00", "4204.3", "", "copy"] + env
    absent = ["verify_chain", "-", "flashinfer", "0.00", "0.00", "0.00", "", "", "n/a"] + env
    zero = ["verify_chain", "B=1", "cuda", "0.00", "0.00", "0.00", "", "", ""] + env
    p = tmp_path / "b.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        w.writerows([ceiling, absent])
    assert check_csv(str(p)) == 2
    with open(p, "a", newline="") as f:
        csv.writer(f).writerow(zero)
    with pytest.raises(ValueError, match="median_us"):
        check_csv(str(p))
