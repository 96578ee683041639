"""The benchmark runner: `specops bench [--device cuda|cpu] [--ops a,b] [--quick] [--csv PATH]
[--plot DIR] [--profile]` from an install (the suite ships as ``specops.bench``), or
`python -m bench ...` from a checkout.

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

from specops._progress import Progress

from . import harness
from .harness import Row, ceilings, environment, print_table, write_csv

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
        return importlib.import_module(f"{__package__}.bench_{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__package__}.bench_{name}":
            return None
        raise


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="specops bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    ap.add_argument(
        "--plot",
        nargs="?",
        const="bench_plots",
        default=None,
        metavar="DIR",
        help="write PNG charts (ratio to each peer per shape, GB/s against the copy ceiling) "
        "into DIR (default %(const)s); needs matplotlib: pip install 'specops[plot]'",
    )
    ap.add_argument(
        "--from-csv",
        default=None,
        metavar="PATH",
        help="with --plot: chart the rows of an existing CSV instead of running benchmarks",
    )
    args = ap.parse_args(argv)
    if args.plot is not None:
        from . import plot

        plot.require_matplotlib()  # before any benchmark runs
        if args.from_csv:
            return _plot(plot.read_csv(args.from_csv), args.plot)
    elif args.from_csv:
        ap.error("--from-csv needs --plot")
    harness.PROFILE = args.profile and args.device == "cuda"
    env = environment(args.device)
    print("  ".join(f"{k}={v}" for k, v in env.items()))
    all_rows: list[Row] = []
    ceil = ceilings(args.device) if not args.quick else {}
    for k, v in ceil.items():
        all_rows.append(Row("ceiling", k, "torch", 0.0, 0.0, 0.0, v, note=f"{k}={v:.1f}"))
    if args.csv and all_rows:
        write_csv(args.csv, all_rows, env)
    failed = []
    names = [n.strip() for n in args.ops.split(",") if n.strip()]
    progress = Progress("bench", len(names), unit="ops")
    for i, name in enumerate(names):
        progress.update(i, note=name)
        mod = _bench_module(name)
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
        if args.csv:  # op by op, so a run cut short keeps what it measured
            write_csv(args.csv, rows, env)
        progress.clear()
        print_table(rows)
        print()
    progress.close()
    if args.csv:
        print(f"[bench] appended {len(all_rows)} rows to {os.path.abspath(args.csv)}")
    if args.plot is not None:
        _plot(all_rows, args.plot)
    if failed:
        print(f"[bench] FAILED: {', '.join(failed)}")
        return 1
    return 0


def _plot(rows: list[Row], out_dir: str) -> int:
    from . import plot

    for path in plot.write_all(rows, out_dir):
        print(f"[bench] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
