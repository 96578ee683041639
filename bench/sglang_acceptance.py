"""Accepted tokens per verification step on SGLang-style EAGLE trees: SGLang's target-only tree
sampling (``tree_speculative_sampling_target_only``: the draft distribution is not used) against
specops's lossless verification that uses it
(``specops.compat.sglang_verify.tree_speculative_sampling``: ``verify_tree``, with and without
replacement), on the same trees, drafts and targets.

    python -m bench.sglang_acceptance [--vocab 1000] [--requests 2000] [--seeds 0 1 2]

Synthetic, image-like (high-entropy) distributions: per node, target logits ~ N(0, s^2) over V
(s = --spread), the draft's logits the target's plus N(0, e^2) noise (e = --draft-error: how far
the drafter is from the target), both softmaxed.  Trees: complete 3-ary, depth 4 (1 + 3 + 9 + 27
+ 81 = 121 nodes), children of node n drawn from node n's draft distribution (independently, or
without replacement).  Prints the mean accepted length per step (+- sd over seeds) and the ratio.
An accepted-length comparison only (no timing): losslessness of both is tested in
tests/test_compat_sglang_verify.py."""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch

from specops.compat.sglang_verify import (
    tree_speculative_sampling,
    tree_speculative_sampling_target_only,
)


def kary_lists(k: int, depth: int):
    """A complete k-ary tree of the given depth as SGLang's lists (nodes breadth-first)."""
    parents = [-1]
    frontier = [0]
    for _ in range(depth):
        nxt = []
        for p in frontier:
            for _ in range(k):
                parents.append(p)
                nxt.append(len(parents) - 1)
        frontier = nxt
    n = len(parents)
    first, sib = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):
        sib[i], first[parents[i]] = first[parents[i]], i
    return parents, first, sib


def synthetic(bs, vocab, k, depth, spread, draft_error, wor, g):
    """(candidates, next_token, next_sibling, target_probs, draft_probs) for bs requests."""
    parents, first, sib = kary_lists(k, depth)
    n = len(parents)
    logits = torch.randn(bs, n, vocab, generator=g) * spread
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits + torch.randn(bs, n, vocab, generator=g) * draft_error, -1)
    cand = torch.zeros(bs, n, dtype=torch.long)
    for p in range(n):
        kids = [i for i in range(1, n) if parents[i] == p]
        if not kids:
            continue
        drawn = torch.multinomial(draft[:, p], len(kids), replacement=not wor, generator=g)
        cand[:, kids] = drawn
    nt = torch.tensor(first).expand(bs, n).contiguous()
    ns = torch.tensor(sib).expand(bs, n).contiguous()
    return cand, nt, ns, target, draft


def accepted(fn, cand, nt, ns, target, draft, steps, g, **kw):
    bs, n = cand.shape
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, steps), -1, dtype=torch.int32)
    num = torch.zeros(bs, dtype=torch.int32)
    slot = torch.arange(bs * n).view(bs, n)
    fn(predicts, accept_index, num, cand, slot, nt, ns, torch.rand(bs, n, generator=g),
       torch.rand(bs, generator=g), target, draft.clone(), **kw)  # fmt: skip
    return num.double().mean().item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.sglang_acceptance")
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--spread", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    ap.add_argument("--draft-error", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    args = ap.parse_args(argv)
    k, depth = 3, 4
    print(f"vocab {args.vocab}, {args.requests} requests, 3-ary depth-4 trees (121 nodes), "
          f"seeds {args.seeds}; accepted drafts per step, mean +- sd over seeds")  # fmt: skip
    hdr = f"{'spread':>6} {'entropy':>7} {'draft err':>9} {'drafts':>8} {'target-only':>15}"
    print(hdr + f" {'specops':>15} {'ratio':>7}")
    for spread, err, wor in itertools.product(args.spread, args.draft_error, (False, True)):
        t_only, ours = [], []
        for seed in args.seeds:
            g = torch.Generator().manual_seed(seed)
            data = synthetic(args.requests, args.vocab, k, depth, spread, err, wor, g)
            t_only.append(accepted(tree_speculative_sampling_target_only, *data, depth + 1, g))
            ours.append(accepted(tree_speculative_sampling, *data, depth + 1, g,
                                 without_replacement=wor))  # fmt: skip
        mt, mo = statistics.mean(t_only), statistics.mean(ours)
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0  # noqa: E731
        p = data[3][:, 0]
        ent = -(p * p.clamp_min(1e-30).log()).sum(-1).mean().item()
        ratio = f"{mo / mt:7.1f}" if mt > 0 else f"{'-':>7}"
        print(f"{spread:>6} {ent:>7.2f} {err:>9} {'w/o repl' if wor else 'iid':>8} "
              f"{mt:>8.3f} +-{sd(t_only):.3f} {mo:>8.3f} +-{sd(ours):.3f} {ratio}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
