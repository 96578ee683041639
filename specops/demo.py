"""The main job: every decoding method on the embedded visual AR model, side by side.

    specops demo [--out demo_out/demo.png] [--classes 0 1 2 ...] [--device cpu|cuda]
    python -m specops.demo ...                      (the same)

Generates one image per class prompt with each method (one row per method, the same prompts
and seed), writes the grid as a PNG and a second PNG with each method's accepted-length
histogram (``<out>_accept.png``), and prints, per method, the wall-clock speed-up against AR
measured in the same run, step compression, target passes per image and wall time; then the
same for a few methods on the first prompt alone (``--batch1``).  The lossless methods (AR,
speculative, SJD, SJD-PAC) sample the same distribution; VVS trades exactness for fewer
passes.  What it prints and checks, in full: docs/packaging.md, "specops demo".
"""

from __future__ import annotations

import json
import platform
import textwrap
import time
from pathlib import Path

import numpy as np
import torch

import specops
from specops._optional import MissingDependency, require
from specops._progress import Progress
from specops.cli_args import SEED, ArgumentParser, check_out_path, device_arg, float_in, int_in
from specops.decode import progress
from specops.decode.ar import ar
from specops.decode.sjd import sjd
from specops.decode.sjd_pac import sjd_pac
from specops.decode.speculative import speculative
from specops.decode.vvs import vvs
from specops.models.loading import WEIGHTS, load_default

METHODS = ("ar", "spec-chain", "spec-tree", "spec-tree-vsd", "spec-conf", "sjd", "sjd-pac", "vvs")
WINDOW = 64  # SJD and SJD-PAC at the same window: the SJD-PAC paper's L
BATCH1 = ("ar", "spec-chain", "sjd", "sjd-pac")  # also run on one prompt alone (--batch1)


def run_method(name: str, m, classes, *, seed: int, temperature: float, cfg_scale=None):
    """One method with the demo's settings -> (tokens [B, T], Stats)."""
    kw = dict(seed=seed, temperature=temperature, cfg_scale=cfg_scale)
    tree = dict(branch=4, depth=5, num_nodes=24)
    if name == "ar":
        return ar(m.target, classes, **kw)
    if name == "spec-chain":
        return speculative(m.target, m.drafter, classes, tree=None, num_draft=4, **kw)
    if name == "spec-tree":
        return speculative(m.target, m.drafter, classes, tree="dynamic", **tree, **kw)
    if name == "spec-tree-vsd":  # the same tree, drafter trained with VSD's path-level objective
        drafter = m.drafter_named("vsd")
        return speculative(m.target, drafter, classes, tree="dynamic", **tree, **kw)
    if name == "spec-conf":
        return speculative(m.target, m.drafter, classes, tree="confidence", threshold=0.5, **tree,
                           **kw)  # fmt: skip
    if name == "sjd":
        return sjd(m.target, classes, window=WINDOW, **kw)
    if name == "sjd-pac":
        return sjd_pac(m.target, classes, window=WINDOW, branch=4, depth=3, **kw)
    if name == "vvs":
        return vvs(m.target, m.drafter, classes, m.vq.latents, threshold=0.7, **tree, **kw)
    raise ValueError(f"unknown method {name!r}; choose from {METHODS}")


def image_grid(rows: list[np.ndarray], labels: list[str], scale: int = 2) -> np.ndarray:
    """rows of uint8 images [B, H, W, 3] -> one uint8 picture with a label strip per row."""
    from PIL import Image, ImageDraw

    b, h, w, _ = rows[0].shape
    pad, label_w = 4, 96
    H = len(rows) * (h * scale + pad) + pad
    W = label_w + b * (w * scale + pad) + pad
    canvas = Image.new("RGB", (W, H), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for i, (imgs, label) in enumerate(zip(rows, labels)):
        y = pad + i * (h * scale + pad)
        n = label.count("\n") + 1
        draw.multiline_text((6, y + h * scale // 2 - 6 * n), label, fill=(0, 0, 0), spacing=2)
        for j in range(b):
            tile = Image.fromarray(imgs[j]).resize((w * scale, h * scale), Image.NEAREST)
            canvas.paste(tile, (label_w + pad + j * (w * scale + pad), y))
    return np.asarray(canvas)


def speedups(stats: list, ar_stats) -> list[float]:
    """Each run's wall-clock speed-up against AR's run of the same batch: AR's wall time over
    its own."""
    return [ar_stats.wall_s / max(s.wall_s, 1e-9) for s in stats]


def step_costs(stats: list, ar_stats) -> list[float]:
    """Wall time of one batched target pass (with the drafting and verification around it) over
    AR's: a method is faster than AR when it saves more passes than this."""
    ar_step = ar_stats.wall_s / max(ar_stats.target_passes, 1)
    return [s.wall_s / max(s.target_passes, 1) / max(ar_step, 1e-12) for s in stats]


def format_table(stats: list, ar_stats=None) -> str:
    """The demo's table: wall-clock speed-up against AR (measured in the same run) first, then
    step compression (tokens per target pass) and what explains the gap between the two."""
    ar_stats = ar_stats or next(s for s in stats if s.method == "ar")
    head = (
        f"{'method':<13} {'speed-up vs AR (wall)':>21} {'tokens/target pass':>18} "
        f"{'passes/img':>10} {'batched':>7} {'step cost vs AR':>15} {'wall s':>7} "
        f"{'specops %':>9}"
    )
    lines = [head, "-" * len(head)]
    for s, up, cost in zip(stats, speedups(stats, ar_stats), step_costs(stats, ar_stats)):
        lines.append(
            f"{s.method:<13} {up:>20.2f}x {s.step_compression:>18.2f} {s.mean_passes:>10.1f} "
            f"{s.target_passes:>7d} {cost:>14.2f}x {s.wall_s:>7.2f} "
            f"{100 * s.specops_share:>8.1f}%"
        )
    return "\n".join(lines)


def explain(stats: list, single: list, batch: int, params_m: float) -> str:
    """What the tables say, in words, from this run's numbers (wrapped paragraphs)."""
    paras = [
        "speed-up vs AR (wall): AR's wall time over the method's, both measured in this run. "
        "tokens/target pass: the step compression the papers report, a speed-up only where a "
        "target pass costs the same whatever it computes. step cost vs AR: one batched target "
        "pass with its drafting and verification, over one AR pass; speed-up = (AR's batched "
        "passes / the method's) / step cost."
    ]
    if len(stats) > 1:
        rest = stats[1:]
        up, cost = speedups(rest, stats[0]), step_costs(rest, stats[0])
        best = max(range(len(rest)), key=up.__getitem__)
        fastest = f"fastest: {rest[best].method}, {up[best]:.2f}x"
        why = (
            f"the {params_m:.2f}M-parameter model stays in the CPU's cache, so a pass costs in "
            f"proportion to the tokens it computes ({batch} requests x a window or tree of "
            "drafts each)"
        )
        if up[best] < 1:
            paras.append(
                f"Batch {batch}: no method beats AR ({fastest}). A step costs "
                f"{min(cost):.1f}-{max(cost):.1f}x an AR step, more than the passes it saves: "
                f"{why}, so fewer passes do not mean less time."
            )
        else:
            paras.append(
                f"Batch {batch}: {sum(u > 1 for u in up)} of {len(rest)} methods beat AR "
                f"({fastest}). A step costs {min(cost):.1f}-{max(cost):.1f}x an AR step: {why}; "
                "a method gains only where it saves more passes than that."
            )
    if len(single) > 1:
        rest = single[1:]
        up, cost = speedups(rest, single[0]), step_costs(rest, single[0])
        each = ", ".join(f"{s.method} {u:.2f}x (step cost {c:.1f}x)" for s, u, c in
                         zip(rest, up, cost))  # fmt: skip
        head = (
            f"Batch 1 (one prompt, one thread), against AR's speed: {each}. A pass of one request "
            "computes few tokens, so its fixed cost weighs more and a window of drafts costs "
            "relatively less"
        )
        if max(up) >= 1.05:  # a clear gain, not a timing wobble
            tail = (
                ": this is where speculative decoding pays on this CPU, as on any target whose "
                "pass costs about the same for one token as for a window (a model read from "
                "memory at every pass: a large model at small batch; bench/hf_e2e.py runs a 220M "
                "Llama here)."
            )
        else:
            tail = ", but no method clearly beat AR even here in this run (a busy machine slows "
            tail += "small passes most)."
        paras.append(head + tail)
    return "\n".join(textwrap.fill(p, 100) for p in paras)


def accept_hist_figure(stats: list, path: Path) -> None:
    """One panel per method: the share of decoding steps that emitted n tokens (n on x), with the
    mean tokens per step (dashed); AR is a single bar at 1.  Each title gives both numbers, named:
    the table's tokens per target pass (tokens kept / passes) and the mean tokens a verified step
    emitted, those past the image's end in its last step included (so SJD-PAC's 7.43 per step is
    6.86 per pass); VVS's skipped tokens, emitted without a pass, count in the first only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cols = min(4, len(stats))
    rows = -(-len(stats) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    axes = [ax for line in axes for ax in line]
    for ax in axes[len(stats) :]:
        ax.axis("off")
    for ax, s in zip(axes, stats):
        hist = np.asarray(s.accept_hist, dtype=float)
        share = hist / max(hist.sum(), 1.0)
        ax.bar(np.arange(len(share)), share, color="#4878a8")
        ax.axvline(s.mean_accepted, color="#c0504d", lw=1.2, ls="--")
        ax.set_title(
            f"{s.method}: {s.step_compression:.2f} tokens/target pass\n"
            f"mean {s.mean_accepted:.2f} tokens/step (past the end incl.)",
            fontsize=8,
        )
        ax.set_xlabel("tokens emitted per step", fontsize=8)
        ax.set_ylabel("share of steps", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> ArgumentParser:
    ap = ArgumentParser(prog="specops demo", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="demo_out/demo.png", help="PNG path (default %(default)s)")
    arg = ap.add_argument
    arg("--classes", type=int_in(0), nargs="+", default=list(range(10)),
        help="class prompts, one image each (the model's classes: 0-9)")  # fmt: skip
    arg("--methods", nargs="+", default=list(METHODS), choices=METHODS,
        help="methods of the grid; AR always runs too (every speed-up is against it)")  # fmt: skip
    arg("--batch1", nargs="*", default=list(BATCH1), choices=METHODS, metavar="METHOD",
        help="methods also run on the first prompt alone, on one thread, against AR "
        f"(default {' '.join(BATCH1)}; none: skip)")  # fmt: skip
    arg("--device", type=device_arg(auto=True), default="auto",
        help="auto (cuda when present), cpu, cuda or cuda:N")  # fmt: skip
    arg("--seed", type=SEED, default=0, help="an int in [0, 2**63)")
    arg("--temperature", type=float_in(0), default=1.0, help=">= 0 (0: greedy)")
    arg("--cfg-scale", type=float_in(0, open_lo=True), default=None,
        help="classifier-free guidance scale (> 0)")  # fmt: skip
    arg("--threads", type=int_in(1, 1024), default=2, help="CPU threads (default %(default)s)")
    ap.add_argument("--json", default=None, help="also write the table as JSON here")
    return ap


def num_classes(weights_dir=None) -> int:
    """The embedded model's class count, read from its checkpoint's config (memory-mapped: no
    weights are loaded)."""
    path = Path(weights_dir or WEIGHTS) / "ar.pt"
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["config"]
               ["num_classes"])  # fmt: skip


def check_args(ap: ArgumentParser, args) -> None:
    """Every check before any work (parser.error: one line, exit 2, nothing written)."""
    try:
        require("the demo", "PIL", "matplotlib", extra="demo")
    except MissingDependency as e:
        ap.error(str(e))
    n = num_classes()
    bad = [c for c in args.classes if c >= n]
    if bad:
        ap.error(f"argument --classes: the embedded model has classes 0-{n - 1}, got {bad}")
    out = Path(args.out)
    for flag, path, suffix in (("--out", out, ".png"), ("--out", accept_path(out), ".png"),
                               ("--json", args.json, None)):  # fmt: skip
        why = None if path is None else check_out_path(flag, path, suffix=suffix)
        if why:
            ap.error(why)
    args.methods = list(dict.fromkeys(["ar", *args.methods]))  # AR first: the baseline
    args.batch1 = list(dict.fromkeys(["ar", *args.batch1])) if args.batch1 else []


def accept_path(out: Path) -> Path:
    return out.with_name(out.stem + "_accept.png")


def _run(name, m, classes, args, bar):
    """One method with the demo's settings and a progress line -> (tokens, Stats)."""
    kw = dict(seed=args.seed, temperature=args.temperature, cfg_scale=args.cfg_scale)
    with progress(bar.tokens(name)):
        tokens, st = run_method(name, m, classes, **kw)
    bar.clear()
    st.method = name
    return tokens, st


def run_batch1(m, classes, args, bar) -> list:
    """``args.batch1`` on the first prompt alone, on one CPU thread (passes this small do not
    split over threads), AR first."""
    threads = torch.get_num_threads(), specops.get_num_threads()
    if classes.device.type == "cpu":
        torch.set_num_threads(1)
        specops.set_num_threads(1)
    try:
        return [_run(name, m, classes[:1], args, bar)[1] for name in args.batch1]
    finally:
        torch.set_num_threads(threads[0])
        specops.set_num_threads(threads[1])


def main(argv=None) -> list:
    ap = parser()
    args = ap.parse_args(argv)
    check_args(ap, args)

    dev = args.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        torch.set_num_threads(args.threads)
    m = load_default(device=dev)
    classes = torch.tensor(args.classes, device=dev)
    print(
        f"specops demo: {len(args.classes)} class prompts x {len(args.methods)} methods on {dev}; "
        f"model {sum(p.numel() for p in m.target.parameters()) / 1e6:.2f}M params, "
        f"{m.cfg.grid}x{m.cfg.grid} tokens of a {m.vq.vocab_size}-entry codebook per image"
    )
    # warm-up: first calls pay for imports, kernel selection and allocator growth
    run_method("ar", m, classes[:1], seed=args.seed, temperature=args.temperature)

    rows, stats = [], []
    t0 = time.perf_counter()
    bar = Progress("demo", 0, unit="tokens")  # one method at a time, off when not a TTY
    for name in args.methods:
        tokens, st = _run(name, m, classes, args, bar)
        rows.append(m.vq.decode(tokens.cpu()))
        stats.append(st)
        up = stats[0].wall_s / max(st.wall_s, 1e-9)
        print(f"  {name}: {up:.2f}x AR's speed (wall {st.wall_s:.2f}s), "
              f"{st.step_compression:.2f} tokens/target pass", flush=True)  # fmt: skip
    single = run_batch1(m, classes, args, bar) if args.batch1 else []
    total = time.perf_counter() - t0

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)  # checked before the run; made only now
    from PIL import Image

    labels = [
        f"{s.method}\n{u:.2f}x AR wall\n{s.step_compression:.2f} tok/pass"
        for s, u in zip(stats, speedups(stats, stats[0]))
    ]
    Image.fromarray(image_grid(rows, labels)).save(out)
    hist_path = accept_path(out)
    accept_hist_figure(stats, hist_path)
    where = f"cpu, {args.threads} threads" if dev == "cpu" else dev
    print(f"\nbatch of {len(args.classes)} prompts ({where}):")
    print(format_table(stats, stats[0]))
    if single:
        one = ", one thread" if dev == "cpu" else ""
        print(f"\nbatch 1 (class {args.classes[0]} alone{one}):")
        print(format_table(single, single[0]))
    print()
    params_m = sum(p.numel() for p in m.target.parameters()) / 1e6
    print(explain(stats, single, len(args.classes), params_m))
    print(f"\nwrote {out} ({len(rows)} rows x {len(args.classes)} images) and {hist_path}; "
          f"total {total:.1f}s")  # fmt: skip
    if args.json:
        record = {
            "device": dev,
            "device_name": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor(),
            "torch": torch.__version__,
            "specops_build": specops.build_info(),
            "classes": args.classes,
            "seed": args.seed,
            "temperature": args.temperature,
            "cfg_scale": args.cfg_scale,
            "rows": [_record(s, stats[0]) for s in stats],
            "batch1_rows": [_record(s, single[0]) for s in single],
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2, default=str))
    return stats


def _record(s, ar) -> dict:
    up, cost = speedups([s], ar)[0], step_costs([s], ar)[0]
    return s.row() | {"speedup_vs_ar_wall": round(up, 3), "step_cost_vs_ar": round(cost, 3),
                      "accept_hist": s.accept_hist, **s.extra}  # fmt: skip


if __name__ == "__main__":
    from specops._optional import run_main

    raise SystemExit(run_main(main))
