"""Verification ops: the compiled kernels against the reference and the peers.

CPU (the issue's CI-sized targets): verify_chain cpu vs reference at B=16, K=8, V=32000, and
verify_jacobi at B=2, L=64, V=65536 (chain window, and the whole SJD-PAC step on
Tree.kary_chain(3, 3, 64) with 3 candidates) once it has a cpu backend; verify_tree and
sample_without_replacement and path_acceptance alongside.  GPU: verify_chain (cuda, triton) vs
FlashInfer ``chain_speculative_sampling`` at B in {1, 8, 64, 256}, K in {4, 8}, V in {32000,
128256};
verify_tree with deterministic drafts vs sgl-kernel ``tree_speculative_sampling_target_only``.
Peers that are not installed are skipped with a note.

Effective GB/s = bytes of the probability tensors read once (target, plus draft when given) /
time.  Inputs: drafts drawn from q, with q close to p (about half the drafts accepted), so the
kernels take their usual path: some accepted prefix, then one residual draw.
"""

from __future__ import annotations

import torch

import specops

from .harness import Row, time_cpu, time_fn, timed_backends, with_ratios
from .inputs import chain_inputs, draw, near, probs, tree_inputs
from .peers import flashinfer_chain, sgl_call, sgl_tree, sglang_chain, sglang_chain_args

FAST = ("cuda", "triton", "cpu")


def _time(fns, device, be):
    """time_fn, but the eager reference on the CPU gets fewer calls (it takes up to seconds)."""
    if device == "cpu" and be == "reference":
        f = fns if callable(fns) else fns[0]
        return time_cpu(f, warmup=1, trials=3, min_time_s=0.0)
    return time_fn(fns, device)


def _row(op, shape, be, st, nbytes, note=""):
    gbps = nbytes / (st.median_us * 1e-6) / 1e9 if nbytes else None
    return Row(op, shape, be, st.median_us, st.p20_us, st.p80_us, gbps, note=note)


def _copies(nbytes, device):
    """Input copies to rotate over so the L2 cannot hold them (GPU); one on CPU."""
    if device != "cuda":
        return 1
    return 1 if nbytes > 512 * 2**20 else 4


# chain --------------------------------------------------------------------------------------
def bench_chain(device, quick, shapes=None) -> list[Row]:
    """verify_chain at (B, K, V) ``shapes`` (default: the issue's grid on a GPU)."""
    if shapes is None and quick:
        shapes = [(2, 3, 1000)]
    elif shapes is None and device == "cuda":
        shapes = [(b, k, v) for v in (32000, 128256) for k in (4, 8) for b in (1, 8, 64, 256)]
    elif shapes is None:
        shapes = [(16, 8, 32000)]
    fi, fi_note = flashinfer_chain() if device == "cuda" else (None, "")
    sg, sg_note = sglang_chain() if device == "cuda" else (None, "")
    rows = []
    for b, k, v in shapes:
        for det in (False, True) if device == "cpu" or quick else (False,):
            gen = torch.Generator(device=device).manual_seed(b * 131 + k + v)
            nbytes = b * (k + 1) * v * 4 + (0 if det else b * k * v * 4)
            ins = [chain_inputs(b, k, v, device, gen, det) for _ in range(_copies(nbytes, device))]
            shape = f"B={b} K={k} V={v}" + (" det" if det else "")
            with specops.validation(False):
                for be in timed_backends("verify_chain", device):
                    if be == "reference" and device == "cuda" and b * k * v > 64 * 8 * 32000:
                        continue  # the eager reference at the largest shapes only adds minutes
                    fns = [
                        lambda i=i, be=be: specops.verify_chain(
                            i[0], i[1], i[2], seed=1, backend=be
                        )
                        for i in ins
                    ]
                    rows.append(_row("verify_chain", shape, be, _time(fns, device, be), nbytes))
            if fi is not None and not det:
                fi_ins = [(i[2], i[1].int(), i[0]) for i in ins]
                fns = [lambda i=i, f=fi: f(i[0], i[1], i[2]) for i in fi_ins]
                try:
                    st = time_fn(fns, device)
                    rows.append(_row("verify_chain", shape, "flashinfer", st, nbytes))
                except Exception as exc:
                    fi, fi_note = None, f"flashinfer failed: {type(exc).__name__}: {exc}"
            if sg is not None and not det:
                sg_ins = [sglang_chain_args(i[0], i[1], i[2], gen) for i in ins]
                fns = [lambda a=a, f=sg: f(*a) for a in sg_ins]
                try:
                    st = time_fn(fns, device)
                    rows.append(_row("verify_chain", shape, "sglang_triton", st, nbytes))
                except Exception as exc:
                    sg, sg_note = None, f"sglang triton failed: {type(exc).__name__}: {exc}"
    if device == "cuda" and fi_note:
        rows.append(Row("verify_chain", "-", "flashinfer", 0.0, 0.0, 0.0, note=fi_note))
    if device == "cuda" and sg_note:
        rows.append(Row("verify_chain", "-", "sglang_triton", 0.0, 0.0, 0.0, note=sg_note))
    return rows


# tree ---------------------------------------------------------------------------------------
def bench_tree(device, quick) -> list[Row]:
    if quick:
        cases = [(2, specops.Tree.kary(2, 3), 1000)]
    elif device == "cuda":
        cases = [
            (b, specops.Tree.kary(k, d), v)
            for v in (32000, 128256)
            for (k, d) in ((2, 4), (4, 3))
            for b in (1, 8, 64)
        ]
    else:
        cases = [(4, specops.Tree.kary(3, 3), 32000)]
    sgl, sgl_note = sgl_tree() if device == "cuda" else (None, "")
    rows = []
    for b, tree, v in cases:
        tree = tree.to(device)
        n = tree.num_nodes
        modes = (("det", False, True),) if device == "cuda" else ()
        modes = modes or (("iid", False, False), ("wor", True, False), ("det", False, True))
        for name, wor, det in modes:
            gen = torch.Generator(device=device).manual_seed(b * 7 + n + v)
            nbytes = b * n * v * 4 * (1 if det else 2)
            ins = [
                tree_inputs(b, tree, v, device, gen, wor=wor, deterministic=det)
                for _ in range(_copies(nbytes, device))
            ]
            shape = f"B={b} N={n} V={v} {name}"
            with specops.validation(False):
                for be in timed_backends("verify_tree", device):
                    if be == "reference" and device == "cuda" and b * n * v > 8 * 21 * 128256:
                        continue
                    fns = [
                        lambda i=i, be=be, wor=wor, t=tree: specops.verify_tree(
                            i[0], t, i[1], i[2], without_replacement=wor, seed=1, backend=be
                        )
                        for i in ins
                    ]
                    rows.append(_row("verify_tree", shape, be, _time(fns, device, be), nbytes))
            if sgl is not None and det:
                try:
                    depth = int(tree.depth.max())
                    fns = [sgl_call(sgl, i[0], tree, i[1], depth) for i in ins]
                    rows.append(
                        _row("verify_tree", shape, "sgl-kernel", time_fn(fns, device), nbytes)
                    )
                except Exception as exc:
                    sgl, sgl_note = None, f"sgl-kernel failed: {type(exc).__name__}: {exc}"
    if device == "cuda" and sgl_note:
        rows.append(Row("verify_tree", "-", "sgl-kernel", 0.0, 0.0, 0.0, note=sgl_note))
    return rows


# jacobi (kernels by another family member; benchmarked here once they have a backend) --------
def bench_jacobi(device, quick) -> list[Row]:
    b, L, v = (2, 8, 1000) if quick else (2, 64, 65536)
    gen = torch.Generator(device=device).manual_seed(3)
    p = probs((b, L, v), gen, device)
    q = near(p, gen)
    x = draw(q, gen)
    nbytes = 2 * b * L * v * 4
    rows = []
    k, d = 3, 3
    pac = specops.Tree.kary_chain(k, d, L).to(device) if L > (k**d - 1) // (k - 1) else None
    with specops.validation(False):
        for be in timed_backends("verify_jacobi", device):
            fn = lambda be=be: specops.verify_jacobi(p, x, q, seed=1, backend=be)  # noqa: E731
            shape = f"B={b} L={L} V={v} chain"
            rows.append(_row("verify_jacobi", shape, be, _time(fn, device, be), nbytes))
            if pac is not None:
                fn = lambda be=be: specops.verify_jacobi(  # noqa: E731
                    p, x, q, tree=pac, num_candidates=3, seed=1, backend=be
                )
                shape = f"B={b} L={L} V={v} kary_chain(3,3) cand=3"
                rows.append(_row("verify_jacobi", shape, be, _time(fn, device, be), nbytes))
    return rows


# sampling without replacement ---------------------------------------------------------------
def bench_wor(device, quick) -> list[Row]:
    rows_, v, k = (
        (4, 1000, 3) if quick else ((128, 65536, 3) if device == "cuda" else (8, 65536, 3))
    )
    gen = torch.Generator(device=device).manual_seed(4)
    p = probs((rows_, v), gen, device)
    rows = []
    with specops.validation(False):
        for be in timed_backends("sample_without_replacement", device):
            fn = lambda be=be: specops.sample_without_replacement(p, k, seed=1, backend=be)  # noqa: E731
            st = _time(fn, device, be)
            rows.append(_row("sample_wor", f"R={rows_} V={v} k={k}", be, st, rows_ * v * 4))
    return rows


# path acceptance ------------------------------------------------------------------------------
def bench_path_acceptance(device, quick) -> list[Row]:
    """Two gathers per node and a fold along the paths: launch- and latency-bound (no GB/s)."""
    if quick:
        cases = [(2, specops.Tree.kary(2, 3), 1000)]
    elif device == "cuda":
        trees = (specops.Tree.kary(4, 3), specops.Tree.kary_chain(3, 3, 64), specops.Tree.chain(64))
        cases = [(b, t, 65536) for t in trees for b in (1, 8, 64)]
    else:
        cases = [(4, specops.Tree.kary(3, 3), 32000), (2, specops.Tree.kary_chain(3, 3, 64), 65536)]
    rows = []
    for b, tree, v in cases:
        tree = tree.to(device)
        gen = torch.Generator(device=device).manual_seed(b * 5 + tree.num_nodes + v)
        i = tree_inputs(b, tree, v, device, gen)  # (p, tokens, q)
        shape = f"B={b} N={tree.num_nodes} V={v} leaves={int(tree.is_leaf.sum(-1).max())}"
        with specops.validation(False):
            for be in timed_backends("path_acceptance", device):
                fn = lambda be=be, t=tree, i=i: specops.path_acceptance(  # noqa: E731
                    i[0], i[2], t, i[1], backend=be
                )
                rows.append(_row("path_acceptance", shape, be, _time(fn, device, be), 0))
    return rows


def run(device: str, quick: bool) -> list[Row]:
    rows = bench_chain(device, quick) + bench_tree(device, quick)
    rows += bench_jacobi(device, quick) + bench_wor(device, quick)
    rows += bench_path_acceptance(device, quick)
    return with_ratios(rows, FAST)


if __name__ == "__main__":
    from .__main__ import main

    main(["--ops", "verify"])
