"""One results table per seed paper, on the embedded visual AR model (issue 12 item 6):

    python -m bench.methods [--out docs/methods.md] [--classes 0 1 ... 7] [--seeds 0 1]
                            [--papers sjd-pac vvs spec-llava ...] [--threads 1]

Every paper's method runs through ``specops.decode`` under the paper's own sampling settings
(temperature, CFG and top-k where the paper states them, scaled to our 512-entry codebook),
next to the baselines the paper compares against, on the same class prompts and seeds.  Each
table gives step compression (= TPF: generated tokens / target passes charged per request, pooled
over prompts and seeds, with the range over seeds), the mean tokens emitted per verified step
(= mean accepted length, bonus token included) and the accepted-length histogram, with the
paper's own headline figure beside it for orientation only: the paper measured a 7B model on
MS-COCO/LLaVA benchmarks, we measure a 0.9M-parameter model on procedural 64x64 images.
Writes the markdown file (``--out``) and prints it.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import specops
from specops.decode import ar, sjd, sjd_pac, speculative, vvs
from specops.decode.vvs import lantern
from specops.models.loading import load_default
from specops.models.train_hivis import load_hivis_drafter

from .harness import git_commit
from .hivis_e2e import prompts as hivis_prompts

TREE = dict(branch=4, depth=5, num_nodes=24)  # the demo's EAGLE-2 budget
HIST_BINS = 8  # histogram columns 1 .. 7 and "8+"


@dataclass
class Run:
    label: str
    fn: Callable  # (models, classes, seed) -> (tokens, Stats)
    paper: str = ""  # the paper's own figure for this row, as the paper states it


@dataclass
class Paper:
    key: str
    title: str
    settings: str  # what we ran, and how it maps to the paper's setting
    headline: str  # the paper's headline claim, quoted with its table/section
    runs: list[Run] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # column -> (pooled Stats list -> str)


def _tree(m, c, s, **kw):
    return speculative(m.target, m.drafter, c, tree="dynamic", **TREE, seed=s, **kw)


def sjd_pac_paper(length=None) -> Paper:
    # Lumina-mGPT samples with top-2000 over Chameleon's 8192-code image vocabulary (24%), CFG 3,
    # temperature 1 (SJD-PAC Sec. 5.1); the same share of our 512 codes is 125.
    kw = dict(temperature=1.0, top_k=125, cfg_scale=3.0, length=length)
    return Paper(
        "sjd-pac",
        "SJD-PAC: proactive drafting and adaptive continuation (paper 001)",
        "temperature 1, CFG 3, top-k 125 of 512 (the paper's top-2000 of 8192 image codes, same "
        "share); window L = 64, K = 4 branches, depth D = 3 (the paper's); SJD at the same window.",
        "Lumina-mGPT on MS-COCO: SJD-PAC 4.51x step compression, 3.80x wall-clock; the paper "
        "puts EAGLE at 2.10x and SJD at 2.05x (Sec. 5.2, Table 1).",
        [
            *baseline_runs(kw, "EAGLE-2 tree (24 nodes)", ("1.00x", "EAGLE 2.10x")),
            *jacobi_runs("", kw, ("2.05x", "4.51x")),
            # the demo's sampling (no CFG, no top-k), where the drafts are not diluted by guidance
            *jacobi_runs(", no CFG/top-k", dict(length=length), ("", "")),
        ],
    )


def baseline_runs(kw: dict, eagle: str, paper: tuple[str, str]) -> list[Run]:
    """AR and the EAGLE-2 tree (the demo's budget, labelled ``eagle``) with sampling ``kw``."""
    return [
        Run("AR", lambda m, c, s: ar(m.target, c, seed=s, **kw), paper[0]),
        Run(eagle, lambda m, c, s: _tree(m, c, s, **kw), paper[1]),
    ]


def jacobi_runs(tag: str, kw: dict, paper: tuple[str, str]) -> list[Run]:
    """SJD and SJD-PAC (K 4, D 3: the paper's) at the paper's window L = 64 with sampling ``kw``."""
    return [
        Run(
            f"SJD (L 64){tag}", lambda m, c, s: sjd(m.target, c, window=64, seed=s, **kw), paper[0]
        ),  # fmt: skip
        Run(
            f"SJD-PAC (L 64, K 4, D 3){tag}",
            lambda m, c, s: sjd_pac(m.target, c, window=64, branch=4, depth=3, seed=s, **kw),
            paper[1],
        ),
    ]


def vvs_paper(length=None) -> Paper:
    # VVS fixes temperature 1 (Sec. 5, Baselines) and does not restate LlamaGen's CFG / top-k, so
    # none is applied here.  TPF counts only the target passes a request verified in.
    kw = dict(temperature=1.0, length=length)

    def run_vvs(delta, **opts):
        return lambda m, c, s: vvs(
            m.target, m.drafter, c, m.vq.latents, relax=lantern(m.vq.latents, delta=delta),
            **TREE, seed=s, **opts, **kw,
        )  # fmt: skip

    return Paper(
        "vvs",
        "VVS: partial verification skipping (paper 000)",
        "temperature 1 (the paper's; it states no CFG or top-k for LlamaGen, none applied); "
        "EAGLE-2 drafting with the demo's 24-node budget; LANTERN relaxation over the 16 nearest "
        "codebook latents; VVS-U = skip every i-th verification, VVS-D = skip by path similarity "
        "S over all root-to-leaf paths (Algorithm 1).",
        "LlamaGen-XL on MS-COCO, TPF: EAGLE-2 1.22, LANTERN 1.83-2.10, VVS-U 2.24-2.86 (Table 1); "
        "'up to 3.1x TPF' at delta 0.2, s 0.65 (Sec. 5.1).",
        [
            *baseline_runs(kw, "EAGLE-2 (exact)", ("1.00", "1.22")),
            Run(
                "LANTERN (delta 0.2)",
                lambda m, c, s: _tree(m, c, s, relax=lantern(m.vq.latents, delta=0.2), **kw),
                "1.83 (Stage II, delta 0.2)",
            ),
            Run(
                "VVS-U (i 2, delta 0.1)",
                run_vvs(0.1, schedule="interval", interval=2),
                "2.86 (Stage II)",
            ),  # fmt: skip
            Run("VVS-D (S 0.7, delta 0.1)", run_vvs(0.1, threshold=0.7), "(Fig. 7 only)"),
            Run("VVS-D (S 0.65, delta 0.2)", run_vvs(0.2, threshold=0.65), "up to 3.1"),
        ],
        {"skipped steps": lambda sts: f"{sum(s.extra.get('skipped_steps', 0) for s in sts)}"},
    )


def spec_llava_paper(length=None) -> Paper:
    # Spec-LLaVA compares greedy decoding against greedy speculative decoding (Sec. 4).  Greedy
    # image decoding is nearly deterministic on this model (drafts almost always accepted), so
    # the same rows at temperature 1 are added to show the trees under real uncertainty.
    runs = []
    for t in (0.0, 1.0):
        kw = dict(temperature=t, length=length)
        tag = "greedy" if t == 0 else "T 1"
        runs += [
            Run(f"AR ({tag})", lambda m, c, s, kw=kw: ar(m.target, c, seed=s, **kw), "1.00x"),
            Run(
                f"single path, chain 4 ({tag})",
                lambda m, c, s, kw=kw: speculative(
                    m.target, m.drafter, c, tree=None, num_draft=4, seed=s, **kw
                ),
                "baseline" if t == 0 else "",
            ),
            Run(f"EAGLE-2 tree ({tag})", lambda m, c, s, kw=kw: _tree(m, c, s, **kw), ""),
            Run(
                f"confidence tree, entropy 0.5 ({tag})",
                lambda m, c, s, kw=kw: speculative(
                    m.target, m.drafter, c, tree="confidence", threshold=0.5, **TREE, seed=s, **kw
                ),
                "+15-20% accepted length over single path" if t == 0 else "",
            ),
        ]
    return Paper(
        "spec-llava",
        "Spec-LLaVA: confidence-driven dynamic trees (paper 004)",
        "greedy (the paper's; bit-exact with greedy AR), then the same at temperature 1; single "
        "path = a 4-token chain; EAGLE-2 and the confidence tree share the demo's budget (branch "
        "4, depth 5, 24 nodes); the confidence tree expands only the top-1 child of a node whose "
        "drafter entropy is below 0.5 nats.",
        "LLaVA-1.5 7B/13B on COCO: up to 3.28x speed-up; branching under uncertainty improves "
        "acceptance length by 15-20% over a single path (Sec. 4, Table 2).",
        runs,
        {
            "tree nodes": lambda sts: (
                f"{sum(s.extra['mean_tree_nodes'] for s in sts) / len(sts):.1f}"
                if "mean_tree_nodes" in sts[0].extra
                else ""
            )
        },
    )


def hivis_paper(length=None) -> Paper:
    # HiViS is a VLM method: the image-completion setting of bench.hivis_e2e stands in for it (the
    # class token is the text, the first 8 rows of a held-out image of that class the visual
    # prefix, 129 prompt tokens); the paper reports temperature 0 first, then 1.
    rows = 8

    def run(drafter: str, t: float, hide: bool = False, **opts):
        def fn(m, c, s):
            prompt, mask = hivis_prompts(m, rows)
            n = m.cfg.grid**2 - prompt.shape[1] + 1
            d = load_hivis_drafter(m.target) if drafter == "hivis" else m.drafter
            kw = dict(opts, hide=mask[c]) if hide else opts
            return speculative(m.target, d, prompt[c], tree="dynamic", **TREE, seed=s,
                               temperature=t, length=min(n, length or n), **kw)  # fmt: skip

        return fn

    runs = []
    for t in (0.0, 1.0):
        tag = "greedy" if t == 0 else "T 1"
        runs += [
            Run(f"EAGLE-2, no prefill ({tag})", run("ce", t, drafter_prefill=False), ""),
            Run(f"EAGLE-2, prefill ({tag})", run("ce", t), "EAGLE-2 baseline"),
            Run(f"hide visual tokens ({tag})", run("ce", t, hide=True), ""),
            Run(
                f"HiViS drafter, hide ({tag})",
                run("hivis", t, hide=True, hide_positions="target"),
                "tau +59-71% over EAGLE-2" if t == 0 else "",
            ),  # fmt: skip
        ]
    return Paper(
        "hivis",
        "HiViS: hiding visual tokens from the drafter (paper 002)",
        f"image completion as a VLM stand-in: prompt = class token (the text) + the first {rows} "
        "rows of a held-out image (128 visual tokens), 128 tokens generated; EAGLE-2 tree (branch "
        "4, depth 5, 24 nodes); greedy, then temperature 1; the HiViS drafter is "
        "`specops.models.train_hivis`'s, at the target's position ids.  Full study: "
        "`python -m bench.hivis_e2e` (bench/results/cpu-x86_64-2core-hivis.log).",
        "LLaVA-Next 7B/13B: the drafter's prefill is 0.7-1.3% of the target's input, up to 2.65x "
        "speed-up, average acceptance length 71% (ChartQA) and 59% (ScienceQA) above EAGLE-2 at "
        "temperature 0 (Table 1).",
        runs,
        {"drafter prefill": lambda sts: f"{sts[0].extra.get('drafter_prefill', 0):.0f}"},
    )


def vsd_paper(length=None) -> Paper:
    # VSD reports tau at temperatures 0 and 1 (Sec. 5, batch 1) for its drafter against the same
    # drafter architecture trained without the path term.
    runs = []
    for t in (0.0, 1.0):
        tag = "greedy" if t == 0 else "T 1"
        for tree, label in ((None, "chain 4"), ("dynamic", "EAGLE-2 tree")):
            for name in ("ce", "vsd"):
                opts = dict(tree=None, num_draft=4) if tree is None else dict(tree=tree, **TREE)
                fn = lambda m, c, s, name=name, opts=opts, t=t: speculative(  # noqa: E731
                    m.target, m.drafter_named(name), c, seed=s, temperature=t, length=length,
                    **opts,
                )  # fmt: skip
                paper = "+7.6% tau (LLMs), +7.9% (MLLMs)" if name == "vsd" and tree else ""
                runs.append(Run(f"{label}, {name.upper()} drafter ({tag})", fn, paper))
    return Paper(
        "vsd",
        "VSD: drafter training for sequence acceptance (paper 003)",
        "greedy and temperature 1 (the paper's); the shipped CE drafter (`drafter.pt`) against "
        "the VSD drafter (`drafter_vsd.pt`: the CE drafter fine-tuned 300 steps with the path-"
        "level objective, `python -m specops.models.train --only-drafter --objective vsd`); a "
        "4-token chain and the demo's EAGLE-2 tree.  Greedy decoding of these class prompts "
        "accepts whole drafts in 98% of steps with either drafter, so only T 1 separates them.  "
        "The same-schedule CE-only control (which gains as much: the path term's own effect is "
        "nil on this model) and the "
        "offline Eq. 11 check: `python -m bench.drafters_e2e` "
        "(bench/results/cpu-x86_64-2core-drafters.log).",
        "EAGLE-3 + VSD on LLaMA-3.1-8B etc.: acceptance length +7.6%, speed-up +9.6%; LLaVA-1.5 "
        "with ViSpec + VSD: +7.9% acceptance length, +7.3% speed-up (Sec. 5, Tables 1-2).",
        runs,
    )


def _gsd(m):
    """GSD's grouping over the demo's 512 VQ codes: the authors' window 7 and probability
    threshold 0.15; d 2.5 is the median squared distance from a code to its 16th nearest (the
    authors' 0.5 is on their codebook's scale), so a group's codes are about as near as
    LANTERN's 16 neighbours."""
    return specops.Grouping(m.vq.latents, window=7, p_threshold=0.15, d_threshold=2.5)


def _lantern(m):
    return lantern(m.vq.latents, delta=0.2)


def mc_sjd_paper(length=None) -> Paper:
    # MC-SJD couples each Jacobi slot's redraw with its last draft (issue 48); its paper is not
    # among shared/papers: the headline is the summary of it.  Same window and tree as
    # the SJD-PAC table, under the demo's sampling and under that table's CFG 3 / top-k 125.
    runs = []
    cfg = dict(top_k=125, cfg_scale=3.0, length=length)
    for tag, kw in (("", dict(length=length)), (", CFG 3, top-k 125", cfg)):
        runs.append(Run(f"AR{tag}", lambda m, c, s, kw=kw: ar(m.target, c, seed=s, **kw)))
        for coupling in ("none", "maximal", "gumbel"):
            fn = lambda m, c, s, kw=kw, cp=coupling: sjd(  # noqa: E731
                m.target, c, window=64, coupling=cp, seed=s, **kw
            )
            name = "SJD (L 64)" + ("" if coupling == "none" else f" + {coupling}")
            runs.append(Run(name + tag, fn, "up to 4.2x over AR" if coupling != "none" else ""))
        for coupling in ("none", "gumbel"):
            fn = lambda m, c, s, kw=kw, cp=coupling: sjd_pac(  # noqa: E731
                m.target, c, window=64, branch=4, depth=3, coupling=cp, seed=s, **kw
            )
            name = "SJD-PAC (L 64, K 4, D 3)" + ("" if coupling == "none" else f" + {coupling}")
            runs.append(Run(name + tag, fn))
        for name, relax, claim in (
            ("SJD (L 64) + GSD (w 7, p 0.15, d 2.5)", _gsd, "3.7x over AR (Lumina-mGPT)"),
            ("SJD (L 64) + LANTERN (k 16, delta 0.2)", _lantern, ""),
        ):  # the lossy ones: same window, same prompts and seeds
            fn = lambda m, c, s, kw=kw, r=relax: sjd(  # noqa: E731
                m.target, c, window=64, relax=r(m), seed=s, **kw
            )
            runs.append(Run(name + tag, fn, claim))
    per_run = lambda attr: lambda st: f"{sum(getattr(s, attr) for s in st) / len(st):.2f}"  # noqa: E731
    return Paper(
        "mc-sjd",
        "MC-SJD: coupled Jacobi drafts (arXiv 2510.24211), beside GSD and LANTERN (issue 48)",
        "temperature 1, the demo's sampling (no CFG, no top-k), then CFG 3 with top-k 125 as in "
        "the SJD-PAC table; window L = 64, SJD-PAC with K = 4, D = 3.  SJD redraws the slots after "
        "a rejection afresh (none), keeps each old token with probability min(1, p/q) else draws "
        "from the residual (maximal), or draws every slot by Gumbel-max with noise keyed by its "
        "position, the same in every iteration (gumbel); SJD-PAC's continuation already is the "
        "maximal coupling, its fresh slots take Gumbel's.  All lossless "
        "(tests/test_decode_coupling.py) but the last two rows: SJD with GSD's grouped "
        "acceptance and with LANTERN's relaxed acceptance, both lossy.  s / run and specops "
        "s / run: wall and specops-op time of one run of all the prompts, mean over the seeds "
        "(Gumbel's noise is computed in PyTorch, in specops time).",
        "coupled drafts up to 4.2x over AR on images (issue 48's summary of the paper, which is "
        "not in shared/papers); SJD-PAC's Table 1 puts plain SJD at 2.05x.",
        runs,
        extra={"s / run": per_run("wall_s"), "specops s / run": per_run("specops_s")},
    )


PAPER_TABLES = {
    "sjd-pac": sjd_pac_paper,
    "vvs": vvs_paper,
    "spec-llava": spec_llava_paper,
    "hivis": hivis_paper,
    "vsd": vsd_paper,
    "mc-sjd": mc_sjd_paper,
}


def pooled(stats: list) -> tuple[float, float, float, list[float], float]:
    """-> (step compression pooled over seeds, min, max over seeds, histogram shares, mean
    accepted length)."""
    per_seed = [s.step_compression for s in stats]
    tokens = sum(s.tokens * s.batch for s in stats)
    passes = sum(sum(s.passes_per_request) for s in stats)
    hist = [0] * (HIST_BINS + 1)
    for s in stats:
        for n, cnt in enumerate(s.accept_hist):
            hist[min(n, HIST_BINS)] += cnt
    steps = max(sum(hist[1:]), 1)
    shares = [h / steps for h in hist[1:]]
    emitted = sum(sum(n * c for n, c in enumerate(s.accept_hist)) for s in stats)
    mean_acc = emitted / steps  # from the unbinned histograms
    return tokens / max(passes, 1), min(per_seed), max(per_seed), shares, mean_acc


def paper_table(paper: Paper, m, classes, seeds) -> list[str]:
    head = ["method", "step compr. (TPF)", "range over seeds", "mean accepted", "accepted length"]
    head += list(paper.extra) + ["wall s", "paper"]
    lines = [
        f"## {paper.title}",
        "",
        f"**Settings.** {paper.settings}",
        "",
        f"**Paper.** {paper.headline}",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(head) - 2) + ["---"]) + " |",
    ]
    for run in paper.runs:
        t = time.perf_counter()
        stats = [run.fn(m, classes, seed)[1] for seed in seeds]
        wall = time.perf_counter() - t
        sc, lo, hi, shares, mean_acc = pooled(stats)
        hist = " ".join(f"{100 * x:.0f}" for x in shares)
        cells = [run.label, f"{sc:.2f}", f"{lo:.2f}-{hi:.2f}", f"{mean_acc:.2f}", hist]
        cells += [f(stats) for f in paper.extra.values()] + [f"{wall:.0f}", run.paper]
        lines.append("| " + " | ".join(cells) + " |")
        print(f"  {paper.key}: {run.label}: {sc:.2f} ({wall:.0f}s)", flush=True)
    lines += [
        "",
        "Accepted length: % of verified steps that emitted 1, 2, ..., 7, 8+ tokens.",
        "",
    ]
    return lines


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="docs/methods.md")
    ap.add_argument("--papers", nargs="*", default=list(PAPER_TABLES), choices=list(PAPER_TABLES))
    ap.add_argument("--classes", type=int, nargs="*", default=list(range(8)))
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--length", type=int, default=None, help="tokens per image (default all 256)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    specops.set_num_threads(args.threads)
    m = load_default()
    classes = torch.tensor(args.classes)
    cmd = "python -m bench.methods" + (" " + " ".join(argv) if argv else "")
    lines = [
        "# The seed papers' methods on the embedded model",
        "",
        f"Generated by `{cmd}` at commit {git_commit()} on {platform.machine()} CPU "
        f"({args.threads} thread(s)), torch {torch.__version__}: {len(classes)} class prompts x "
        f"seeds {args.seeds}, {args.length or 256} image tokens each, on the embedded "
        f"{sum(p.numel() for p in m.target.parameters()) / 1e6:.1f}M-parameter visual AR model "
        "and its feature drafter.  Regenerate with that command; `tests/test_methods_doc.py` "
        "checks that every paper has its table.",
        "",
        "Step compression (TPF) = generated tokens / target forward passes charged to each "
        "request (the prefill pass included, so AR is exactly 1.00).  The paper column is the "
        "paper's own figure, for orientation: a 7B model on real benchmarks, not this model.",
        "",
    ]
    t0 = time.perf_counter()
    for key in args.papers:
        lines += paper_table(PAPER_TABLES[key](args.length), m, classes, args.seeds)
    lines.append(f"Total {time.perf_counter() - t0:.0f} s.")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
