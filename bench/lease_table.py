"""What the lease command (bench/lease.py) reads and prints, without a GPU: the plan's seconds,
the build check, the test and sanitizer selections, the junit and Nsight Compute parsers, and
the one table.  Tested on recorded fixtures (tests/data/lease/)."""

from __future__ import annotations

import csv
import io
import json
import os
import xml.etree.ElementTree as ET

from . import ledger

NCU_TOLERANCE = 0.05  # ncu and the CPU counters may differ by 5% before a row says FAIL
HEAD = (
    "| change | case | tests | before us | now us | predicted us | peer us | ratio to peer "
    "| ncu bytes / counted | ncu sectors per request / counted | check |"
)


# ---- the plan ---------------------------------------------------------------------------------
def plan_seconds(plan: dict) -> int:
    """The longest the run can take: the stages run one after another (the checks stage runs its
    tests and four sanitizers side by side), each to its timeout, plus the plan's overhead."""
    return sum(int(s["timeout_s"]) for s in plan["stages"].values()) + int(plan["overhead_s"])


def recorded_seconds(plan: dict) -> int:
    """The same schedule at the stage times recorded on earlier leases."""
    return sum(int(s["recorded_s"]) for s in plan["stages"].values()) + int(plan["overhead_s"])


def build_problems(info: dict, data: dict, gpu: bool) -> list[str]:
    """Why the build cannot answer the ledger: not importable, CUDA not compiled, no sm_90, a
    ledger CUDA kernel missing, no Triton; on the GPU also no device."""
    if "import_error" in info:
        return [f"specops does not import: {info['import_error'][-300:]}"]
    out = []
    if not info.get("cuda_compiled"):
        out.append("CUDA was not compiled (no nvcc, or the build skipped it)")
    if "90" not in [str(a) for a in info.get("cuda_archs") or []]:
        out.append(f"no sm_90 in the build's CUDA archs {info.get('cuda_archs')}")
    have = set(info.get("cuda_kernels") or [])
    for unit in sorted({k for e in ledger.open_entries(data) for k in e["kernels"]}):
        backend, op = unit.split(":")
        if backend == "cuda" and op not in have:
            out.append(f"ledger kernel {unit} is not in the build's cuda_kernels")
    if not info.get("triton"):
        out.append("triton does not import")
    if gpu and not info.get("torch_cuda_available"):
        out.append("torch sees no CUDA device")
    return out


# ---- tests ------------------------------------------------------------------------------------
def test_ids(data: dict) -> list[str]:
    """The open entries' GPU test ids, each once, a file's own ids dropped when the whole file is
    listed."""
    ids = list(dict.fromkeys(t for e in ledger.open_entries(data) for t in e["tests"]))
    files = {t for t in ids if "::" not in t}
    return [t for t in ids if "::" not in t or t.split("::")[0] not in files]


def sanitizer_files(data: dict) -> list[str]:
    """The test files of the open entries that touch a CUDA kernel."""
    files = [
        t.split("::")[0]
        for e in ledger.open_entries(data)
        if any(k.startswith("cuda:") for k in e["kernels"])
        for t in e["tests"]
    ]
    return list(dict.fromkeys(files))


def _covers(test_id: str, nodeid: str) -> bool:
    """Whether the ledger's test id (a file, a test, or one parametrization) selects ``nodeid``."""
    return nodeid == test_id or nodeid.startswith((test_id + "::", test_id + "["))


def uncollected(ids: list[str], collect_output: str) -> list[str]:
    """The ids a ``pytest --collect-only -q`` output holds no test of."""
    got = [ln.strip() for ln in collect_output.splitlines() if "::" in ln]
    return [i for i in ids if not any(_covers(i, g) for g in got)]


def junit_by_entry(path: str, data: dict) -> dict[str, dict[str, int]]:
    """{entry id: {"passed", "failed", "skipped"}} from pytest's junit XML."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    cases = []
    for tc in root.iter("testcase"):
        mod = tc.get("classname", "").replace(".", "/")
        nodeid = f"{mod}.py::{tc.get('name')}"
        state = "passed"
        if tc.find("failure") is not None or tc.find("error") is not None:
            state = "failed"
        elif tc.find("skipped") is not None:
            state = "skipped"
        cases.append((nodeid, state))
    out = {}
    for e in ledger.open_entries(data):
        n = {"passed": 0, "failed": 0, "skipped": 0}
        for nodeid, state in cases:
            if any(_covers(t, nodeid) for t in e["tests"]):
                n[state] += 1
        out[e["id"]] = n
    return out


# ---- Nsight Compute -----------------------------------------------------------------------------
def read_ncu(path: str) -> list[dict]:
    """Rows of ``ncu --csv --page raw --log-file``: kernel name and metrics by name (the units
    row and ncu's own ==PROF== lines skipped)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.DictReader(io.StringIO("".join(lines[start:]))))
    return [r for r in rows if r.get("ID", "").isdigit()]


def _num(text: str) -> float:
    return float(str(text).replace(",", "") or 0)


def match_ncu(cases: list[tuple[dict, list[dict]]], ncu_rows: list[dict]) -> dict[int, list]:
    """Pair each case's counted launches (traffic rows, in launch order) with ncu's rows, which
    come in the driver's order: the next ncu row whose kernel name contains the counted kernel's.
    -> {case index: [(traffic row, ncu row or None)]}."""
    out, at = {}, 0
    for i, (_, counted) in enumerate(cases):
        pairs = []
        for t in counted:
            j = next(
                (j for j in range(at, len(ncu_rows)) if t["kernel"] in ncu_rows[j]["Kernel Name"]),
                None,
            )
            pairs.append((t, None if j is None else ncu_rows[j]))
            at = at if j is None else j + 1
        out[i] = pairs
    return out


def ncu_ratios(t: dict, n: dict) -> tuple[float, float]:
    """(ncu DRAM bytes / counted bytes, ncu sectors per request / counted)."""
    counted = int(t["bytes_read"]) + int(t["bytes_written"])
    dram = _num(n["dram__bytes_read.sum"]) + _num(n["dram__bytes_write.sum"])
    sectors = sum(_num(n[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{k}.sum"]) for k in ("ld", "st"))
    reqs = sum(_num(n[f"l1tex__t_requests_pipe_lsu_mem_global_op_{k}.sum"]) for k in ("ld", "st"))
    spr = sectors / reqs if reqs else 0.0
    c_spr = float(t["sectors_per_request"])
    return dram / counted if counted else 0.0, spr / c_spr if c_spr else 0.0


def ncu_cases(data: dict, rows: list[dict] | None = None) -> list[tuple[dict, list[dict]]]:
    """The open cases the traffic bench counted, each with its counted launches (the ncu
    driver's order); ``rows``: the traffic CSV's, read here when not given."""
    rows = ledger.traffic_rows(data) if rows is None else rows
    out = []
    for case in unique_cases(data):
        launches = ledger.counted(case, rows)
        if launches:
            out.append((case, launches))
    return out


def unique_cases(data: dict) -> list[dict]:
    seen, out = set(), []
    for e in ledger.open_entries(data):
        for c in e["bench"]:
            key = (c["op"], c["backend"], c["shape"])
            if key not in seen:
                seen.add(key)
                out.append(c)
    return out


# ---- the table --------------------------------------------------------------------------------
def _bench_rows(path: str) -> dict[tuple[str, str], dict[str, float]]:
    """{(op, shape): {backend or peer: median us}} of the lease's bench.csv."""
    out: dict = {}
    if not os.path.exists(path):
        return out
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["shape"] != "-" and float(r["median_us"] or 0) > 0:
                out.setdefault((r["op"], r["shape"]), {})[r["backend"]] = float(r["median_us"])
    return out


def _fmt(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(data: dict, out_dir: str, stages: dict) -> str:
    """The lease's one table, a row per (entry, case); an entry without cases gets one row."""
    times = _bench_rows(os.path.join(out_dir, "bench.csv"))
    traffic = ledger.traffic_rows(data)
    counted = ncu_cases(data, traffic)
    pairs = match_ncu(counted, read_ncu(os.path.join(out_dir, "ncu.csv")))
    ncu_of = {(c["op"], c["backend"], c["shape"]): pairs[i] for i, (c, _) in enumerate(counted)}
    tests = stages.get("tests", {}).get("per_entry", {})
    lines = [HEAD, "|" + " --- |" * HEAD.count(" | ") + " --- |"]
    for e in ledger.open_entries(data):
        t = tests.get(e["id"])
        for c in e["bench"] or [None]:
            if c is None:
                check = _tests_check(t, measured=t is not None)
                lines.append(f"| {e['id']} | tests only | {_tests_cell(t)} |" + " - |" * 7
                             + f" {check} |")  # fmt: skip
                continue
            lines.append(_case_line(e, c, t, times, traffic, ncu_of))
    return "\n".join(lines + ["", stage_summary(stages)])


def stage_summary(stages: dict) -> str:
    """One line: each stage's outcome and seconds (a sanitizer's rc 124 is its timeout)."""
    parts = []
    for name, st in stages.items():
        rc = st.get("rc")
        what = "ok" if st.get("ok") else ("TIMEOUT" if rc == 124 else f"FAILED (rc {rc})")
        parts.append(f"{name} {what} {st.get('seconds', '-')} s")
    return "Stages: " + "; ".join(parts) if parts else "Stages: none ran"


def _tests_cell(t: dict | None) -> str:
    return f"{t['passed']} passed, {t['failed']} failed" if t else "not run"


def _tests_check(t: dict | None, measured: bool) -> str:
    """The check column before ncu: the entry's tests failed, nothing ran, or ok."""
    if t and t["failed"]:
        return "FAIL (tests)"
    return "ok" if t or measured else "not measured"


def _case_line(e, c, t, times, traffic, ncu_of) -> str:
    measured = times.get((c["op"], c["shape"]), {})
    now = measured.get(c["backend"])
    peers = {k: v for k, v in measured.items() if k != c["backend"]}
    best = min(peers.items(), key=lambda kv: kv[1]) if peers else None
    before = c["before"]["us"] if c["before"] else None
    pred = ledger.predicted_us(c, traffic)
    ratio = best[1] / now if best and now else None
    cells = ["-", "-"]
    check = _tests_check(t, measured=now is not None)
    pairs = ncu_of.get((c["op"], c["backend"], c["shape"]))
    if pairs:
        got = [ncu_ratios(t, n) for t, n in pairs if n is not None]
        if got:
            worst_b = max(got, key=lambda r: abs(r[0] - 1))[0]
            worst_s = max(got, key=lambda r: abs(r[1] - 1))[1]
            cells = [f"{worst_b:.2f}", f"{worst_s:.2f}"]
            off = any(abs(b - 1) > NCU_TOLERANCE or abs(s - 1) > NCU_TOLERANCE for b, s in got)
            check += "; ncu FAIL" if off else "; ncu PASS"
            if len(got) < len(pairs):
                check += f" ({len(pairs) - len(got)} launches unmatched)"
    peer_cell = f"{best[1]:.2f} ({best[0]})" if best else "-"
    return (
        f"| {e['id']} | {c['op']} {c['backend']} {c['shape']} | {_tests_cell(t)} | "
        f"{_fmt(before)} | {_fmt(now)} | {_fmt(pred)} | {peer_cell} | {_fmt(ratio)} | "
        f"{cells[0]} | {cells[1]} | {check} |"
    )


def stages_of(out_dir: str) -> dict:
    with open(os.path.join(out_dir, "stages.json")) as f:
        return json.load(f)
