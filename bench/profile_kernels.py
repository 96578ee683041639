"""The kernels behind the GPU issue's missed targets, one captured call each, for Nsight Compute;
and the SJD-PAC step timed with parts of it left out, which places its time without counters.

    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \\
        python -m bench.profile_kernels            (gpu_run.sh's ``profile`` stage)
    python -m bench.profile_kernels --variants     (CUDA events over graph replay, medians)

Every case warms up, then runs once between cudaProfilerStart and cudaProfilerStop: with
``--profile-from-start off`` ncu profiles exactly those launches.  ``--device cpu`` (the dry
run) builds the same cases at small sizes and calls each once on the CPU backends.

Cases: the SJD-PAC step on its target input (every child of the root rejected, B 2, V 65536,
kary_chain(3, 3, 64), 3 candidates); plain SJD on a chain window; probs_from_logits at the
Lumina-mGPT window and the Emu3 window (CFG, top-k); verify_chain at B 64, K 8, V 128256.
Variants of the SJD-PAC step: the whole step; without candidates; without continuation either;
the walk alone (kary_chain(3, 2, 4): three rejected children and the final draw, no line)."""

from __future__ import annotations

import argparse

import torch

import specops
from specops import Tree

from .harness import time_fn


def _jacobi_case(device, small, shape=(3, 3, 64), k=3, cont=True, b=2):
    from .inputs import tree_case

    v = 1000 if small else 65536
    if small:  # a fifth of the window, but at least the k-ary part's nodes
        k_ary, depth, length = shape
        shape = (k_ary, depth, max(sum(k_ary**i for i in range(depth)), length // 5))
    tree = Tree.kary_chain(*shape, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    p, q, x, _, _ = tree_case(tree, b, v, "root", gen, device, 2000)
    be = "cuda" if device == "cuda" else "cpu"
    return lambda: specops.verify_jacobi(
        p, x, q, tree=tree, continue_after_reject=cont, num_candidates=k, seed=1, backend=be
    )


def _jacobi_chain_case(device, small, b=2, L=64):
    """Plain SJD on a chain window (bench_jacobi's ``sjd`` rows): 128 blocks that each draw
    from one row, 71-81 us on the H200 for 34 MB of rows (10% of copy bandwidth)."""
    from .bench_jacobi import _rows

    v = 1000 if small else 65536
    gen = torch.Generator(device=device).manual_seed(0)
    p, x, q = _rows(b, L, v, gen, device, 2000)
    be = "cuda" if device == "cuda" else "cpu"
    return lambda: specops.verify_jacobi(p, x, q, continue_after_reject=False, seed=1, backend=be)


def _probs_case(device, small, lead, v, cfg, k):
    if small:
        lead, v = (2, 2), 1000
    g = torch.Generator().manual_seed(0)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    c = (torch.randn(*lead, v, generator=g) * 3).to(device=device, dtype=dt)
    u = (torch.randn(*lead, v, generator=g) * 3).to(device=device, dtype=dt)
    out = torch.empty(*lead, v, device=device)
    be = "triton" if device == "cuda" else "cpu"
    return lambda: specops.probs_from_logits(
        c, top_k=k, cfg_scale=cfg, uncond_logits=u, backend=be, out=out
    )


def _chain_case(device, small, b=64, k=8, v=128256):
    """The chain inputs (bench/inputs.py) (drafts near the target, so rejections happen)."""
    from .inputs import chain_inputs

    if small:
        b, v = 2, 1000
    g = torch.Generator(device=device).manual_seed(0)
    p, x, q = chain_inputs(b, k, v, device, g)
    be = "cuda" if device == "cuda" else "cpu"
    return lambda: specops.verify_chain(p, x, q, seed=1, backend=be)


CASES = {
    "verify_jacobi sjd_pac root B=2 L=64 V=65536 k=3": lambda d, s: _jacobi_case(d, s),
    "verify_jacobi sjd chain B=2 L=64 V=65536": lambda d, s: _jacobi_chain_case(d, s),
    "probs_from_logits Lumina [2, 64]x65536 cfg=4 k=2000": lambda d, s: _probs_case(
        d, s, (2, 64), 65536, 4.0, 2000
    ),
    "probs_from_logits Emu3 [2, 16]x184622 cfg=3 k=2048": lambda d, s: _probs_case(
        d, s, (2, 16), 184622, 3.0, 2048
    ),
    "verify_chain B=64 K=8 V=128256": lambda d, s: _chain_case(d, s),
}

VARIANTS = {
    "whole step (k=3, continuation)": {},
    "no candidates (k=1)": {"k": 1},
    "no candidates, no continuation": {"k": 1, "cont": False},
    "walk alone: kary_chain(3, 2, 4), k=1": {"shape": (3, 2, 4), "k": 1},
}


def profile(device: str) -> None:
    small = device != "cuda"
    for name, make in CASES.items():
        fn = make(device, small)
        for _ in range(3):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
        print(f"profiled: {name}", flush=True)


def variants(device: str) -> None:
    small = device != "cuda"
    print(
        f"{'verify_jacobi sjd_pac root, B=2 V=65536':<44} {'median us':>10} {'p20':>9} {'p80':>9}"
    )
    for name, kw in VARIANTS.items():
        st = time_fn(_jacobi_case(device, small, **kw), device, quick=small)
        print(f"{name:<44} {st.median_us:>10.1f} {st.p20_us:>9.1f} {st.p80_us:>9.1f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.profile_kernels")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--variants", action="store_true", help="time the SJD-PAC step's variants")
    args = ap.parse_args(argv)
    if args.variants:
        variants(args.device)
    else:
        profile(args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
