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

from specops._optional import MissingDependency
from specops._progress import Progress
from specops.cli_args import ArgumentParser, check_out_path, check_writable, device_arg

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
    "traffic",  # counted on the CPU (cuda_sim, the Triton interpreter), never timed: not a default
]
DEFAULT_OPS = [n for n in REGISTRY if n != "traffic"]


def _bench_module(name: str):
    """bench_<name>.py of a REGISTRY name (``--ops`` takes no other)."""
    return importlib.import_module(f"{__package__}.bench_{name}")


def main(argv=None) -> int:
    ap = ArgumentParser(
        prog="specops bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--device",
        type=_device,
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cpu or cuda (default: cuda when present)",
    )
    ap.add_argument(
        "--ops",
        type=_ops,
        default=DEFAULT_OPS,
        help="comma list of " + ",".join(REGISTRY) + " (default: all but traffic)",
    )
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
    rows = _check(ap, args)  # every check before any benchmark runs
    if rows is not None:
        return _plot(rows, args.plot)
    harness.PROFILE = args.profile and args.device == "cuda"
    if "traffic" in args.ops:  # the interpreter is chosen when triton is first imported
        from .bench_traffic import _traffic_triton

        _traffic_triton()
    env = environment(args.device)
    print("  ".join(f"{k}={v}" for k, v in env.items()))
    all_rows: list[Row] = []
    ceil = ceilings(args.device) if not args.quick else {}
    for k, v in ceil.items():
        all_rows.append(Row("ceiling", k, "torch", 0.0, 0.0, 0.0, v, note=f"{k}={v:.1f}"))
    if args.csv and all_rows:
        write_csv(args.csv, all_rows, env)
    failed = []
    names = args.ops
    progress = Progress("bench", len(names), unit="ops")
    for i, name in enumerate(names):
        progress.update(i, note=name)
        try:
            rows = _bench_module(name).run(args.device, args.quick)
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


def _device(text: str) -> str:
    """``--device``: cpu, or cuda on a machine that has one (the suites take these two names)."""
    if text not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu or cuda, got {text!r}")
    return device_arg()(text)


def _ops(text: str) -> list[str]:
    """``--ops``: a comma list of REGISTRY's names (at least one)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        what = "no op named"
        if unknown:
            what = f"unknown op{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}"
        raise argparse.ArgumentTypeError(f"{what}; choose from {','.join(REGISTRY)}")
    return list(dict.fromkeys(names))


def _check(ap: ArgumentParser, args) -> list[Row] | None:
    """The checks that need more than one argument, or the file system: --from-csv (read here:
    its rows, returned), --csv and --plot writable, matplotlib for --plot."""
    if args.from_csv and args.plot is None:
        ap.error("--from-csv needs --plot")
    if args.plot is not None:
        from . import plot

        try:
            plot.require_matplotlib()
        except MissingDependency as e:
            ap.error(str(e))
        why = check_writable(args.plot, directory=True)
        if why:
            ap.error(f"--plot {args.plot}: {why}")
    if args.csv:
        why = check_out_path("--csv", args.csv)
        if why:
            ap.error(why)
    if not args.from_csv:
        return None
    if not os.path.isfile(args.from_csv):
        kind = "is a directory" if os.path.isdir(args.from_csv) else "does not exist"
        ap.error(f"--from-csv {args.from_csv}: {kind}")
    try:
        rows = plot.read_csv(args.from_csv)
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as e:
        ap.error(f"--from-csv {args.from_csv}: not a CSV that specops bench wrote ({e!r})")
    return rows


def _plot(rows: list[Row], out_dir: str) -> int:
    from . import plot

    for path in plot.write_all(rows, out_dir):
        print(f"[bench] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
