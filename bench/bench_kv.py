"""specops.commit_kv vs the eager per-layer sequence it replaces and vs the reference;
specops.append_kv (one layer's new K/V rows into its cache) vs the reference and an eager
index_put.

The eager peer is what EAGLE-style code does after verification: per layer, gather the accepted
rows (index_select) and copy them to the committed prefix (index_copy_): two kernels per layer.
commit_kv is one launch for every layer.  Both advance cache_seqlens, so every timed call first
restores it (a [B] int32 copy_): the "seqlens reset" row times that alone (subtract it).

    python -m bench.bench_kv [--device cuda|cpu] [--quick] [--csv PATH]
    python -m bench --ops kv ...                                         (same rows)
"""

from __future__ import annotations

import sys

import torch

import specops

from .harness import Row, time_fn, timed_backends, with_ratios

# (layers, batch, capacity, Hkv, D, m, page or None)
CASES_GPU = [(32, 1, 1024, 32, 128, m, None) for m in (1, 8, 64)] + [
    (32, 4, 1024, 32, 128, 8, None),
    (32, 1, 1024, 32, 128, 8, 16),
]
CASES_CPU = [(32, 1, 256, 32, 128, m, None) for m in (1, 8, 64)] + [(32, 1, 256, 32, 128, 8, 16)]
CASES_QUICK = [(2, 1, 64, 2, 16, 4, None)]


def kv_inputs(layers, b, capacity, hkv, d, m, page, device, copies):
    g = torch.Generator(device="cpu").manual_seed(0)
    dt = torch.bfloat16
    if page is None:
        shape = (layers, 2, b, capacity, hkv, d)
        bt = None
    else:
        width = capacity // page
        shape = (layers, 2, b * width, page, hkv, d)
        bt = torch.randperm(b * width, generator=g)[: b * width].view(b, width).int().to(device)
    caches = [torch.randn(shape, device=device, dtype=dt) for _ in range(copies)]
    cs0 = torch.full((b,), capacity // 2, dtype=torch.int32, device=device)
    # a tree path: m strictly increasing offsets in the first 2m draft slots, slot 0 = the root
    slots = torch.stack(
        [
            torch.cat(
                [torch.zeros(1), torch.randperm(2 * m - 1, generator=g)[: m - 1].sort()[0] + 1]
            )
            for _ in range(b)
        ]
    ).to(torch.int32)
    return caches, bt, cs0, slots.to(device)


def eager_peer(caches, cs, cs0, slots, m):
    """Per layer: index_select the accepted rows, index_copy_ them to the prefix (flattened over
    B x S; host-known m as in EAGLE's update_inference_inputs), then advance the lengths."""
    layers, _, b, s = caches.shape[:4]
    base = (torch.arange(b, device=cs.device) * s)[:, None]
    src = (base + cs0.long()[:, None] + slots.long()).reshape(-1)
    dst = (base + cs0.long()[:, None] + torch.arange(m, device=cs.device)).reshape(-1)

    def run():
        cs.copy_(cs0)
        for layer in range(layers):
            kv = caches[layer].view(2, b * s, *caches.shape[4:])
            kv.index_copy_(1, dst, kv.index_select(1, src))
        cs.add_(m)

    return run


def _bench_case(case, device, backends, copies) -> list[Row]:
    layers, b, capacity, hkv, d, m, page = case
    caches, bt, cs0, slots = kv_inputs(layers, b, capacity, hkv, d, m, page, device, copies)
    cs = cs0.clone()
    shape = f"L={layers} B={b} Hkv={hkv} D={d} m={m}" + (f" page={page}" if page else "")
    moved = 2 * 2 * layers * b * m * hkv * d * 2  # bytes read + written (bf16)
    rows: list[Row] = []

    def add(name, st, note="includes seqlens reset"):
        gbps = moved / (st.median_us * 1e-6) / 1e9 if note else None
        rows.append(
            Row("commit_kv", shape, name, st.median_us, st.p20_us, st.p80_us, gbps, note=note)
        )

    def commit(c, be):
        cs.copy_(cs0)
        specops.commit_kv(c, cs, slots, block_table=bt, backend=be)

    with specops.validation(False):
        for be in backends:
            add(be, time_fn([lambda c=c, be=be: commit(c, be) for c in caches], device))
    if page is None:
        add(
            "eager index_copy loop",
            time_fn([eager_peer(c, cs, cs0, slots, m) for c in caches], device),
        )
    add("seqlens reset", time_fn(lambda: cs.copy_(cs0), device), note="")
    return rows


# append_kv: (batch, capacity, Hkv, D, N new rows, page or None); one layer (a model calls it per
# layer), bf16
APPEND_GPU = [(8, 4096, 8, 128, 16, None), (8, 4096, 8, 128, 16, 16), (1, 4096, 8, 128, 1, None)]
APPEND_CPU = [(2, 1024, 8, 128, 16, None), (2, 1024, 8, 128, 16, 16), (1, 1024, 8, 128, 1, None)]
APPEND_QUICK = [(2, 64, 2, 16, 4, None)]


def _bench_append(case, device, backends) -> list[Row]:
    b, cap, hkv, d, n, page = case
    g = torch.Generator().manual_seed(1)
    dt = torch.bfloat16
    lead = (b, cap) if page is None else (b * cap // page, page)
    kc, vc = (torch.zeros(*lead, hkv, d, dtype=dt, device=device) for _ in range(2))
    k, v = (torch.randn(b, n, hkv, d, generator=g).to(device, dt) for _ in range(2))
    seqlens = torch.randint(0, cap - n, (b,), generator=g).int().to(device)
    bt = None
    if page is not None:
        bt = torch.randperm(b * cap // page, generator=g).view(b, cap // page).int().to(device)
    shape = f"B={b} S={cap} Hkv={hkv} D={d} N={n}" + (f" page={page}" if page else "")
    moved = 2 * 2 * b * n * hkv * d * 2  # K and V rows, read + written (bf16)
    rows: list[Row] = []

    def add(name, st):
        gbps = moved / (st.median_us * 1e-6) / 1e9
        rows.append(Row("append_kv", shape, name, st.median_us, st.p20_us, st.p80_us, gbps))

    def append(be):
        specops.append_kv(kc, vc, k, v, seqlens, block_table=bt, backend=be)

    with specops.validation(False):
        for be in backends:
            add(be, time_fn(lambda be=be: append(be), device))
    if page is None:  # what model code writes by hand: an index_put per tensor
        pos = seqlens.long()[:, None] + torch.arange(n, device=device)
        rows_b = torch.arange(b, device=device)[:, None].expand(b, n)

        def eager():
            kc[rows_b, pos] = k
            vc[rows_b, pos] = v

        add("eager index_put", time_fn(eager, device))
    return rows


def run(device: str, quick: bool) -> list[Row]:
    cases = CASES_QUICK if quick else (CASES_GPU if device == "cuda" else CASES_CPU)
    backends = timed_backends("commit_kv", device)  # no interpreter on the CPU
    copies = 4 if device == "cuda" else 1
    rows: list[Row] = []
    for case in cases:
        rows += _bench_case(case, device, backends, copies)
    append = APPEND_QUICK if quick else (APPEND_GPU if device == "cuda" else APPEND_CPU)
    append_backends = [be for be in backends if be != "cuda"]  # append_kv: triton on GPUs
    for case in append:
        rows += _bench_append(case, device, append_backends)
    return with_ratios(rows, ("cuda", "triton", "cpu"))


if __name__ == "__main__":
    from .__main__ import main

    sys.exit(main(["--ops", "kv", *sys.argv[1:]]))
