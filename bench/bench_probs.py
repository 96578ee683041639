"""specops.probs_from_logits (one fused Triton kernel, no sort) vs the eager torch sequence.

The eager peer is what visual AR samplers (LlamaGen, Lumina-mGPT) and vLLM-style code run per
step: CFG combine ``u + s (c - u)``, ``/ T``, the top-k threshold (``topk`` + masked_fill), the
sort-based top-p mask (sort, softmax, cumsum, scatter back) and a softmax: about a dozen kernels
and a full sort of every row.  GB/s counts the logits read once (cond + uncond) and the float32
probabilities written once.

    python -m bench.bench_probs [--device cuda|cpu] [--quick] [--csv PATH]
    python -m bench --ops probs ...                                        (same rows)

On CPU the Triton kernel would run in its interpreter, so the C++ twin ("cpu"), the reference
(small cases only) and the eager sequence are timed there; issue 13's target: the C++ twin at
least 5x the eager sequence at [2, 64, 65536], CFG, top-k 2000 (note column).
"""

from __future__ import annotations

import sys

import torch

import specops

from .harness import Row, time_fn, timed_backends, with_ratios

# (name, lead shape, vocab, cfg scale or None, top_k or None, top_p or None)
CASES_GPU = [
    ("Lumina window", (2, 64), 65536, 4.0, 2000, None),
    ("Lumina window", (2, 64), 65536, 4.0, 2000, 0.95),
    ("Lumina window", (2, 64), 65536, None, None, 0.9),
    ("LlamaGen step", (2,), 16384, 4.0, 2000, None),
    ("LlamaGen batch", (32,), 16384, 4.0, 2000, 1.0),
    ("LlamaGen window", (8, 32), 16384, 7.5, 1000, 0.95),
    ("Emu3 window", (2, 16), 184622, 3.0, 2048, None),
    ("LLaVA", (16,), 32000, None, 50, 0.9),
]
CASES_CPU = [
    ("Lumina window", (2, 64), 65536, 4.0, 2000, None),
    ("Lumina window", (2, 64), 65536, 4.0, 2000, 0.95),
    ("LlamaGen step", (2,), 16384, 4.0, 2000, None),
    ("Lumina window", (2, 4), 65536, 4.0, 2000, None),
    ("LLaVA", (4,), 32000, None, 50, 0.9),
]
CASES_QUICK = [("tiny", (2, 2), 1000, 4.0, 50, 0.9)]


def eager_probs(cond, uncond, scale, temperature, top_k, top_p):
    """The eager torch sequence probs_from_logits replaces (vLLM / LlamaGen style)."""
    x = cond.float()
    if uncond is not None:
        u = uncond.float()
        x = u + scale * (x - u)
    x = x / temperature
    if top_k is not None:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        xs, idx = torch.sort(x, dim=-1, descending=True)
        ps = torch.softmax(xs, -1)
        remove = (ps.cumsum(-1) - ps) >= top_p  # mass before this token already reaches p
        x = x.scatter(-1, idx, xs.masked_fill(remove, float("-inf")))
    return torch.softmax(x, -1)


def _bench_case(case, device, backends, copies) -> list[Row]:
    name, lead, vocab, cfg, top_k, top_p = case
    g = torch.Generator(device="cpu").manual_seed(0)
    dt = torch.bfloat16 if device == "cuda" else torch.float32

    def logits():
        return (torch.randn(*lead, vocab, generator=g) * 3).to(device=device, dtype=dt)

    conds = [logits() for _ in range(copies)]
    unconds = [logits() if cfg is not None else None for _ in range(copies)]
    out = torch.empty(*lead, vocab, device=device)
    shape = (
        f"{name} {list(lead)}x{vocab}"
        + (f" cfg={cfg:g}" if cfg is not None else "")
        + (f" k={top_k}" if top_k else "")
        + (f" p={top_p:g}" if top_p is not None else "")
    )
    n = conds[0].numel()
    moved = n * conds[0].element_size() * (2 if cfg is not None else 1) + n * 4
    rows: list[Row] = []

    def add(backend, st):
        gbps = moved / (st.median_us * 1e-6) / 1e9
        rows.append(
            Row("probs_from_logits", shape, backend, st.median_us, st.p20_us, st.p80_us, gbps)
        )

    kw = dict(temperature=1.0, top_k=top_k, top_p=top_p)
    big = n > 16 * 65536  # the [2, 64] windows
    with specops.validation(False):
        for be in backends:
            if be == "reference" and device == "cpu" and big:
                continue  # seconds per call
            fns = [
                lambda c=c, u=u, be=be: specops.probs_from_logits(
                    c,
                    cfg_scale=cfg,
                    uncond_logits=u,
                    backend=be,
                    out=out,
                    **kw,
                )
                for c, u in zip(conds, unconds)
            ]
            add(be, time_fn(fns, device))
        if device == "cuda" and "triton" in backends and (top_p is None or top_k is not None):
            add(
                "triton 1 prog/row",
                time_fn(row_kernel_calls(conds, unconds, cfg, top_k, top_p, out), device),
            )
    fns = [
        lambda c=c, u=u: eager_probs(c, u, cfg, 1.0, top_k, top_p) for c, u in zip(conds, unconds)
    ]
    add("eager torch", time_fn(fns, device))
    if device == "cpu" and big and top_k == 2000:
        for r in rows:
            if r.backend == "cpu":
                r.note = "target eager torch>=5"
    return rows


def row_kernel_calls(conds, unconds, cfg, top_k, top_p, out):
    """The one-program-a-row kernel (probs.py) on the same inputs: what backend "triton" ran
    before the rows were split over programs (probs_split.py): without top-p before ed86619,
    with top-p after a top-k before 725a5c5."""
    from specops.triton_kernels.probs import probs_triton

    v = out.shape[-1]
    rows_per_req = out.numel() // v // out.shape[0] if out.dim() > 1 else 1
    return [
        lambda c=c, u=u: probs_triton(
            c.reshape(-1, v),
            None if u is None else u.reshape(-1, v),
            1.0,
            top_k,
            top_p if top_p is not None and top_p < 1.0 else None,
            cfg if u is not None else None,
            rows_per_req,
            out.view(-1, v),
        )  # fmt: skip
        for c, u in zip(conds, unconds)
    ]


def run(device: str, quick: bool) -> list[Row]:
    cases = CASES_QUICK if quick else (CASES_GPU if device == "cuda" else CASES_CPU)
    backends = timed_backends("probs_from_logits", device)
    copies = 4 if device == "cuda" else 1
    rows: list[Row] = []
    for case in cases:
        rows += _bench_case(case, device, backends, copies)
    return with_ratios(rows, ("triton", "cpu", "reference"))


if __name__ == "__main__":
    from .__main__ import main

    sys.exit(main(["--ops", "probs", *sys.argv[1:]]))
