"""The ledger's bench cases (bench/ledger.json), built on a device: specops's kernel and its peers
on the same inputs, never the reference.

A case is (op, backend, shape) with the traffic bench's shape labels (bench/bench_traffic.py,
bench/traffic_triton.py), so that the lease's time, the traffic model's prediction and Nsight
Compute's counters all speak of one input.  ``build(case, device)`` returns a ``Built``: the
specops call and each peer's call, as lists over ``copies`` input sets (rotated so the L2
cannot hold them).  ``time(built)`` times them side by side (CUDA-graph replay, medians).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import specops
from specops import Tree

from . import inputs, peers

F32 = 4
KARY = {21: (4, 3), 15: (2, 4), 13: (3, 3)}  # num_nodes -> Tree.kary(k, d), as the traffic bench


@dataclass
class Built:
    fns: list[Callable[[], object]]  # specops at the case's backend, one call per input copy
    peers: dict[str, list[Callable[[], object]]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # peer -> why it cannot run


def parse(shape: str) -> tuple[dict[str, str], set[str]]:
    """'sjd_pac root B=2 L=64' -> ({'B': '2', 'L': '64'}, {'sjd_pac', 'root'})"""
    kw, flags = {}, set()
    for tok in shape.split():
        k, eq, v = tok.partition("=")
        if eq:
            kw[k] = v
        else:
            flags.add(tok)
    return kw, flags


def _int(kw, *names):
    try:
        return [int(kw[n]) for n in names]
    except KeyError as e:
        raise ValueError(f"shape lacks {e.args[0]}=...") from None


def _gen(device, seed):
    return torch.Generator(device=device).manual_seed(seed)


def _peer(built: Built, name: str, make: Callable[[], list]) -> None:
    """Add a peer, or record why it cannot run (not installed, no kernel for this device)."""
    try:
        built.peers[name] = make()
    except Exception as exc:  # a peer's own failure is a row's note, not the lease's end
        built.missing[name] = f"{type(exc).__name__}: {str(exc)[:120]}"


# ---- sampling ---------------------------------------------------------------------------------
def _sample(kw, flags, be, dev, copies):
    b, v = _int(kw, "B", "V")
    ps = [inputs.probs((b, v), _gen(dev, i), dev) for i in range(copies)]
    built = Built([lambda p=p: specops.sample(p, seed=1, backend=be) for p in ps])
    built.peers["torch.multinomial"] = [lambda p=p: torch.multinomial(p, 1) for p in ps]
    return built


def _sample_wor(kw, flags, be, dev, copies):
    r, v, k = _int(kw, "R", "V", "k")
    ps = [inputs.probs((r, v), _gen(dev, i), dev) for i in range(copies)]
    built = Built(
        [lambda p=p: specops.sample_without_replacement(p, k, seed=1, backend=be) for p in ps]
    )
    built.peers["torch.multinomial wor"] = [lambda p=p: torch.multinomial(p, k) for p in ps]
    return built


# ---- verification -----------------------------------------------------------------------------
def _chain(kw, flags, be, dev, copies):
    b, k, v = _int(kw, "B", "K", "V")
    if "gsd" in flags:
        return _chain_gsd(b, k, v, be, dev, copies)
    if "greedy" in flags:
        return _chain_greedy(b, k, v, be, dev, copies)
    block = "block" in flags
    ins = [inputs.chain_inputs(b, k, v, dev, _gen(dev, b * 131 + k + v + i)) for i in range(copies)]
    built = Built(
        [lambda i=i: specops.verify_chain(*i, seed=1, block=block, backend=be) for i in ins]
    )
    if block:
        return built

    def flashinfer():
        fi, why = peers.flashinfer_chain()
        if fi is None:
            raise ImportError(why)
        return [lambda i=i: fi(i[2], i[1].int(), i[0]) for i in ins]

    def sglang():
        sg, why = peers.sglang_chain()
        if sg is None:
            raise ImportError(why)
        args = [peers.sglang_chain_args(*i, _gen(dev, 5)) for i in ins]
        return [lambda a=a: sg(*a) for a in args]

    _peer(built, "flashinfer", flashinfer)
    _peer(built, "sglang_triton", sglang)
    return built


def _chain_gsd(b, k, v, be, dev, copies):
    """GSD's grouped acceptance at Lumina-mGPT's image range (8192 codes of 256 dims, the
    authors' w 7, p 0.15, d 0.5) beside the authors' loop (a sort and host syncs per draft:
    eager launches, never a graph), both on the same uniforms."""
    from .gsd_authors import authors_chain, chain_inputs

    ins = [chain_inputs(b, k, v, device=dev, seed=i) for i in range(copies)]
    built = Built(
        [
            lambda i=i: specops.verify_chain(
                i[0], i[1], i[2], relax=i[3], uniforms=i[4], backend=be
            )
            for i in ins
        ]  # fmt: skip
    )
    built.peers["gsd authors loop"] = [lambda i=i: authors_chain(*i) for i in ins]
    return built


def _chain_greedy(b, k, v, be, dev, copies):
    """Greedy verification, half the drafts matched (as bench_traffic counts it), beside eager
    torch's argmax of every row and the matched prefix."""
    ins = [inputs.greedy_chain_inputs(b, k, v, dev, _gen(dev, b + k + v + i), accept=k // 2 + 1)
           for i in range(copies)]  # fmt: skip
    built = Built([lambda i=i: specops.verify_chain(*i, greedy=True, backend=be) for i in ins])
    built.peers["torch argmax + prefix (eager)"] = [
        lambda i=i: inputs.torch_greedy_chain(*i) for i in ins
    ]
    return built


def _tree(kw, flags, be, dev, copies):
    b, n, v = _int(kw, "B", "N", "V")
    if n not in KARY:
        raise ValueError(f"N={n}: no kary tree of that size (known: {sorted(KARY)})")
    tree = Tree.kary(*KARY[n]).to(dev)
    if "greedy" in flags:
        return _tree_greedy(b, tree, v, be, dev, copies)
    det = "det" in flags
    ins = [
        inputs.tree_inputs(b, tree, v, dev, _gen(dev, b + n + v + i), deterministic=det)
        for i in range(copies)
    ]
    built = Built(
        [lambda i=i: specops.verify_tree(i[0], tree, i[1], i[2], seed=1, backend=be) for i in ins]
    )
    if det:

        def sgl():
            fn, why = peers.sgl_tree()
            if fn is None:
                raise ImportError(why)
            depth = int(tree.depth.max())
            return [peers.sgl_call(fn, i[0], tree, i[1], depth) for i in ins]

        _peer(built, "sgl-kernel tree", sgl)
    return built


def _tree_greedy(b, tree, v, be, dev, copies):
    """Greedy tree verification down to the leaves (as bench_traffic counts it), beside eager
    torch's argmax of every node row (what a greedy verifier reads at least, without its walk)."""
    depth = int(tree.depth.max())
    ins = [inputs.greedy_tree_inputs(b, tree, v, dev, _gen(dev, b + v + i), depth=depth)
           for i in range(copies)]  # fmt: skip
    built = Built(
        [lambda i=i: specops.verify_tree(i[0], tree, i[1], greedy=True, backend=be) for i in ins]
    )
    built.peers["torch argmax of every row (eager, no walk)"] = [
        lambda i=i: i[0].argmax(-1) for i in ins
    ]
    return built


def _jacobi(kw, flags, be, dev, copies):
    b, L, v = _int(kw, "B", "L", "V")
    if "gsd" in flags:
        return _jacobi_gsd(b, L, v, be, dev, copies)
    fns = []
    for i in range(copies):
        gen = _gen(dev, 7 + i)
        if "sjd_pac" in flags:
            tree = Tree.kary_chain(3, 3, L)
            p, q, x, _, _ = inputs.tree_case(tree, b, v, "root", gen, dev, 2000)
            tree = tree.to(dev)
            fns.append(
                lambda p=p, x=x, q=q, t=tree: specops.verify_jacobi(
                    p, x, q, tree=t, num_candidates=3, seed=1, backend=be
                )
            )
        else:
            p = inputs.probs((b, L, v), gen, dev)
            q = inputs.near(p, gen)
            x = inputs.draw(q, gen)
            fns.append(lambda p=p, x=x, q=q: specops.verify_jacobi(p, x, q, seed=1, backend=be))
    return Built(fns)


def _jacobi_gsd(b, L, v, be, dev, copies):
    """SJD's window at Lumina-mGPT's shape with GSD's grouping (bench/gsd_authors.py inputs)
    beside the authors' loop (slot by slot until the first rejection, a sort and host syncs per
    slot), on the same uniforms."""
    from .gsd_authors import authors_chain
    from .gsd_authors import inputs as gsd_inputs

    ins = [gsd_inputs(b, L, v, device=dev, seed=i) for i in range(copies)]
    built = Built(
        [
            lambda i=i: specops.verify_jacobi(
                i[0], i[2], i[1], relax=i[3], uniforms=i[4], backend=be
            )
            for i in ins
        ]  # fmt: skip
    )
    built.peers["gsd authors loop"] = [
        lambda i=i: authors_chain(i[0], i[2], i[1], i[3], i[4]) for i in ins
    ]
    return built


def _path(kw, flags, be, dev, copies):
    b, n, v = _int(kw, "B", "N", "V")
    tree = Tree.kary(*KARY[n]).to(dev)
    ins = [inputs.tree_inputs(b, tree, v, dev, _gen(dev, b + n + i)) for i in range(copies)]
    return Built(
        [lambda i=i: specops.path_acceptance(i[0], i[2], tree, i[1], backend=be) for i in ins]
    )


# ---- logits, attention, KV and features ---------------------------------------------------------
def _probs_case(kw, flags, be, dev, copies):
    from .bench_probs import eager_probs, row_kernel_calls

    lead = tuple(int(d) for d in kw["R"].split("x"))
    (v,) = _int(kw, "V")
    cfg = None if kw.get("cfg", "None") == "None" else float(kw["cfg"])
    top_k = None if kw.get("k", "None") == "None" else int(kw["k"])
    top_p = None if kw.get("p", "None") == "None" else float(kw["p"])
    g = torch.Generator().manual_seed(0)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def logits():
        return (torch.randn(*lead, v, generator=g) * 3).to(dev, dt)

    conds = [logits() for _ in range(copies)]
    unconds = [logits() if cfg is not None else None for _ in range(copies)]
    out = torch.empty(*lead, v, device=dev)
    opts = dict(temperature=1.0, top_k=top_k, top_p=top_p)
    built = Built(
        [
            lambda c=c, u=u: specops.probs_from_logits(
                c, cfg_scale=cfg, uncond_logits=u, backend=be, out=out, **opts
            )
            for c, u in zip(conds, unconds)
        ]
    )
    built.peers["eager torch"] = [
        lambda c=c, u=u: eager_probs(c, u, cfg, 1.0, top_k, top_p) for c, u in zip(conds, unconds)
    ]
    if be == "triton":
        _peer(
            built,
            "triton row kernel",
            lambda: row_kernel_calls(conds, unconds, cfg, top_k, top_p, out),
        )
    return built


def _attention(kw, flags, be, dev, copies):
    from .bench_tree_attention import Case, peer_flashinfer, peer_sdpa

    b, n, s, d = _int(kw, "B", "N", "S", "D")
    hq, hkv = (int(h) for h in kw["H"].split("/"))
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    c = Case(b, n, s, hq, hkv, d, dev, dt, copies)
    if "page" in kw:
        fns = [
            lambda k=k, v=v: specops.tree_attention(
                c.q, k, v, c.L, c.tree, block_table=c.bt, backend=be
            )
            for k, v in zip(c.kp, c.vp)
        ]
    else:
        fns = [
            lambda k=k, v=v: specops.tree_attention(c.q, k, v, c.L, c.tree, backend=be)
            for k, v in zip(c.k, c.v)
        ]
    built = Built(fns)
    _peer(built, "sdpa dense mask", lambda: peer_sdpa(c)[0])
    _peer(built, "flashinfer prefill", lambda: peer_flashinfer(c)[0])
    return built


def _commit(kw, flags, be, dev, copies):
    from .bench_kv import eager_peer, kv_inputs

    layers, b, hkv, d, m = _int(kw, "L", "B", "Hkv", "D", "m")
    cap = int(kw.get("S", 1024))
    caches, _, cs0, slots = kv_inputs(layers, b, cap, hkv, d, m, None, dev, copies)
    cs = cs0.clone()

    def commit(c):
        cs.copy_(cs0)
        specops.commit_kv(c, cs, slots, backend=be)

    built = Built([lambda c=c: commit(c) for c in caches])
    built.peers["eager index_copy loop"] = [eager_peer(c, cs, cs0, slots, m) for c in caches]
    return built


def _append(kw, flags, be, dev, copies):
    b, s, hkv, d, n = _int(kw, "B", "S", "Hkv", "D", "N")
    g = _gen(dev, 3)
    kc = torch.randn(b, s + n, hkv, d, device=dev, dtype=torch.bfloat16, generator=g)
    vc = torch.randn_like(kc)
    new = [torch.randn(b, n, hkv, d, device=dev, dtype=torch.bfloat16, generator=g)]
    new = new * copies
    L = torch.full((b,), s, dtype=torch.int32, device=dev)
    built = Built([lambda k=k: specops.append_kv(kc, vc, k, k, L, backend=be) for k in new])
    pos = (L.long()[:, None] + torch.arange(n, device=dev)).reshape(-1)
    rows = torch.arange(b, device=dev).repeat_interleave(n)

    def eager(k):
        kc[rows, pos] = k.reshape(b * n, hkv, d)
        vc[rows, pos] = k.reshape(b * n, hkv, d)

    built.peers["eager index_put"] = [lambda k=k: eager(k) for k in new]
    return built


def _gather(kw, flags, be, dev, copies):
    b, n, m, h = _int(kw, "B", "N", "M", "H")
    g = _gen(dev, 1)
    src = torch.randn(b, n, h, device=dev, dtype=torch.bfloat16, generator=g)
    idx = [
        torch.stack([torch.randperm(n, device=dev, generator=g)[:m] for _ in range(b)])
        for _ in range(copies)
    ]
    built = Built([lambda i=i: specops.gather_rows(src, i, backend=be) for i in idx])
    built.peers["eager torch.gather"] = [
        lambda i=i: src.gather(1, i[:, :, None].expand(-1, -1, h)) for i in idx
    ]
    return built


BUILDERS = {
    "sample": _sample,
    "sample_without_replacement": _sample_wor,
    "verify_chain": _chain,
    "verify_tree": _tree,
    "verify_jacobi": _jacobi,
    "path_acceptance": _path,
    "probs_from_logits": _probs_case,
    "tree_attention": _attention,
    "commit_kv": _commit,
    "append_kv": _append,
    "gather_rows": _gather,
}


def build(case: dict, device: str, copies: int = 4) -> Built:
    """The case's calls on ``device`` (ValueError naming the case when it cannot be built)."""
    op, be, shape = case["op"], case["backend"], case["shape"]
    if op not in BUILDERS:
        raise ValueError(f"bench case {op} {shape}: no builder for op {op!r} ({sorted(BUILDERS)})")
    kw, flags = parse(shape)
    try:
        return BUILDERS[op](kw, flags, be, device, copies)
    except (KeyError, ValueError) as e:
        raise ValueError(f"bench case {op} {be} {shape!r}: {e}") from None


def peer_modules_present() -> dict[str, bool]:
    """Which peer packages this machine can import (the dry run reports them)."""
    return {
        m: importlib.util.find_spec(m) is not None for m in ("flashinfer", "sgl_kernel", "tvm_ffi")
    }
