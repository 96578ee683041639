"""SJD vs SJD-PAC at equal windows, end to end on the embedded visual AR model (issue 12 item 5):

    python -m bench.jacobi_e2e [--windows 32 64] [--inits target uniform] [--seeds 0 1 2]
                               [--classes 0 1 ... 9] [--out FILE]

For every (window, init): ``sjd(window=L)``, ``sjd_pac(window=L)`` (K = 4, D = 3, the paper's)
and ``sjd_pac`` without the branch continuation, on the same prompts and seeds; prints step
compression (tokens / target pass per request, pooled over the seeds) and, for SJD-PAC, how often
a non-first branch was accepted to a leaf and the chain continued.
"""

from __future__ import annotations

import argparse
import time

from specops.decode import sjd, sjd_pac

from .harness import class_setting, e2e_setup, e2e_table


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, nargs="*", default=[32, 64])
    ap.add_argument("--inits", nargs="*", default=["target", "uniform"])
    args, m, cls = e2e_setup(ap, argv)
    head = (
        f"{'window':>6} {'init':<8} {'method':<26} {'step compr.':>11} {'branch cont.':>12} "
        f"{'s':>6}"
    )
    setting = class_setting(cls, args.seeds, "temperature 1")
    table = e2e_table("jacobi_e2e", setting, head, args.out)
    rows = []
    for L in args.windows:
        for init in args.inits:
            runs = [
                ("SJD", sjd, {}),
                ("SJD-PAC (K 4, D 3)", sjd_pac, {}),
                ("SJD-PAC, no branch cont.", sjd_pac, dict(branch_continuation=False)),
            ]
            for label, fn, kw in runs:
                t = time.perf_counter()
                tokens = passes = cont = 0
                for seed in args.seeds:
                    _, st = fn(m.target, cls, window=L, init=init, seed=seed, **kw)
                    tokens += st.tokens * st.batch
                    passes += sum(st.passes_per_request)
                    cont += st.extra.get("branch_continuations", 0)
                dt = time.perf_counter() - t
                r = dict(window=L, init=init, method=label, step_compression=tokens / passes,
                         branch_continuations=cont, wall_s=dt)  # fmt: skip
                rows.append(r)
                line = (f"{L:>6} {init:<8} {label:<26} {tokens / passes:>11.2f} {cont:>12} "
                        f"{dt:>6.1f}")  # fmt: skip
                table.add(line)
    table.save()
    return rows


if __name__ == "__main__":
    main()
