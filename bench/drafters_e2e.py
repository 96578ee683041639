"""The CE drafter vs the VSD drafter, end to end on the embedded visual AR model (issue 12 item 2):

    python -m bench.drafters_e2e [--temperatures 1 0] [--classes 0 1 ... 9] [--seeds 0 1 2 3 4]
                                 [--drafters ce vsd] [--out FILE]

``load_default(drafter="ce")`` (token-level cross-entropy, ``drafter.pt``) and
``load_default(drafter="vsd")`` (fine-tuned with VSD's path-level objective, ``drafter_vsd.pt``)
drive ``speculative`` on the same class prompts, seeds and trees: a chain of K = 4 drafts and the
demo's EAGLE-2 dynamic tree (branch 4, depth 5, 24 nodes).  Per (temperature, tree, drafter):
the mean accepted length tau (tokens emitted per verification step, bonus token included) and the
step compression (tokens / target passes), as mean +- standard deviation over the seeds (each seed
is one batch of the class prompts), and the VSD/CE ratio of the seed means.  Greedy runs
(temperature 0) are deterministic, run once, and check the tokens against greedy AR decoding.

``--offline N`` first prints the quantity VSD trains on, measured without decoding noise: on N
held-out images (data seed 1; the drafters trained on seed 0) and 64 prefixes each, the mean
expected accepted length (Eq. 10-11) of 8 chains of 4 tokens sampled from each drafter, and the
share of those chains the oracle of Algorithm 2 accepts (kappa >= kappa of the greedy target path).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specops.decode import ar, speculative
from specops.models.loading import load_default

from .harness import class_setting, e2e_table, greedy_seeds

TREES = {
    "chain K=4": dict(tree=None, num_draft=4),
    "dynamic 4/5/24": dict(tree="dynamic", branch=4, depth=5, num_nodes=24),
}


def _ms(xs):
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def offline(models, n_images: int, threads: int) -> None:
    from specops.models.data import make_dataset
    from specops.models.train_vsd import chain_log_survival, rollout

    m0 = next(iter(models.values()))
    images, labels = make_dataset(-(-n_images // 10), seed=1)
    tokens = m0.vq.encode(images).reshape(len(images), -1)[:n_images]
    labels = torch.as_tensor(labels)[:n_images]
    seq = torch.cat([(labels + m0.cfg.vocab)[:, None], tokens], 1)
    starts = torch.arange(0, seq.shape[1] - 5, 4)[:64]
    s_n = 8
    print(f"offline: {n_images} held-out images x {starts.numel()} prefixes, S = {s_n}, L = 4")
    for d, m in models.items():
        with torch.no_grad():
            logq, logp = rollout(m.drafter, m.target, seq, starts, s_n, 4, torch.Generator())
        log_s = chain_log_survival(logp, logq)  # [B, M, 2S+1, L]
        e_len = log_s[:, :, :s_n].exp().sum(-1)  # Eq. 10 per drafter-sampled chain
        passed = (log_s[:, :, :s_n] >= log_s[:, :, s_n : s_n + 1]).float()[..., -1]
        print(f"  {d:<5} E[A] {e_len.mean().item():.4f}  oracle pass {passed.mean().item():.3f}")


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--temperatures", type=float, nargs="*", default=[1.0, 0.0])
    ap.add_argument("--classes", type=int, nargs="*", default=list(range(10)))
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--drafters", nargs="*", default=["ce", "vsd"])
    ap.add_argument("--trees", nargs="*", default=list(TREES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--offline", type=int, default=0, help="held-out images for Eq. 11 (0: off)")
    ap.add_argument("--weights", default=None, help="weights dir (default: the shipped ones)")
    ap.add_argument("--out", default=None, help="also append the table here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = {d: load_default(drafter=d, weights_dir=args.weights) for d in args.drafters}
    target = models[args.drafters[0]].target
    if args.offline:
        offline(models, args.offline, args.threads)
    cls = torch.tensor(args.classes)
    head = (
        f"{'T':>3} {'tree':<15} {'drafter':<7} {'tau (mean+-sd)':>15} "
        f"{'step compr. (mean+-sd)':>22} {'tau ratio':>9} {'s':>6}"
    )
    table = e2e_table("drafters_e2e", class_setting(cls, args.seeds), head, args.out)
    rows = []
    for temp in args.temperatures:
        seeds = greedy_seeds(temp, args.seeds)
        ref = ar(target, cls, temperature=0)[0] if temp == 0 else None
        for tree in args.trees:
            base = None
            for d in args.drafters:
                m = models[d]
                t = time.perf_counter()
                taus, comps = [], []
                for seed in seeds:
                    tok, st = speculative(
                        m.target, m.drafter, cls, temperature=temp, seed=seed, **TREES[tree]
                    )
                    if ref is not None and not torch.equal(tok, ref):
                        raise AssertionError(f"greedy {tree} with the {d} drafter differs from AR")
                    taus.append(st.mean_accepted)
                    comps.append(st.step_compression)
                dt = time.perf_counter() - t
                (tau, tau_sd), (comp, comp_sd) = _ms(taus), _ms(comps)
                base = base or tau
                r = dict(
                    temperature=temp, tree=tree, drafter=d, tau=tau, tau_sd=tau_sd,
                    step_compression=comp, step_compression_sd=comp_sd, tau_ratio=tau / base,
                    seeds=seeds, wall_s=dt,
                )  # fmt: skip
                rows.append(r)
                table.add(
                    f"{temp:>3g} {tree:<15} {d:<7} {tau:>8.3f}+-{tau_sd:<5.3f} "
                    f"{comp:>15.3f}+-{comp_sd:<5.3f} {tau / base:>9.3f} {dt:>6.1f}"
                )
    table.save()
    return rows


if __name__ == "__main__":
    main()
