"""GSD grouped acceptance (issue 48): the fused test against the authors' loop on the CPU.

Lumina-mGPT's shape: B = 2 requests, L = 64 window slots, V = 65536, an image range of 8192
codes (ids 4 .. 8195, 256-dim codes).  Fused: ``specops.verify_jacobi(..., relax=Grouping(...),
continue_after_reject=True, backend="cpu")`` (every slot tested, one call).  The authors' loop:
tests/test_reference_grouped.py ``authors_accept`` (a full sort of the row per position, as
github junhyukso/GSD does) over the same 128 positions.  Decisions are checked equal.

    .venv/bin/python -m bench.gsd_authors [--threads 1 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import specops
from specops import Grouping

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "tests"))
from test_reference_grouped import authors_accept  # noqa: E402


def inputs(b=2, L=64, v=65536, start=4, vi=8192, c=256, device="cpu", seed=0):
    """(p, q [b, L, v], drafts x ~ q [b, L], the authors' Grouping over codes [vi, c] of ids
    start .. start + vi - 1, uniforms [b, 2L]): image logits 3 * N(0, 1), the rest -30."""
    g = torch.Generator(device=device).manual_seed(seed)
    logits = torch.full((b, L, v), -30.0, device=device)
    logits[..., start : start + vi] = 3 * torch.randn(b, L, vi, generator=g, device=device)
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits + 0.5 * torch.randn(b, L, v, generator=g, device=device), -1)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, L)
    cb = 0.05 * torch.randn(vi, c, generator=g, device=device)
    u = torch.rand(b, 2 * L, generator=g, device=device)
    return p, q, x, Grouping(cb, 7, 0.15, 0.5, (start, start + vi)), u


def chain_inputs(b, k, v, **kw):
    """``inputs`` as verify_chain takes them: (p [b, k+1, v], drafts x [b, k], q [b, k, v], the
    Grouping, uniforms [b, k+1]); ``kw`` as ``inputs``'s (vi, c, device, seed)."""
    p, q, x, relax, u = inputs(b, k + 1, v, **kw)
    return p, x[:, :k], q[:, :k], relax, u[:, : k + 1]


def authors_chain(p, x, q, relax, u) -> list[int]:
    """The authors' rule draft by draft, each request until its first rejection, as their loop
    runs it (a sort of the row and host syncs per draft) -> accepted prefix lengths."""
    g = relax
    start = g.image_range[0]
    out = []
    for i in range(x.shape[0]):
        n = 0
        while n < x.shape[1] and authors_accept(
            p[i, n], q[i, n], int(x[i, n]), u[i, n], g.codebook, g.window, g.p_threshold,
            g.d_threshold, start,
        ):  # fmt: skip
            n += 1
        out.append(n)
    return out


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = fn()
        t.append(time.perf_counter() - t0)
    return min(t), r


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    p, q, x, relax, u = inputs()
    b, L, v = p.shape
    start = relax.image_range[0]

    def fused():
        return specops.verify_jacobi(p, x, q, relax=relax, uniforms=u, backend="cpu")

    def authors():
        return torch.tensor(
            [
                [
                    authors_accept(
                        p[i, j], q[i, j], int(x[i, j]), u[i, j], relax.codebook, 7, 0.15, 0.5, start
                    )  # fmt: skip
                    for j in range(L)
                ]
                for i in range(b)
            ]
        )

    print(f"GSD acceptance, [{b}, {L}] x {v}, w 7, p_thr 0.15, d_thr 0.5, codes 8192 x 256, "
          f"torch {torch.__version__}, commit {os.environ.get('SPECOPS_COMMIT', '?')}")  # fmt: skip
    for n in args.threads:
        torch.set_num_threads(n)
        specops.set_num_threads(n)
        tf, r = best(fused, args.reps)
        ta, ok = best(authors, max(1, args.reps // 2))
        first = ok.long().cumprod(-1).sum(-1)
        same = torch.equal(r.num_accepted.long(), first)
        print(f"threads {n}: fused (cpu, one call) {tf * 1e3:9.2f} ms   authors' loop (sort per "
              f"position) {ta * 1e3:9.2f} ms   x{ta / tf:6.1f}   accepted prefix equal: {same} "
              f"({first.tolist()})")  # fmt: skip


if __name__ == "__main__":
    main()
