"""PNG charts of benchmark rows (`specops bench --plot DIR`, or `--plot DIR --from-csv PATH`).

ratios.png: per op, per shape, each peer's time over the subject backend's time (> 1: specops is
faster), log scale, a line at 1.  bandwidth.png: per op, per shape, each backend's GB/s, with the
copy ceiling measured in the same run as a dashed line."""

from __future__ import annotations

import csv
import math
import os

from specops._optional import require

from .harness import Row

# which backend's row carries the ratios when several do (the compiled kernel first)
SUBJECT_ORDER = ("cuda", "triton", "cpu", "cascade")


def require_matplotlib() -> None:
    require("specops bench --plot", "matplotlib", extra="plot")


def read_csv(path: str) -> list[Row]:
    rows = []
    with open(path, newline="") as f:
        for d in csv.DictReader(f):
            rows.append(
                Row(
                    d["op"],
                    d["shape"],
                    d["backend"],
                    float(d["median_us"] or 0),
                    float(d["p20_us"] or 0),
                    float(d["p80_us"] or 0),
                    float(d["gbps"]) if d.get("gbps") else None,
                    d.get("ratios", ""),
                    d.get("note", ""),
                )
            )
    return rows


def parse_ratios(text: str) -> dict[str, float]:
    out = {}
    for part in filter(None, text.split(";")):
        name, _, val = part.partition("=")
        try:
            out[name] = float(val)
        except ValueError:
            continue
    return out


def ratio_series(rows: list[Row]) -> dict[str, dict[str, dict[str, float]]]:
    """op -> shape -> peer -> ratio, from the subject backend's row of each (op, shape)."""
    best: dict[tuple[str, str], Row] = {}
    for r in rows:
        if r.op == "ceiling" or not r.ratios or r.backend not in SUBJECT_ORDER:
            continue
        key = (r.op, r.shape)
        if key not in best or SUBJECT_ORDER.index(r.backend) < SUBJECT_ORDER.index(
            best[key].backend
        ):
            best[key] = r
    series: dict[str, dict[str, dict[str, float]]] = {}
    for (op, shape), r in best.items():
        ratios = parse_ratios(r.ratios)
        if ratios:
            series.setdefault(f"{op} ({r.backend})", {})[shape] = ratios
    return series


def bandwidth_series(rows: list[Row]) -> tuple[dict[str, dict[str, dict[str, float]]], float]:
    """op -> shape -> backend -> GB/s, and the copy ceiling (0 when not measured)."""
    series: dict[str, dict[str, dict[str, float]]] = {}
    ceiling = 0.0
    for r in rows:
        if r.op == "ceiling":
            if r.shape == "copy_gbps" and r.gbps:
                ceiling = r.gbps
            continue
        if r.gbps:
            series.setdefault(r.op, {}).setdefault(r.shape, {})[r.backend] = r.gbps
    return series, ceiling


def _grid(n: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, max(n, 1))
    rows = math.ceil(max(n, 1) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    return plt, fig, [ax for line in axes for ax in line]


def _bars(ax, by_shape: dict[str, dict[str, float]], log: bool) -> None:
    shapes = list(by_shape)
    names = sorted({k for v in by_shape.values() for k in v})
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(shapes))]
        ys = [by_shape[s].get(name, float("nan")) for s in shapes]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=6)
    if log:
        ax.set_yscale("log")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=6)


def _chart(series: dict, path: str, log: bool, decorate) -> str | None:
    """One panel per op of grouped bars (shape on x, one bar per series name); ``decorate(ax,
    op)`` adds the reference line and title.  -> path, or None when there is nothing to draw."""
    if not series:
        return None
    plt, fig, axes = _grid(len(series))
    for ax, (op, by_shape) in zip(axes, series.items()):
        _bars(ax, by_shape, log=log)
        decorate(ax, op)
    for ax in axes[len(series) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ratios(rows: list[Row], path: str) -> str | None:
    def decorate(ax, op):
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(f"{op}: peer time / specops time", fontsize=8)

    return _chart(ratio_series(rows), path, True, decorate)


def plot_bandwidth(rows: list[Row], path: str) -> str | None:
    series, ceiling = bandwidth_series(rows)

    def decorate(ax, op):
        if ceiling:
            ax.axhline(ceiling, color="black", ls="--", lw=0.8)
            ax.text(0, ceiling, f" copy {ceiling:.0f} GB/s", fontsize=6, va="bottom")
        ax.set_title(f"{op}: GB/s", fontsize=8)

    return _chart(series, path, False, decorate)


def write_all(rows: list[Row], out_dir: str) -> list[str]:
    """Both charts into ``out_dir``; -> the paths written (a chart with no data is skipped)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [
        plot_ratios(rows, os.path.join(out_dir, "ratios.png")),
        plot_bandwidth(rows, os.path.join(out_dir, "bandwidth.png")),
    ]
    return [p for p in paths if p]
