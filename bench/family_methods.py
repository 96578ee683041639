"""MC-SJD's couplings, SJD-PAC, GSD and LANTERN on each family's tiny checkpoint (issue 48).

The demo model's table (``python -m bench.methods --paper mc-sjd``, docs/methods.md) measures
what the methods gain; this one runs the same methods through ``specops.generate_image`` on the
tiny random checkpoints of every family ``specops generate`` reads (specops/imagegen/tiny.py:
LlamaGen, Janus, Emu3, Chameleon / Lumina-mGPT), same prompts and seeds, one run.  Their weights
are random, so the numbers say that each family's pipeline runs each method and how a near-flat
target accepts, not what a trained model gains.  GSD's codebook is indexed by the ids each loop
draws (``Pipeline.grouping``: VQ codes for LlamaGen and Janus's head, BPE ids mapped to their
codes for Emu3 and Chameleon); LANTERN's neighbour table is built over VQ codes, so its row is
LlamaGen's only.

    .venv/bin/python -m bench.family_methods [--seeds 0 1] [--families llamagen janus ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

import specops
from specops.imagegen import tiny
from specops.imagegen.pipeline import generate_image, load_pipeline

FAMILIES = ("llamagen", "janus", "emu3", "chameleon")
COUPLED = [
    ("AR", "ar", {}),
    ("SJD (L 16)", "sjd", dict(window=16)),
    ("SJD (L 16) + maximal", "sjd", dict(window=16, coupling="maximal")),
    ("SJD (L 16) + gumbel", "sjd", dict(window=16, coupling="gumbel")),
    ("SJD-PAC (L 16, K 2, D 2)", "sjd_pac", dict(window=16, branch=2, depth=2)),
    ("SJD-PAC + gumbel", "sjd_pac", dict(window=16, branch=2, depth=2, coupling="gumbel")),
]


def _relaxed(family, pipe) -> list:
    """GSD's row on every family (``Pipeline.grouping``: the codes indexed by the drawn ids);
    LANTERN's where the loop draws the VQ codes themselves (LlamaGen)."""
    rows = [("SJD (L 16) + GSD (w 7, p 0.15, d 2.5)", "sjd",
             dict(window=16, relax=pipe.grouping(d_threshold=2.5)))]  # fmt: skip
    if family == "llamagen":
        cb = pipe.vq.codebook.detach().float()
        rows.append(("SJD (L 16) + LANTERN (k 8, delta 0.2)", "sjd",
                     dict(window=16, relax=specops.decode.lantern(cb, 8, 0.2))))  # fmt: skip
    return rows


def _cond(family):
    return dict(class_id=[1, 2]) if family == "llamagen" else dict(prompt="a red fox")


def run_family(family: str, root: Path, seeds) -> list[str]:
    size = {"llamagen": dict(image_size=128), "janus": dict(grid=8)}.get(family, {})
    path = tiny.WRITERS[family](root / family, levels=2, **size)  # 8 x 8 codes where it can
    load = {"emu3": dict(image_size=64), "chameleon": dict(image_size=64)}.get(family, {})
    pipe = load_pipeline(path, **load)  # 8 x 8 codes
    rows = []
    for name, method, opts in COUPLED + _relaxed(family, pipe):
        comp, passes, wall = [], [], []
        for s in seeds:
            t0 = time.perf_counter()
            r = generate_image(pipe, method=method, seed=s, **_cond(family), **opts)
            wall.append(time.perf_counter() - t0)
            comp.append(r.stats.step_compression)
            passes.append(r.stats.mean_passes)
        n = len(seeds)
        rows.append(f"| {family} | {name} | {sum(comp) / n:.2f} | {sum(passes) / n:.1f} | "
                    f"{sum(wall) / n:.2f} |")  # fmt: skip
    return rows


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    head = [
        f"tiny family checkpoints (random weights), LlamaGen 2 classes a run, the others one "
        f"prompt, seeds {args.seeds}, "
        f"temperature and CFG as each pipeline's defaults; torch {torch.__version__}, commit "
        f"{os.environ.get('SPECOPS_COMMIT', '?')}, one thread",
        "",
        "| family | method | tokens / target pass | target passes / image | wall s / run |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for fam in args.families:
            rows += run_family(fam, Path(d), args.seeds)
    out = "\n".join(head + rows)
    print(out)
    return out


if __name__ == "__main__":
    main()
