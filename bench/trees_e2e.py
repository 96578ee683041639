"""Spec-LLaVA confidence trees vs EAGLE-2 dynamic trees at equal node budgets, end to end on the
embedded visual AR model (issue 12 item 1):

    python -m bench.trees_e2e [--budgets 8 16 24 32] [--depths 5 8] [--thresholds 0.5 1.0]
                              [--temperatures 1 0] [--classes 0 1 ... 9] [--seeds 0 1 2]
                              [--out FILE]

For every (temperature, depth, budget): ``speculative(tree="dynamic")`` and
``speculative(tree="confidence", threshold=h)`` (entropy in nats) with the same drafter, branch 4,
the same prompts and seeds; prints step compression (tokens / target pass, pooled over the seeds:
sampled runs of 10 images differ by a few tenths from seed to seed), the mean number of real tree
nodes per step (the confidence tree may leave part of its budget unused) and wall time.
Greedy runs also check that every method's tokens equal greedy AR decoding.
"""

from __future__ import annotations

import argparse
import time

import torch

from specops.decode import ar, speculative

from .harness import class_setting, e2e_setup, e2e_table, greedy_seeds


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", type=int, nargs="*", default=[8, 16, 24, 32])
    ap.add_argument("--depths", type=int, nargs="*", default=[5, 8])
    ap.add_argument("--thresholds", type=float, nargs="*", default=[0.5, 1.0])
    ap.add_argument("--temperatures", type=float, nargs="*", default=[1.0, 0.0])
    ap.add_argument("--branch", type=int, default=4)
    args, m, cls = e2e_setup(ap, argv)
    rows = []
    head = (
        f"{'T':>3} {'depth':>5} {'budget':>6} {'tree':<16} {'step compr.':>11} {'nodes':>6} "
        f"{'s':>6}"
    )
    setting = class_setting(cls, args.seeds, f"branch {args.branch}")
    table = e2e_table("trees_e2e", setting, head, args.out)
    for temp in args.temperatures:
        ref = ar(m.target, cls, temperature=0)[0] if temp == 0 else None
        for depth in args.depths:
            for budget in args.budgets:
                runs = [("dynamic (EAGLE-2)", dict(tree="dynamic"))]
                runs += [(f"confidence H<={h:g}", dict(tree="confidence", threshold=h))
                         for h in args.thresholds]  # fmt: skip
                for label, kw in runs:
                    t = time.perf_counter()
                    tokens = passes = nodes = 0.0
                    for seed in greedy_seeds(temp, args.seeds):
                        tok, st = speculative(
                            m.target, m.drafter, cls, branch=args.branch, depth=depth,
                            num_nodes=budget, temperature=temp, seed=seed, **kw,
                        )  # fmt: skip
                        if ref is not None and not torch.equal(tok, ref):
                            raise AssertionError(f"greedy {label} differs from greedy AR")
                        p = sum(st.passes_per_request)
                        tokens += st.tokens * st.batch
                        passes += p
                        nodes += st.extra["mean_tree_nodes"] * (p - st.batch)
                    dt = time.perf_counter() - t
                    steps = passes - len(cls) * (len(args.seeds) if temp > 0 else 1)
                    r = dict(
                        temperature=temp, depth=depth, budget=budget, tree=label,
                        step_compression=tokens / passes, mean_nodes=nodes / steps, wall_s=dt,
                    )  # fmt: skip
                    rows.append(r)
                    line = (
                        f"{temp:>3g} {depth:>5} {budget:>6} {label:<16} "
                        f"{r['step_compression']:>11.2f} {r['mean_nodes']:>6.1f} {dt:>6.1f}"
                    )
                    table.add(line)
    table.save()
    return rows


if __name__ == "__main__":
    main()
