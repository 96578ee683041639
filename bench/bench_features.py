"""The features family vs the eager PyTorch sequences they replace and vs the reference:
drafter_inputs (gather + cat), gather_rows, FeatureCache.write (index_put), path_similarity (a
VVS-style cosine-matrix computation).

    python -m bench.bench_features [--device cuda|cpu] [--quick] [--csv PATH]
    python -m bench --ops features ...                                   (same rows)

On CPU the Triton kernels are not timed (the interpreter is no fast path): the rows compare the
C++ twins ("cpu") with the reference and the eager sequences.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import specops

from .harness import Row, time_fn, timed_backends, with_ratios

# drafter_inputs: (B, M, V, E, H, S)
DRAFTER_GPU = [(1, 16, 32000, 4096, 4096, 0), (2, 64, 65536, 4096, 4096, 128)]
DRAFTER_CPU = [(1, 16, 32000, 4096, 4096, 0), (2, 64, 16384, 1280, 1280, 128)]
DRAFTER_QUICK = [(1, 4, 100, 16, 16, 4)]
# gather_rows / FeatureCache.write: (B, N = capacity, M, H)
ROWS_GPU = [(4, 4096, 64, 4096), (2, 2048, 16, 1280)]
ROWS_CPU = [(2, 1024, 16, 1280), (4, 1024, 64, 4096)]
ROWS_QUICK = [(1, 16, 4, 16)]
# path_similarity: (B, P, L, V, C, stride)
PATHS_GPU = [(2, 16, 16, 16384, 8, 1), (2, 64, 32, 65536, 256, 2), (8, 32, 32, 16384, 8, 1)]
PATHS_CPU = [(2, 16, 16, 16384, 8, 1), (2, 64, 32, 65536, 256, 2)]
PATHS_QUICK = [(1, 3, 4, 50, 8, 1)]


def _backends(device):
    return timed_backends("gather_rows", device)


def _row(op, shape, name, st, nbytes=None):
    gbps = None if nbytes is None else nbytes / (st.median_us * 1e-6) / 1e9
    return Row(op, shape, name, st.median_us, st.p20_us, st.p80_us, gbps)


def _drafter(case, device, backends, copies) -> list[Row]:
    b, m, v, e, h, s = case
    g = torch.Generator(device=device).manual_seed(0)
    dt = torch.bfloat16
    emb = torch.randn(v, e, device=device, dtype=dt, generator=g)
    ins = [
        (
            torch.randint(0, v, (b, m), device=device, generator=g),
            torch.randn(b, m, h, device=device, dtype=dt, generator=g),
        )
        for _ in range(copies)
    ]
    step = torch.randn(s, device=device, dtype=dt, generator=g) if s else None
    shape = f"B={b} M={m} V={v} E={e} H={h} S={s}"
    nbytes = 2 * b * m * (e + h + s) * 2  # read + write
    rows = []
    for be in backends:
        fns = [
            lambda t=t, f=f, be=be: specops.drafter_inputs(emb, t, f, step, backend=be)
            for t, f in ins
        ]
        rows.append(_row("drafter_inputs", shape, be, time_fn(fns, device), nbytes))

    def eager(t, f):
        parts = [emb[t], f] + ([step.expand(b, m, s)] if s else [])
        return torch.cat(parts, -1)

    fns = [lambda t=t, f=f: eager(t, f) for t, f in ins]
    rows.append(_row("drafter_inputs", shape, "eager gather+cat", time_fn(fns, device), nbytes))
    return rows


def _gather_and_write(case, device, backends, copies) -> list[Row]:
    b, n, m, h = case
    g = torch.Generator(device=device).manual_seed(1)
    dt = torch.bfloat16
    src = torch.randn(b, n, h, device=device, dtype=dt, generator=g)
    idx = [
        torch.stack([torch.randperm(n, device=device, generator=g)[:m] for _ in range(b)])
        for _ in range(copies)
    ]
    feats = torch.randn(b, m, h, device=device, dtype=dt, generator=g)
    shape = f"B={b} N={n} M={m} H={h}"
    nbytes = 2 * b * m * h * 2
    rows = []
    for be in backends:
        fns = [lambda i=i, be=be: specops.gather_rows(src, i, backend=be) for i in idx]
        rows.append(_row("gather_rows", shape, be, time_fn(fns, device), nbytes))
    fns = [lambda i=i: src.gather(1, i[:, :, None].expand(-1, -1, h)) for i in idx]
    rows.append(_row("gather_rows", shape, "eager torch.gather", time_fn(fns, device), nbytes))

    rows_b = torch.arange(b, device=device)[:, None]
    for be in backends:
        fc = specops.FeatureCache(b, n, h, dtype=dt, device=device, backend=be)
        fns = [lambda i=i, fc=fc: fc.write(i, feats, 3) for i in idx]
        rows.append(_row("FeatureCache.write", shape, be, time_fn(fns, device), nbytes))
    fc = specops.FeatureCache(b, n, h, dtype=dt, device=device)

    def eager_write(i):
        fc.features[rows_b, i] = feats
        fc.stamps[rows_b, i] = 3

    fns = [lambda i=i: eager_write(i) for i in idx]
    rows.append(_row("FeatureCache.write", shape, "eager index_put", time_fn(fns, device), nbytes))
    return rows


def _paths(case, device, backends, copies) -> list[Row]:
    b, p, length, v, c, stride = case
    g = torch.Generator(device=device).manual_seed(2)
    codebook = torch.randn(v, c, device=device, generator=g)
    paths = [torch.randint(0, v, (b, p, length), device=device, generator=g) for _ in range(copies)]
    shape = f"B={b} P={p} L={length} C={c} stride={stride}"
    rows = []
    for be in backends:
        fns = [
            lambda x=x, be=be: specops.path_similarity(x, codebook, stride=stride, backend=be)
            for x in paths
        ]
        rows.append(_row("path_similarity", shape, be, time_fn(fns, device)))
    w = 0.9 ** torch.arange(0, length, stride, device=device, dtype=torch.float32)
    off_diag = ~torch.eye(p, dtype=torch.bool, device=device)

    def eager(x):  # VVS-style: the full cosine matrix per position
        e = F.normalize(codebook[x[:, :, ::stride]], dim=-1)  # [B, P, L', C]
        sim = torch.einsum("bplc,bqlc->blpq", e, e)
        s_l = (sim * off_diag).sum((-1, -2)) / (p * (p - 1))
        return (s_l * w).sum(-1) / w.sum()

    fns = [lambda x=x: eager(x) for x in paths]
    rows.append(_row("path_similarity", shape, "eager cosine matrix", time_fn(fns, device)))
    return rows


def run(device: str, quick: bool) -> list[Row]:
    gpu = device == "cuda"
    drafter = DRAFTER_QUICK if quick else (DRAFTER_GPU if gpu else DRAFTER_CPU)
    rows_cases = ROWS_QUICK if quick else (ROWS_GPU if gpu else ROWS_CPU)
    paths = PATHS_QUICK if quick else (PATHS_GPU if gpu else PATHS_CPU)
    backends = _backends(device)
    copies = 4 if gpu else 1
    rows: list[Row] = []
    with specops.validation(False):
        for case in drafter:
            rows += _drafter(case, device, backends, copies)
        for case in rows_cases:
            rows += _gather_and_write(case, device, backends, copies)
        for case in paths:
            rows += _paths(case, device, backends, copies)
    return with_ratios(rows, ("triton", "cpu"))


if __name__ == "__main__":
    from .__main__ import main

    sys.exit(main(["--ops", "features", *sys.argv[1:]]))
