"""The main job: every decoding method on the embedded visual AR model, side by side.

    specops demo [--out demo_out/demo.png] [--classes 0 1 2 ...] [--device cpu|cuda]
    python -m specops.demo ...                      (the same)

Generates one image per class prompt with each method (one row per method, the same prompts
and seed), writes the grid as a PNG, a second PNG with each method's accepted-length histogram
(``<out>_accept.png``), and prints step compression (tokens / target forward passes), target
passes per image, wall time and the share of it spent in specops' decoding ops.  Needs pillow and
matplotlib (``pip install 'specops[demo]'``), checked before any work starts.  The
lossless methods (AR, speculative, SJD, SJD-PAC) sample the same distribution, so their rows
are different draws of the same model; VVS trades exactness for fewer passes.  ``spec-tree-vsd``
is ``spec-tree`` with the drafter fine-tuned by VSD's path-level objective (``drafter_vsd.pt``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

import specops
from specops._optional import require
from specops._progress import Progress
from specops.decode import progress
from specops.decode.ar import ar
from specops.decode.sjd import sjd
from specops.decode.sjd_pac import sjd_pac
from specops.decode.speculative import speculative
from specops.decode.vvs import vvs
from specops.models.loading import load_default

METHODS = ("ar", "spec-chain", "spec-tree", "spec-tree-vsd", "spec-conf", "sjd", "sjd-pac", "vvs")
WINDOW = 64  # SJD and SJD-PAC at the same window: the SJD-PAC paper's L


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
        draw.text((6, y + h * scale // 2 - 6), label, fill=(0, 0, 0))
        for j in range(b):
            tile = Image.fromarray(imgs[j]).resize((w * scale, h * scale), Image.NEAREST)
            canvas.paste(tile, (label_w + pad + j * (w * scale + pad), y))
    return np.asarray(canvas)


def format_table(stats: list) -> str:
    head = (
        f"{'method':<13} {'step compr.':>11} {'passes/img':>10} {'batched':>8} {'wall s':>8} "
        f"{'model s':>8} {'specops s':>9} {'specops %':>9}"
    )
    lines = [head, "-" * len(head)]
    for s in stats:
        lines.append(
            f"{s.method:<13} {s.step_compression:>11.2f} {s.mean_passes:>10.1f} "
            f"{s.target_passes:>8d} {s.wall_s:>8.2f} {s.model_s:>8.2f} {s.specops_s:>9.2f} "
            f"{100 * s.specops_share:>8.1f}%"
        )
    return "\n".join(lines)


def accept_hist_figure(stats: list, path: Path) -> None:
    """One panel per method: the share of decoding steps that emitted n tokens (n on x), with the
    mean; AR is a single bar at 1."""
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
        ax.set_title(f"{s.method}\nmean {s.mean_accepted:.2f}", fontsize=9)
        ax.set_xlabel("tokens per step", fontsize=8)
        ax.set_ylabel("share of steps", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(prog="specops demo", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="demo_out/demo.png", help="PNG path (default %(default)s)")
    ap.add_argument("--classes", type=int, nargs="*", default=list(range(10)))
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    ap.add_argument("--device", default="auto", help="auto (cuda when present), cpu or cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--cfg-scale", type=float, default=None, help="classifier-free guidance")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (default %(default)s)")
    ap.add_argument("--json", default=None, help="also write the table as JSON here")
    args = ap.parse_args(argv)
    require("specops demo", "PIL", "matplotlib", extra="demo")  # before any model work

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

    rows, labels, stats = [], [], []
    t0 = time.perf_counter()
    bar = Progress("demo", 0, unit="tokens")  # one method at a time, off when not a TTY
    for name in args.methods:
        with progress(bar.tokens(name)):
            tokens, st = run_method(
                name,
                m,
                classes,
                seed=args.seed,
                temperature=args.temperature,
                cfg_scale=args.cfg_scale,
            )
        bar.clear()
        st.method = name
        rows.append(m.vq.decode(tokens.cpu()))
        labels.append(f"{name}\n{st.step_compression:.2f}x")
        stats.append(st)
        print(f"  {st}", flush=True)
    total = time.perf_counter() - t0

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from PIL import Image

    Image.fromarray(image_grid(rows, labels)).save(out)
    hist_path = out.with_name(out.stem + "_accept.png")
    accept_hist_figure(stats, hist_path)
    print()
    print(format_table(stats))
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
            "rows": [s.row() | {"accept_hist": s.accept_hist, **s.extra} for s in stats],
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2, default=str))
    return stats


if __name__ == "__main__":
    from specops._optional import run_main

    raise SystemExit(run_main(main))
