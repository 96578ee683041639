"""verify_chain against FlashInfer and SGLang's Triton sampler, one shape at a time (each row is
printed and appended to the CSV as soon as it is measured, so a run cut off keeps its rows):

    python -m bench.chain_peers [--csv PATH]
"""

from __future__ import annotations

import argparse

from .bench_verify import bench_chain
from .harness import environment, print_table, with_ratios, write_csv


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.chain_peers")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    env = environment("cuda")
    shapes = [(b, k, v) for v in (32000, 128256) for k in (4, 8) for b in (1, 8, 64, 256)]
    for shape in shapes:
        rows = with_ratios(bench_chain("cuda", False, shapes=[shape]), ("cuda", "triton"))
        print_table(rows)
        if args.csv:
            write_csv(args.csv, rows, env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
