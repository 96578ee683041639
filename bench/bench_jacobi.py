"""specops.verify_jacobi: the compiled kernels (C++ CPU twin / CUDA) vs the reference.

Cases at the issue's shape B=2 (CFG rows share the window), L=64, V=65536 (Lumina-mGPT):
  sjd        chain window, break at the first rejection (plain SJD)
  sjd_ac     chain window with adaptive continuation
  sjd_pac    the whole SJD-PAC step: Tree.kary_chain(3, 3, 64) window, continuation and 3
             proactive-drafting candidates per position
  sjd_pac root  the same on an input whose every child of the root is rejected for sure
             (bench_acceptance's "root" rows, both requests): the issue's target input (on a
             GPU: < 100 us): three rejections at the root, then 53 line positions with candidates
Distributions are what a visual AR model samples from: softmax of top-k 2000 filtered logits
(CFG/top-k as in probs_from_logits); the draft q is the previous iteration's (stale) target, p a
perturbation of it, window tokens drawn from q.  ``sjd_pac dense`` uses unfiltered rows (every
entry positive: the candidates' draws scan the whole row).  GB/s = bytes of p and q read once /
time."""

from __future__ import annotations

import torch

import specops
from specops import Tree

from .harness import Row, time_fn, timed_backends, with_ratios


def _rows(b, L, v, gen, device, top_k):
    """(p, window tokens, q): q = softmax of top-k filtered logits, p = a perturbation of them."""
    lq = torch.randn(b, L, v, generator=gen, device=device) * 3.0
    lp = lq + torch.randn(b, L, v, generator=gen, device=device) * 1.0

    def probs(logits):
        if top_k is not None and top_k < v:
            kth = logits.topk(top_k, -1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.softmax(logits, -1)

    p, q = probs(lp), probs(lq)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, L)
    return p, x, q


def _cases(quick: bool):
    if quick:
        return [("sjd_pac", 2, 13, 1000, 2000, (3, 3, 13), True, 3)]
    b, L, v = 2, 64, 65536
    return [
        ("sjd", b, L, v, 2000, None, False, 1),
        ("sjd_ac", b, L, v, 2000, None, True, 1),
        ("sjd_pac", b, L, v, 2000, (3, 3, L), True, 3),
        ("sjd_pac root", b, L, v, 2000, (3, 3, L), True, 3),
        ("sjd_pac dense", b, L, v, None, (3, 3, L), True, 3),
    ]


def run(device: str, quick: bool) -> list[Row]:
    dev = torch.device(device)
    backends = timed_backends("verify_jacobi", dev)
    rows = []
    for name, b, L, v, top_k, shape, cont, k in _cases(quick):
        gen = torch.Generator(device=device).manual_seed(0)
        copies = 4 if device == "cuda" else 1  # rotated inputs: the L2 does not hold them
        tree = Tree.kary_chain(*shape, device=device) if shape else None
        if name.endswith("root"):
            from .inputs import tree_case

            cases = [tree_case(tree, b, v, "root", gen, device, top_k) for _ in range(copies)]
            inputs = [(p, x, q) for p, q, x, _, _ in cases]
        else:
            inputs = [_rows(b, L, v, gen, device, top_k) for _ in range(copies)]
        nbytes = 2 * b * L * v * 4
        desc = f"{name} B={b} L={L} V={v}" + (f" kary_chain{shape} k={k}" if shape else "")
        for be in backends:
            fns = [
                lambda p=p, x=x, q=q, be=be, tree=tree, cont=cont, k=k: specops.verify_jacobi(
                    p,
                    x,
                    q,
                    tree=tree,
                    continue_after_reject=cont,
                    num_candidates=k,
                    seed=1,
                    backend=be,
                )
                for p, x, q in inputs
            ]
            kw = {}
            if be == "reference" and device == "cpu" and not quick:
                kw = {"warmup": 1, "trials": 3}  # about a second a call on a small CPU
            st = time_fn(fns, device, quick=quick, **kw)
            rows.append(
                Row(
                    "verify_jacobi",
                    desc,
                    be,
                    st.median_us,
                    st.p20_us,
                    st.p80_us,
                    nbytes / (st.median_us * 1e-6) / 1e9,
                )
            )
    return with_ratios(rows, ("cuda", "cpu"))


if __name__ == "__main__":
    from .__main__ import main

    main(["--ops", "jacobi"])
