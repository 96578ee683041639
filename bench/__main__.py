"""The benchmark runner: `python -m bench [--device cuda|cpu] [--ops a,b] [--quick] [--csv PATH]
[--profile]`.

Each bench_<op>.py exposes ``run(device, quick) -> list[Row]``; every row is printed and appended
to the CSV with the device name, versions and git commit.  The measured ceilings (copy bandwidth,
bf16 matmul) of the same run are printed first and saved as rows of op "ceiling".
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

import torch

from bench import harness
from bench.harness import Row, ceilings, environment, print_table, write_csv

REGISTRY = [
    "sample",
    "verify",
    "jacobi",
    "acceptance",
    "probs",
    "tree_attention",
    "kv",
    "features",
    "e2e_step",
    "dispatch",
]


def _bench_module(name: str):
    try:
        return importlib.import_module(f"bench.bench_{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"bench.bench_{name}":
            return None
        raise


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--ops", default=",".join(REGISTRY), help="comma list of " + ",".join(REGISTRY))
    ap.add_argument("--quick", action="store_true", help="tiny shapes (CI-sized)")
    ap.add_argument("--csv", default=None, help="append rows to this CSV")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="wrap only the timed region in cudaProfilerStart/Stop (nsys/ncu "
        "--capture-range=cudaProfilerApi)",
    )
    args = ap.parse_args(argv)
    harness.PROFILE = args.profile and args.device == "cuda"
    env = environment(args.device)
    print("  ".join(f"{k}={v}" for k, v in env.items()))
    all_rows: list[Row] = []
    ceil = ceilings(args.device) if not args.quick else {}
    for k, v in ceil.items():
        all_rows.append(Row("ceiling", k, "torch", 0.0, 0.0, 0.0, v, note=f"{k}={v:.1f}"))
    failed = []
    for name in args.ops.split(","):
        mod = _bench_module(name.strip())
        if mod is None or not hasattr(mod, "run"):
            print(f"[bench] {name}: no bench module with run(), skipped")
            continue
        try:
            rows = mod.run(args.device, args.quick)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        all_rows.extend(rows)
        print_table(rows)
        print()
    if args.csv:
        write_csv(args.csv, all_rows, env)
        print(f"[bench] appended {len(all_rows)} rows to {os.path.abspath(args.csv)}")
    if failed:
        print(f"[bench] FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
