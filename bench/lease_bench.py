"""The lease's bench and Nsight Compute stages (bench/lease.py runs them as processes).

    python -m bench.lease_bench --commit C --csv bench.csv --deadline 75 [--dry-run]
    python -m bench.lease_bench --ncu-driver --commit C [--dry-run]

Bench: every open ledger case (lease_cases.py) beside its peers, CUDA-graph replay, medians over
15 trials, rows appended to the CSV case by case (a cut-off run keeps what it measured), each
row carrying ``--commit``; cases are skipped once ``--deadline`` seconds have passed.  The ncu
driver runs each case the traffic bench counted once between cudaProfilerStart and Stop, after
a warm-up, in lease_table.ncu_cases' order (the order lease_table.match_ncu reads ncu's rows in).
The dry run builds every case on the CPU (shape labels, builders, peers present or not) and
times nothing.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import specops

from . import harness, lease_cases, lease_table, ledger
from .harness import Row


def _env(commit: str, device: str) -> dict[str, str]:
    env = harness.environment(device)
    env["commit"] = commit  # the clean commit the lease measures, never the device's git
    return env


def bench(args) -> int:
    data = ledger.load()
    device = "cpu" if args.dry_run else "cuda"
    env = _env(args.commit, device)
    t0, failed = time.time(), []
    cases = lease_table.unique_cases(data)
    for i, case in enumerate(cases):
        label = f"{case['op']} {case['backend']} {case['shape']}"
        if time.time() - t0 > args.deadline:
            print(f"[lease bench] deadline: {len(cases) - i} cases not run, from {label}")
            return 1
        try:
            rows = _one(case, device, args.dry_run)
        except Exception as exc:  # one broken case must not cost the others
            print(f"[lease bench] {label}: FAILED {type(exc).__name__}: {exc}")
            failed.append(label)
            continue
        if rows and not args.dry_run:
            harness.write_csv(args.csv, harness.with_ratios(rows, (case["backend"],)), env)
            harness.print_table(rows)
    done = len(cases) - len(failed)
    print(f"[lease bench] {done}/{len(cases)} cases in {time.time() - t0:.0f} s")
    return 1 if failed else 0


def _one(case: dict, device: str, dry: bool) -> list[Row]:
    built = lease_cases.build(case, device, copies=1 if dry else 4)
    for name, why in built.missing.items():
        print(f"[lease bench] {case['op']} {case['shape']}: peer {name} unavailable: {why}")
    if dry:
        print(f"[lease bench] dry run: {case['op']} {case['backend']} {case['shape']} built; "
              f"peers {sorted(built.peers)}")  # fmt: skip
        return []
    rows = []
    with specops.validation(False):
        for name, fns in [(case["backend"], built.fns), *built.peers.items()]:
            st = harness.time_cuda(fns)
            rows.append(Row(case["op"], case["shape"], name, st.median_us, st.p20_us, st.p80_us))
    for name, why in built.missing.items():
        rows.append(Row(case["op"], "-", name, 0.0, 0.0, 0.0, note=f"{case['shape']}: {why}"))
    return rows


def ncu_driver(args) -> int:
    data = ledger.load()
    device = "cpu" if args.dry_run else "cuda"
    cases = lease_table.ncu_cases(data)
    with specops.validation(False):
        for i, (case, counted) in enumerate(cases):
            kernels = [t["kernel"] for t in counted]
            print(f"[ncu] case {i}: {case['op']} {case['backend']} {case['shape']} -> {kernels}")
            built = lease_cases.build(case, device, copies=1)
            if args.dry_run:
                continue
            fn = built.fns[0]
            fn()
            fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
    print(f"[ncu] {len(cases)} cases")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lease_bench", allow_abbrev=False)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--csv", default="bench.csv")
    ap.add_argument("--deadline", type=float, default=75.0, help="seconds before cases stop")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--ncu-driver", action="store_true")
    args = ap.parse_args(argv)
    return ncu_driver(args) if args.ncu_driver else bench(args)


if __name__ == "__main__":
    sys.exit(main())
