"""A time model over the traffic counters (issue 36, docs/gpu_cost.md), calibrated on the committed
H200 rows of the kernels whose code has not changed since they were measured.

    t = launch + max(total bytes / copy bandwidth,
                     critical CTA's bytes / one CTA's bandwidth + its barriers * pass latency)

total bytes = the bytes requested plus a fitted share of the sectors beyond them (sectors * 32
counts a sector again at every request that touches it; L1 and L2 catch part of that).  The copy
bandwidth is the measured ceiling of the same H200 runs; launch, one CTA's bandwidth, the pass
latency and that share are fitted (``python -m bench.traffic_model`` refits and prints the table of
docs/gpu_cost.md).  What the model does not see: L2 hits (rows read twice within a launch cost
less than twice), compute (tree attention's matmuls), occupancy (CTAs queueing for SMs)."""

from __future__ import annotations

import json
import math
import os
import sys

from .traffic_common import SECTOR, KernelTraffic

COPY_GBPS = 4200.0  # H200 device-to-device copy, bench/results/h200-940f467.csv ceiling rows
# fitted by fit() on CALIBRATION (python -m bench.traffic_model); a lease's refit
# (python -m bench.ingest) writes its own into bench/traffic_model.json, read here when present
LAUNCH_US = 3.4
CTA_GBPS = 30.0
PASS_US = 0.1
SECTOR_EXCESS = 0.5  # the share of sectors beyond the requested bytes that reaches DRAM
PARAMS_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traffic_model.json")
if os.path.exists(PARAMS_JSON):
    with open(PARAMS_JSON) as _f:
        LAUNCH_US, CTA_GBPS, PASS_US, SECTOR_EXCESS = json.load(_f)["params"]


def predict_us(t: KernelTraffic, params=None) -> float:
    launch, cta_gbps, pass_us, excess = params or (LAUNCH_US, CTA_GBPS, PASS_US, SECTOR_EXCESS)
    requested = t.bytes_read + t.bytes_written
    total = requested + excess * max(t.sectors * SECTOR - requested, 0)
    crit = t.critical_cta_bytes / (cta_gbps * 1e3) + t.critical_cta_barriers * pass_us
    return launch + max(total / (COPY_GBPS * 1e3), crit)


# (op, bench shape as in the CSV, measured median us, source CSV).  Only kernels unchanged since
# the run that measured them (git log of their headers): commit_kv (kv.cuh), path_acceptance
# (path_acceptance.cuh) and sample_without_replacement (sample_wor.cuh: a uniform clamp and
# formatting since).  sample and verify_* changed since their H200 rows.
CALIBRATION = [
    ("commit_kv", "L=32 B=1 Hkv=32 D=128 m=1", 3.97, "h200-940f467.csv"),
    ("commit_kv", "L=32 B=1 Hkv=32 D=128 m=8", 5.14, "h200-940f467.csv"),
    ("commit_kv", "L=32 B=1 Hkv=32 D=128 m=64", 23.24, "h200-940f467.csv"),
    ("commit_kv", "L=32 B=4 Hkv=32 D=128 m=8", 12.28, "h200-940f467.csv"),
    ("path_acceptance", "B=1 N=21 V=65536", 4.21, "h200-88b2609.csv"),
    ("path_acceptance", "B=64 N=21 V=65536", 4.26, "h200-88b2609.csv"),
    ("path_acceptance", "B=64 N=64 V=65536 chain", 5.52, "h200-88b2609.csv"),
    ("sample_without_replacement", "R=128 V=65536 k=3", 169.55, "h200-88b2609.csv"),
]


def _calibration_traffic() -> list[tuple[str, str, float, KernelTraffic]]:
    import torch

    import specops
    from specops import Tree

    from . import traffic_cuda
    from .inputs import draw, gen, near, probs

    out = []
    with specops.validation(False):
        for op, shape, us, _ in CALIBRATION:
            kw = dict(w.split("=") for w in shape.split() if "=" in w)
            with traffic_cuda.counting() as launches:
                if op == "commit_kv":
                    layers, b, hkv, d, m = (int(kw[k]) for k in ("L", "B", "Hkv", "D", "m"))
                    c = torch.zeros(layers, 2, b, 1024, hkv, d, dtype=torch.bfloat16)
                    slots = torch.stack([torch.arange(m, dtype=torch.int32) * 2] * b)
                    cs = torch.full((b,), 512, dtype=torch.int32)
                    specops.commit_kv(c, cs, slots, backend="cuda_sim")
                elif op == "path_acceptance":
                    b, n, v = int(kw["B"]), int(kw["N"]), int(kw["V"])
                    tree = Tree.chain(n) if "chain" in shape else Tree.kary(4, 3)
                    g = gen(b + n)
                    p = probs((b, n, v), g, "cpu")
                    q = near(p, g)
                    specops.path_acceptance(p, q, tree, draw(q, g), backend="cuda_sim")
                else:
                    r, v, k = int(kw["R"]), int(kw["V"]), int(kw["k"])
                    p = probs((r, v), gen(r + v), "cpu")
                    specops.sample_without_replacement(p, k, seed=1, backend="cuda_sim")
            out += [(op, shape, us, t) for t in launches]
    return out


# Left out of the fit (reported beside it): compute-bound kernels, which the model cannot see.
# sample_without_replacement draws a Philox uniform and takes two logs per vocabulary entry;
# verify_tree at 940f467 divided every entry of a residual row by a float64 sum (one float64
# division an entry; the reciprocal came later).
COMPUTE_BOUND = ("sample_without_replacement", "verify_tree@940f467")

# Kernels counted as built at the commit their H200 rows measured: the counting commit (6177bf4)
# cherry-picked onto that commit, built with `ninja _traffic`, run over that commit's bench
# inputs (docs/gpu_cost.md): (counts file, measured CSV, ops).
OLD_COMMITS = [
    ("traffic-2460aef-verify_chain.json", "h200-2460aef-chain.csv", ("verify_chain",)),
    ("traffic-940f467-sample-verify_tree.json", "h200-940f467.csv", ("sample", "verify_tree")),
]


def _old_commit_traffic() -> list[tuple[str, str, float, KernelTraffic]]:
    """The OLD_COMMITS kernels' counts beside their measured medians, op named ``op@commit``."""
    import csv
    import json
    import os

    here = os.path.join(os.path.dirname(__file__), "results")
    out = []
    for counts, measured_csv, ops in OLD_COMMITS:
        commit = counts.split("-")[1]
        measured = {}
        with open(os.path.join(here, measured_csv)) as f:
            for row in csv.DictReader(f):
                if row["op"] in ops and row["backend"] == "cuda":
                    measured[(row["op"], row["shape"])] = float(row["median_us"])
        with open(os.path.join(here, counts)) as f:
            launches = json.load(f)["launches"]
        for r in launches:
            t = KernelTraffic(
                "cuda", r["kernel"], tuple(r["grid"]), r["bytes_read"], r["bytes_written"],
                r["requests"], r["sectors"], r["cta_bytes"], r["barriers"], r["cta_barriers"],
            )  # fmt: skip
            op = r.get("op", ops[0])
            if (op, r["shape"]) in measured:
                out.append((f"{op}@{commit}", r["shape"], measured[(op, r["shape"])], t))
    return out


GRID = (
    [x / 10 for x in range(10, 50)],  # launch us
    [2, 5, 10, 15, 20, 30, 40, 60, 80, 100, 150, 200, 300, 500, 1000],  # one CTA's GB/s
    [x / 20 for x in range(0, 61)],  # pass latency us
    [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0],  # sector excess
)


def _launches(t) -> list[KernelTraffic]:
    """A row's traffic: one launch, or the launches of one call (a split kernel's passes)."""
    return t if isinstance(t, list) else [t]


def predict_call_us(t, params=None) -> float:
    return sum(predict_us(x, params) for x in _launches(t))


def fit(rows) -> tuple[float, float, float, float]:
    """Least squares on log(predicted / measured) over GRID (four parameters, few rows),
    vectorised over the grid: each row's prediction is an array of the grid's shape."""
    import numpy as np

    rows = [r for r in rows if r[0] not in COMPUTE_BOUND]
    launch, cta, pass_us, excess = np.meshgrid(*(np.asarray(g, float) for g in GRID), indexing="ij")
    err = np.zeros(launch.shape)
    for _, _, us, t in rows:
        pred = np.zeros(launch.shape)
        for x in _launches(t):
            requested = x.bytes_read + x.bytes_written
            total = requested + excess * max(x.sectors * SECTOR - requested, 0)
            crit = x.critical_cta_bytes / (cta * 1e3) + x.critical_cta_barriers * pass_us
            pred += launch + np.maximum(total / (COPY_GBPS * 1e3), crit)
        err += np.log(pred / us) ** 2
    i = np.unravel_index(np.argmin(err), err.shape)
    return tuple(float(g[j]) for g, j in zip(GRID, i))


def errors(rows, params) -> tuple[float, float]:
    """(median, worst) factor between predicted and measured over ``rows``."""
    errs = sorted(abs(math.log(predict_call_us(t, params) / us)) for _, _, us, t in rows)
    return math.exp(errs[len(errs) // 2]), math.exp(errs[-1])


def held_out(rows) -> dict[str, tuple[float, float]]:
    """Leave one kernel family out (op, with its @commit), fit on the rest, and the family's
    (median, worst) error under that fit: how the model does on a kernel it has not seen."""
    fitted = [r for r in rows if r[0] not in COMPUTE_BOUND]
    out = {}
    for fam in dict.fromkeys(r[0] for r in fitted):
        rest = [r for r in fitted if r[0] != fam]
        out[fam] = errors([r for r in fitted if r[0] == fam], fit(rest))
    return out


def main() -> int:
    rows = _calibration_traffic() + _old_commit_traffic()
    params = fit(rows)
    print(
        f"fitted: LAUNCH_US={params[0]} CTA_GBPS={params[1]} PASS_US={params[2]} "
        f"SECTOR_EXCESS={params[3]}"
    )
    print("| op | shape | measured us | predicted us | ratio |")
    print("| --- | --- | --- | --- | --- |")
    ratios = []
    for op, shape, us, t in rows:
        pred = predict_us(t, params)
        ratios.append(pred / us)
        print(f"| {op} | {shape} | {us:.2f} | {pred:.2f} | {pred / us:.2f} |")
    errs = sorted(abs(math.log(r)) for r, (op, *_) in zip(ratios, rows) if op not in COMPUTE_BOUND)
    med = math.exp(errs[len(errs) // 2])
    print(f"fitted rows: median error x{med:.2f}, worst x{math.exp(errs[-1]):.2f}")
    print("held out (fit without the family, then predict it): family | median | worst")
    for fam, (m, w) in held_out(rows).items():
        print(f"| {fam} | x{m:.2f} | x{w:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
