"""Eager host overhead of every public op: tiny inputs, backend "auto", perf_counter over many calls
(issue 27: at most 5 us a call for verify_chain, verify_tree, verify_jacobi and sample, no op
above 8 us).  On the CPU "auto" is the C++
twin where one exists, otherwise the reference (marked in the note).  Floors measured in the same
run: an empty Python call and the verify_chain binding alone."""

from __future__ import annotations

import torch

import specops
from specops import Tree, _build

from .harness import Row, per_call_us

CALLS = 20000
CALLS_QUICK = 300


def _per_call_us(fn, calls: int, blocks: int = 10) -> tuple[float, float, float]:
    """(median, p20, p80) over ``blocks`` blocks of calls/blocks calls each, in us per call."""
    for _ in range(min(200, calls)):
        fn()
    per = sorted(per_call_us(fn, max(calls // blocks, 1), blocks))
    return per[len(per) // 2], per[int(0.2 * (len(per) - 1))], per[int(0.8 * (len(per) - 1))]


def _cases(device: str):
    g = torch.Generator().manual_seed(0)
    b, k, v, h = 2, 4, 16, 8

    def probs(*shape):
        return torch.softmax(torch.randn(*shape, generator=g), -1).to(device)

    target, draft = probs(b, k + 1, v), probs(b, k, v)
    tokens = torch.randint(0, v, (b, k), generator=g).to(device)
    tree = Tree.kary(2, 3).to(device)
    n = tree.num_nodes
    tt, td = probs(b, n, v), probs(b, n, v)
    ttok = torch.randint(0, v, (b, n), generator=g).to(device)
    wt, wd = probs(b, 4, v), probs(b, 4, v)
    wtok = torch.randint(0, v, (b, 4), generator=g).to(device)
    logits = torch.randn(b, v, generator=g).to(device)
    q = torch.randn(b, n, 4, h, generator=g).to(device)
    kc = torch.randn(b, 32, 2, h, generator=g).to(device)
    vc = torch.randn(b, 32, 2, h, generator=g).to(device)
    seqlens = torch.tensor([5, 9], dtype=torch.int32, device=device)
    nk = torch.randn(b, 2, 2, h, generator=g).to(device)  # two new K/V rows per request
    caches = torch.randn(4, 2, b, 32, 2, h, generator=g).to(device)
    cs = torch.tensor([5, 9], dtype=torch.int32, device=device)
    slots = torch.full((b, 3), -1, dtype=torch.int32, device=device)
    src = torch.randn(b, 10, h, generator=g).to(device)
    idx = torch.randint(0, 10, (b, 3), generator=g).to(device)
    emb = torch.randn(v, h, generator=g).to(device)
    feats = torch.randn(b, 3, h, generator=g).to(device)
    paths = torch.randint(0, v, (b, 3, 4), generator=g).to(device)
    fc = specops.FeatureCache(b, 10, h, device=device)
    pos = torch.tensor([[0, 1], [2, 3]], device=device)
    fcf = torch.randn(b, 2, h, generator=g).to(device)
    offset = torch.zeros(1, dtype=torch.int64, device=device)
    out = torch.empty(b, dtype=torch.int32, device=device)
    return {
        "sample": lambda: specops.sample(target[:, 0], seed=1, offset=offset, out=out),
        "sample_without_replacement": lambda: specops.sample_without_replacement(
            target[:, 0], 2, seed=1, offset=offset
        ),
        "verify_chain": lambda: specops.verify_chain(target, tokens, draft, seed=1, offset=offset),
        "verify_tree": lambda: specops.verify_tree(tt, tree, ttok, td, seed=1, offset=offset),
        "verify_jacobi": lambda: specops.verify_jacobi(wt, wtok, wd, seed=1, offset=offset),
        "path_acceptance": lambda: specops.path_acceptance(tt, td, tree, ttok),
        "probs_from_logits": lambda: specops.probs_from_logits(logits, temperature=0.8),
        "tree_attention": lambda: specops.tree_attention(q, kc, vc, seqlens, tree),
        "commit_kv": lambda: specops.commit_kv(caches, cs, slots),
        "append_kv": lambda: specops.append_kv(kc, vc, nk, nk, seqlens),
        "gather_rows": lambda: specops.gather_rows(src, idx),
        "drafter_inputs": lambda: specops.drafter_inputs(emb, idx, feats),
        "path_similarity": lambda: specops.path_similarity(paths, emb),
        "FeatureCache.write": lambda: fc.write(pos, fcf, 1),
    }


def run(device: str, quick: bool) -> list[Row]:
    calls = CALLS_QUICK if quick else CALLS
    rows = []

    def row(name, fn, backend, note=""):
        med, lo, hi = _per_call_us(fn, calls)
        rows.append(Row("dispatch", name, backend, med, lo, hi, None, note=note))

    row("empty python call", lambda: None, "python")
    if _build.has_cpp() and device == "cpu":
        g = torch.Generator().manual_seed(0)
        t = torch.softmax(torch.randn(2, 5, 16, generator=g), -1)
        tok = torch.zeros(2, 4, dtype=torch.int32)
        o1, o2 = torch.empty(2, 5, dtype=torch.int32), torch.empty(2, dtype=torch.int32)
        bind = _build._C.verify_chain_cpu
        given = {"target_probs": t, "draft_tokens": tok, "rng": (None, 1, None, 0),
                 "delta": 0.0, "group_window": 0, "group_p": 0.0, "group_d": 0.0,
                 "image_start": 0, "greedy": False, "block": False, "out_tokens": o1,
                 "out_num_accepted": o2}  # fmt: skip
        names = specops.declaration("verify_chain").binding_names  # the order the op declares
        args = tuple(given.get(n) for n in names)  # None: the optional tensors
        row("verify_chain binding alone", lambda: bind(*args), "cpu")
    with specops.validation(False):
        for name, fn in _cases(device).items():
            row(name, fn, "auto", note=f"runs {_resolved(name, device)}")
    return rows


def _resolved(name: str, device: str) -> str:
    """What "auto" runs for these inputs (the op's backend table, resolved as the op does)."""
    be = specops.resolve_backend(name.split(".")[0], device)
    return {"cpu": "cpu (C++ twin)"}.get(be, be)
