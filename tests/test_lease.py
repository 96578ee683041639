"""The lease command (bench/lease.py) without a GPU: its dry run passes end to end within the
plan, and its table, the 5% Nsight Compute check and the ingest command work on a recorded
lease (tests/data/lease/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from specops.bench import ingest, lease_table, ledger

ROOT = ledger.ROOT
FIXTURE = os.path.join(ROOT, "tests", "data", "lease")


def _fixture_ledger() -> dict:
    with open(os.path.join(FIXTURE, "ledger.json")) as f:
        data = json.load(f)
    ledger.validate(data)
    return data


def _in_checkout() -> bool:
    import specops

    return os.path.dirname(os.path.dirname(os.path.abspath(specops.__file__))) == ROOT


@pytest.mark.skipif(not _in_checkout(), reason="the lease drives a checkout, not an install")
def test_dry_run_of_the_lease_command(tmp_path):
    """The exact lease command with DRY_RUN=1: every stage but the GPU calls, the plan within
    300 s, at most 8 files written."""
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    if not head:
        pytest.skip("not a git checkout")
    env = dict(os.environ, DRY_RUN="1", OUT=str(tmp_path))
    env.pop("SPECOPS_TRITON_SPECS", None)
    r = subprocess.run(
        [sys.executable, "-m", "bench.lease", "--commit", head, "--allow-dirty"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    files = sorted(os.listdir(tmp_path))
    assert len(files) <= 8 and set(files) <= set(lease_table_files()), files
    stages = json.loads((tmp_path / "stages.json").read_text())
    assert stages["dry_run"] and stages["commit"] == head
    assert {"plan", "build", "checks", "bench", "ncu"} <= set(stages["stages"])
    assert all(s["ok"] for s in stages["stages"].values()), stages
    assert stages["stages"]["plan"]["planned_s"] <= 300
    log = (tmp_path / "lease.log").read_text()
    data = ledger.load()
    assert (
        f"{len(lease_table.unique_cases(data))}/{len(lease_table.unique_cases(data))} cases" in log
    )
    assert lease_table.HEAD in (tmp_path / "table.md").read_text()


def lease_table_files():
    from specops.bench import lease

    return lease.FILES


def test_the_lease_refuses_a_dirty_tree_and_a_bad_commit(tmp_path):
    from specops.bench import lease

    with pytest.raises(SystemExit):
        lease.main(["--commit", "abc1234", "--allow-dirty", "--out", str(tmp_path)])  # no dry run
    args = type("A", (), {"commit": "abc1234-dirty", "out": str(tmp_path), "dry_run": False,
                          "allow_dirty": False})  # fmt: skip
    run = lease.Lease(args, ledger.load())
    assert not run.check_plan()
    assert "want a clean commit" in (tmp_path / "lease.log").read_text()


def test_the_plan_fits_its_budget_and_a_longer_one_fails():
    plan = ledger.load()["lease"]
    assert lease_table.plan_seconds(plan) <= plan["budget_s"]
    assert lease_table.recorded_seconds(plan) <= plan["budget_s"]
    plan = json.loads(json.dumps(plan))
    plan["stages"]["bench"]["timeout_s"] += 60
    assert lease_table.plan_seconds(plan) > plan["budget_s"]


@pytest.mark.parametrize("field", ["timeout_s", "recorded_s"])
def test_the_dry_run_refuses_a_plan_over_budget(tmp_path, field):
    from specops.bench import lease

    data = ledger.load()
    data["lease"]["stages"]["bench"][field] += 300
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    args = type("A", (), {"commit": head or "abc1234", "out": str(tmp_path), "dry_run": True,
                          "allow_dirty": True})  # fmt: skip
    assert not lease.Lease(args, data).check_plan()
    assert "> 300 s" in (tmp_path / "lease.log").read_text()


def test_build_check_stops_on_a_build_without_cuda_or_sm90():
    data = _fixture_ledger()
    good = {"cuda_compiled": True, "cuda_archs": ["90"], "cuda_kernels": ["sample"],
            "triton": "3.6.0", "torch_cuda_available": True}  # fmt: skip
    assert lease_table.build_problems(good, data, gpu=True) == []
    assert "not compiled" in " ".join(
        lease_table.build_problems(dict(good, cuda_compiled=False), data, gpu=True)
    )
    assert "sm_90" in " ".join(
        lease_table.build_problems(dict(good, cuda_archs=["80"]), data, gpu=True)
    )
    assert "cuda:sample" in " ".join(
        lease_table.build_problems(dict(good, cuda_kernels=[]), data, gpu=True)
    )
    assert "no CUDA device" in " ".join(
        lease_table.build_problems(dict(good, torch_cuda_available=False), data, gpu=True)
    )
    assert "does not import" in lease_table.build_problems({"import_error": "x"}, data, True)[0]


def test_uncollected_ids_are_named():
    out = "tests/test_sample.py::test_a[cuda]\ntests/test_kv.py::test_b\n"
    ids = ["tests/test_sample.py", "tests/test_kv.py::test_b", "tests/test_kv.py::test_c"]
    assert lease_table.uncollected(ids, out) == ["tests/test_kv.py::test_c"]


def test_table_on_a_recorded_lease():
    data = _fixture_ledger()
    stages = lease_table.stages_of(FIXTURE)["stages"]
    text = lease_table.table(data, FIXTURE, stages)
    lines = text.splitlines()
    assert lines[0] == lease_table.HEAD
    row = [c.strip() for c in lines[2].strip("|").split("|")]
    # change | case | tests | before | now | predicted | peer | ratio | ncu bytes | ncu spr | check
    assert row[:3] == ["row-split", "sample cuda B=1 V=32000", "41 passed, 0 failed"]
    assert row[3:6] == ["76.72", "8.00", "10.14"]  # before, now, predicted (two launches)
    assert row[6:8] == ["40.00 (torch.multinomial)", "5.00"]
    # the sum kernel's counts agree (1.01, 1.00); the draw kernel read 21% more than counted
    assert row[8:10] == ["1.21", "0.99"]
    assert row[10] == "ok; ncu FAIL"
    tests_only = [c.strip() for c in lines[3].strip("|").split("|")]
    assert tests_only[:3] == ["negative-seqlens", "tests only", "3 passed, 1 failed"]
    assert tests_only[-1] == "FAIL (tests)"
    assert lines[-1].startswith("Stages: plan ok") and "tests FAILED (rc 1) 70.2 s" in lines[-1]


def test_ncu_within_five_percent_passes():
    t = {"kernel": "k", "bytes_read": "1000", "bytes_written": "0", "sectors_per_request": "4.00"}
    n = {"dram__bytes_read.sum": "1,040", "dram__bytes_write.sum": "0",
         "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "412",
         "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "100",
         "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "0",
         "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "0"}  # fmt: skip
    b, s = lease_table.ncu_ratios(t, n)
    assert b == pytest.approx(1.04) and s == pytest.approx(1.03)
    assert abs(b - 1) <= lease_table.NCU_TOLERANCE and abs(s - 1) <= lease_table.NCU_TOLERANCE


def test_ncu_rows_pair_with_counted_launches_in_order():
    rows = lease_table.read_ncu(os.path.join(FIXTURE, "ncu.csv"))
    assert [r["ID"] for r in rows] == ["0", "1", "2"]  # the units row and ==PROF== lines skipped
    case = {"op": "sample"}
    counted = [{"kernel": "sample_split_sum_kernel"}, {"kernel": "sample_split_draw_kernel"}]
    pairs = lease_table.match_ncu([(case, counted)], rows)[0]
    assert [n["ID"] for _, n in pairs] == ["1", "2"]  # the fill kernel before them skipped
    assert lease_table.match_ncu([(case, counted[::-1])], rows)[0][1][1] is None


def _fixture_copy(tmp_path):
    src = tmp_path / "lease"
    shutil.copytree(FIXTURE, src)
    (src / "table.md").write_text(
        lease_table.table(_fixture_ledger(), str(src), lease_table.stages_of(str(src))["stages"])
    )
    return src


def test_ingest_closes_what_the_lease_answered(tmp_path):
    src = _fixture_copy(tmp_path)
    data = _fixture_ledger()
    results = tmp_path / "results"
    done = ingest.ingest(str(src), data, str(results))
    assert done["closed"] == ["row-split"] and done["kept"] == ["negative-seqlens"]
    assert done["name"] == "h200-0123456-lease"
    assert sorted(os.listdir(results)) == [
        "h200-0123456-lease-ncu.csv", "h200-0123456-lease.csv", "h200-0123456-lease.log",
        "h200-0123456-lease.md",
    ]  # fmt: skip
    md = (results / "h200-0123456-lease.md").read_text()
    assert "NVIDIA H200" in md and "Triton 3.6.0" in md and "torch 2.11.0+cu130" in md
    entry = {e["id"]: e for e in data["entries"]}
    assert entry["row-split"]["status"] == "measured"
    assert entry["row-split"]["measured"]["commit"] == "0123456"
    assert entry["negative-seqlens"]["status"] == "open"
    assert entry["negative-seqlens"]["last_lease"]["tests"]["failed"] == 1
    assert data["runs"][-1]["commit"] == "0123456"
    assert data["lease"]["stages"]["build"]["recorded_s"] == 31  # this run's time
    assert data["lease"]["stages"]["checks"]["recorded_s"] == 80  # failed: the old one kept
    ledger.validate(data)
    assert "row-split" not in ledger.render(data)  # the README lists open entries only


def test_ingest_refuses_a_dry_run(tmp_path):
    src = _fixture_copy(tmp_path)
    st = json.loads((src / "stages.json").read_text())
    st["dry_run"] = True
    (src / "stages.json").write_text(json.dumps(st))
    with pytest.raises(ValueError, match="dry run"):
        ingest.ingest(str(src), _fixture_ledger(), str(tmp_path / "results"))


def test_ingest_writes_the_docs_block(tmp_path):
    doc = tmp_path / "gpu_cost.md"
    doc.write_text(f"# x\n{ingest.DOC_BEGIN}\nold\n{ingest.DOC_END}\ntail\n")
    assert ingest.write_doc("| a |", "h200-0123456-lease", str(doc))
    text = doc.read_text()
    assert "old" not in text and "| a |" in text and text.endswith(f"{ingest.DOC_END}\ntail\n")
    assert ingest.slug("NVIDIA H100 80GB HBM3") == "h100" and ingest.slug("NVIDIA H200") == "h200"


def test_gpu_only_selects_the_gpu_cases():
    """SPECOPS_GPU_ONLY=1 (the lease's tests stage) keeps the tests marked gpu or parametrized
    with "cuda" and nothing else."""
    env = dict(os.environ, SPECOPS_GPU_ONLY="1")
    env.pop("SPECOPS_TRITON_SPECS", None)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/test_path_acceptance.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    ids = [ln for ln in r.stdout.splitlines() if "::" in ln]
    assert ids, r.stdout[-2000:]
    assert all("cuda" in i or "gpu" in i for i in ids), ids
    assert not any("cuda_sim" in i for i in ids), ids
