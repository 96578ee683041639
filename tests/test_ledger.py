"""The ledger of kernel changes not yet measured on a GPU (bench/ledger.py, issue 45): it holds at
HEAD, a planted unlisted kernel change fails it, and its traffic counts are not older than the
kernels they count."""

from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest
from specops.bench import ledger

ROOT = ledger.ROOT


def _git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


def _history_or_skip():
    try:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an installed package): no history to check")
    if shallow == "true":
        pytest.skip("a shallow clone: the ledger check needs the history since the GPU runs")


def test_ledger_holds_at_head():
    _history_or_skip()
    assert ledger.check() == []


def test_every_open_entry_names_real_tests_and_cases():
    data = ledger.load()
    from specops.bench import lease_cases

    for e in data["entries"]:
        for t in e["tests"]:
            assert os.path.exists(os.path.join(ROOT, t.split("::")[0])), (e["id"], t)
        for c in e["bench"]:
            assert c["op"] in lease_cases.BUILDERS, (e["id"], c)
            if c["before"]:
                assert os.path.exists(os.path.join(ROOT, c["before"]["csv"])), (e["id"], c)


def _planted_clone(tmp_path, path: str) -> tuple[str, str]:
    """A clone of HEAD with one planted commit changing ``path``: (clone, its short hash)."""
    clone = str(tmp_path / "clone")
    _git("clone", "-q", "--shared", ROOT, clone)
    _git("config", "user.email", "t@example.com", cwd=clone)
    _git("config", "user.name", "t", cwd=clone)
    with open(os.path.join(clone, path), "a") as f:
        f.write("\n// planted\n" if not path.endswith(".py") else "\n# planted\n")
    # "@" in the subject: the log parser must not split commits on it
    _git("commit", "-q", "-am", "planted kernel change (op@commit, 1 @ 2)", cwd=clone)
    return clone, _git("rev-parse", "--short=7", "HEAD", cwd=clone).stdout.strip()


@pytest.mark.parametrize(
    "path, unit",
    [
        ("csrc/include/specops/block_sample.cuh", "cuda:verify_chain"),
        ("csrc/include/specops/mass.h", "cuda:verify_jacobi"),  # included through two headers
        ("triton_kernels/philox.py", "triton:sample"),  # imported by the kernel module
        ("triton_kernels/_args.py", "triton:features"),
    ],
)
def test_a_planted_unlisted_change_fails_and_an_entry_naming_it_passes(tmp_path, path, unit):
    _history_or_skip()
    clone, sha = _planted_clone(tmp_path, path)
    problems = ledger.check(root=clone)
    assert any(p.startswith(sha) and f"({unit})" in p for p in problems), problems
    assert all(sha in p for p in problems), problems  # nothing else is unlisted
    data = ledger.load(os.path.join(clone, "bench", "ledger.json"))
    units = sorted({u.unit for u in ledger.unlisted(data, clone)})
    data["entries"].append(
        {"id": "planted", "title": "planted", "kernels": units, "commits": [sha],
         "tests": ["tests/test_ledger.py"], "bench": [], "status": "open"}
    )  # fmt: skip
    ledger.save(data, os.path.join(clone, "bench", "ledger.json"))
    assert ledger.check(root=clone) == []


def test_a_change_outside_the_kernels_needs_no_entry(tmp_path):
    _history_or_skip()
    clone, _ = _planted_clone(tmp_path, "specops/decode/stats.py")
    assert ledger.check(root=clone) == []


def test_unit_of_finds_the_unit_that_runs_an_op():
    data = ledger.load()
    assert ledger.unit_of(data, "verify_chain", "cuda") == "cuda:verify_chain"
    assert ledger.unit_of(data, "gather_rows", "triton") == "triton:features"
    assert ledger.unit_of(data, "gather_rows", "cuda") is None


def test_sources_follow_includes_and_imports():
    data = ledger.load()
    cuda = ledger.sources(data["kernels"]["cuda:verify_jacobi"], ROOT, ("csrc/launchers.h",))
    assert {"csrc/jacobi.cu", "csrc/include/specops/jacobi.cuh", "csrc/include/specops/philox.h",
            "csrc/launchers.h"} <= set(cuda)  # fmt: skip
    assert "csrc/include/specops/kv.cuh" not in cuda  # launchers.h is opaque
    tri = ledger.sources(data["kernels"]["triton:sample"], ROOT)
    assert {
        "triton_kernels/sample.py",
        "triton_kernels/philox.py",
        "triton_kernels/verify.py",
        "triton_kernels/_args.py",
        "triton_kernels/grouped.py",
        "triton_kernels/mass.py",
    } == set(tri)  # imports of imports (verify -> grouped -> mass)


def test_traffic_counts_are_not_older_than_the_ledger_kernels():
    """The committed traffic CSV counts the kernels as they are: a kernel changed after it must
    be counted again (specops bench --device cpu --ops traffic) before a lease compares ncu with
    it."""
    _history_or_skip()
    data = ledger.load()
    assert ledger.stale_counts(data) == []
    rows = ledger.traffic_rows(data)
    counted = [c for e in data["entries"] for c in e["bench"] if ledger.counted(c, rows)]
    assert len(counted) >= 10  # most cases have a prediction and an ncu comparison


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["entries"][0].pop("tests"), "field 'tests'"),
        (lambda d: d["entries"][0]["kernels"].append("cuda:nope"), "unknown kernel unit"),
        (lambda d: d["entries"][0]["bench"][0].pop("peer"), "lacks one of"),
        (lambda d: d["entries"][0].update(status="done"), "status"),
        (lambda d: d["entries"][1].update(id=d["entries"][0]["id"]), "id used twice"),
        (lambda d: d["entries"][0].update(tests=[]), "names the GPU tests"),
    ],
)
def test_schema_errors_name_the_entry(mutate, message):
    data = copy.deepcopy(ledger.load())
    mutate(data)
    with pytest.raises(ValueError, match=message):
        ledger.validate(data)


def test_readme_lists_every_open_entry_as_generated():
    data = ledger.load()
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = text[text.index(ledger.README_BEGIN) + len(ledger.README_BEGIN) : text.index(
        ledger.README_END)].strip()  # fmt: skip
    assert block == ledger.render(data).strip(), "run python -m bench.ledger render --write"
    for e in data["entries"]:
        assert (f"**{e['id']}**" in block) == (e["status"] == "open")


def test_json_is_as_saved():
    """bench/ledger.json is written by ledger.save (ingest does): hand edits keep its layout."""
    with open(ledger.LEDGER) as f:
        text = f.read()
    assert text == json.dumps(json.loads(text), indent=1, ensure_ascii=False) + "\n"
