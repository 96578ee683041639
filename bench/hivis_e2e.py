"""HiViS on the embedded model: the drafter's prefill over the prompt and hidden visual tokens
(issue 12 item 3), end to end:

    python -m bench.hivis_e2e [--rows 4 8 12] [--seeds 0 1 2] [--temperatures 1 0]
                              [--tree dynamic|chain] [--out FILE]

VLM-style setting: the embedded target completes an image.  Its prompt is the class token (the
"text") followed by the first 16 * rows tokens of a reference image (the image prefix, the visual
tokens; one held-out image per class, ``make_dataset(1, seed=12345)``), and it generates the
remaining 256 - 16 * rows tokens.  Same prompts, seeds and tree (EAGLE-2 dynamic, branch 4,
depth 5, 24 nodes) for every row of the table:

- ``no prefill``: the drafter starts from the last prompt position alone ([e(s_1) || f_{P-1}]);
- ``prefill``: the drafter reads the whole prompt (HiViS Eq. 3 without hiding; EAGLE);
- ``hide``: the image prefix hidden (``hide=``), compact drafter positions (the paper's);
- ``hide, tgt pos``: hidden, the drafter at the target's position ids (the 2D-RoPE grid cells);
- ``HiViS drafter``: the drafter trained for hidden prefixes (``specops.models.train_hivis``),
  hidden with target positions (``--hivis-positions compact``: compact ones, for a drafter
  trained with ``train_hivis --positions compact`` and given by ``--hivis-weights DIR``), and
  the same drafter reading the whole prompt.

Columns: the drafter's prefill length (entries, mean over requests) and its share of the
target's prompt, step compression (generated tokens / target passes, the prefill pass counted)
and mean accepted length (tokens emitted per verification step, bonus included), each the mean
over the seeds with the standard deviation across seeds; wall seconds for all seeds.  Greedy
runs also check that the tokens equal greedy AR decoding.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specops.decode import ar, speculative
from specops.models.data import make_dataset
from specops.models.loading import load_default
from specops.models.train_hivis import load_hivis_drafter

from .harness import e2e_table, greedy_seeds


def prompts(m, rows: int):
    """[class, t_1 .. t_{16 rows}] of one held-out image per class, and the mask of the image
    positions."""
    images, labels = make_dataset(1, seed=12345)
    tok = m.vq.encode(images).reshape(len(images), -1).long()
    k = m.cfg.grid * rows
    p = torch.cat([torch.as_tensor(labels)[:, None] + m.cfg.vocab, tok[:, :k]], 1)
    hide = torch.zeros_like(p, dtype=torch.bool)
    hide[:, 1:] = True
    return p, hide


def _ms(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="*", default=[4, 8, 12])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--temperatures", type=float, nargs="*", default=[1.0, 0.0])
    ap.add_argument("--tree", choices=["dynamic", "chain"], default="dynamic")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--hivis-weights", default=None, help="dir of drafter_hivis.pt (default: shipped)"
    )
    ap.add_argument("--hivis-positions", choices=["target", "compact"], default="target")
    ap.add_argument("--out", default=None, help="also append the table here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    m = load_default()
    hivis = load_hivis_drafter(m.target, weights_dir=args.hivis_weights)
    hpos = args.hivis_positions
    hlabel = "HiViS drafter: hide" + ("" if hpos == "target" else ", compact")
    tree = dict(tree="dynamic") if args.tree == "dynamic" else dict(tree=None, num_draft=4)
    head = (
        f"{'T':>3} {'rows':>4} {'prompt':>6} {'drafter / setting':<24} {'prefill':>7} "
        f"{'share':>6} {'step compr.':>13} {'accepted':>13} {'s':>5}"
    )
    setting = (
        f"10 image-completion prompts, {args.tree} tree, seeds {args.seeds} (greedy: first seed), "
        "mean +- std over seeds"
    )
    table = e2e_table("hivis_e2e", setting, head, args.out)
    out = []
    for temp in args.temperatures:
        seeds = greedy_seeds(temp, args.seeds)
        for rows in args.rows:
            prompt, hide = prompts(m, rows)
            length = m.cfg.grid**2 - prompt.shape[1] + 1
            ref = ar(m.target, prompt, length=length, temperature=0)[0] if temp == 0 else None
            runs = [
                ("no prefill", m.drafter, dict(drafter_prefill=False)),
                ("prefill", m.drafter, {}),
                ("hide", m.drafter, dict(hide=hide)),
                ("hide, tgt pos", m.drafter, dict(hide=hide, hide_positions="target")),
                ("HiViS drafter: prefill", hivis, {}),
                (hlabel, hivis, dict(hide=hide, hide_positions=hpos)),
            ]
            for label, drafter, kw in runs:
                t = time.perf_counter()
                sc, acc, pre = [], [], []
                for seed in seeds:
                    tok, st = speculative(
                        m.target, drafter, prompt, length=length, temperature=temp, seed=seed,
                        **tree, **kw,
                    )  # fmt: skip
                    if ref is not None and not torch.equal(tok, ref):
                        raise AssertionError(f"greedy {label} differs from greedy AR")
                    sc.append(st.step_compression)
                    acc.append(st.mean_accepted)
                    pre.append(st.extra["drafter_prefill"])
                dt = time.perf_counter() - t
                (s_m, s_d), (a_m, a_d) = _ms(sc), _ms(acc)
                r = dict(
                    temperature=temp, rows=rows, prompt=prompt.shape[1], setting=label,
                    drafter_prefill=pre[0], share=pre[0] / prompt.shape[1],
                    step_compression=s_m, step_compression_std=s_d,
                    mean_accepted=a_m, mean_accepted_std=a_d, wall_s=dt,
                )  # fmt: skip
                out.append(r)
                table.add(
                    f"{temp:>3g} {rows:>4} {prompt.shape[1]:>6} {label:<24} {pre[0]:>7.1f} "
                    f"{r['share']:>6.1%} {s_m:>7.2f}+-{s_d:<4.2f} {a_m:>7.2f}+-{a_d:<4.2f} "
                    f"{dt:>5.1f}"
                )
    table.save()
    return out


if __name__ == "__main__":
    main()
