"""The inputs of the fast-path tests (tests/test_fast_path_*.py): a valid call of every op, the
argument mutations several ops share (dtypes, layouts, seeds and offsets, tokens, draft
probabilities) and the rows of the verify and sample ops (fast_path_table.py has the rest)."""

from __future__ import annotations

import torch
from helpers import gen, random_probs

import specops
from specops import Tree

B, K, V = 3, 4, 11
TREE = Tree.kary(2, 3)  # 7 nodes, depth 3, 4 leaves
JTREE = Tree.kary_chain(2, 2, 6)


def _rand(*shape, dtype=torch.float32):
    return torch.rand(*shape, generator=gen(1), dtype=dtype)


def _i32(values):
    return torch.tensor(values, dtype=torch.int32)


def _randn(*shape):
    return torch.randn(*shape, generator=gen(3))


def _tokens(rows, g, hi=V):
    return torch.randint(0, hi, (B, rows), generator=g)


def _base(op: str) -> dict:
    g = gen(7)
    if op == "verify_chain":
        return dict(target_probs=random_probs(B, K + 1, V, generator=g),
                    draft_tokens=_tokens(K, g), draft_probs=random_probs(B, K, V, generator=g),
                    seed=5, offset=2)  # fmt: skip
    if op == "verify_tree":
        n = TREE.num_nodes
        return dict(target_probs=random_probs(B, n, V, generator=g), tree=TREE,
                    draft_tokens=_tokens(n, g), draft_probs=random_probs(B, n, V, generator=g),
                    seed=5, offset=2)  # fmt: skip
    if op == "verify_jacobi":
        return dict(target_probs=random_probs(B, 6, V, generator=g), window_tokens=_tokens(6, g),
                    draft_probs=random_probs(B, 6, V, generator=g), seed=5, offset=2)  # fmt: skip
    if op == "path_acceptance":
        n = TREE.num_nodes
        return dict(target_probs=random_probs(B, n, V, generator=g),
                    draft_probs=random_probs(B, n, V, generator=g), tree=TREE,
                    draft_tokens=_tokens(n, g))  # fmt: skip
    if op == "sample":
        return dict(probs=random_probs(B, V, generator=g), seed=5, offset=2)
    if op == "sample_without_replacement":
        return dict(probs=random_probs(B, V, generator=g), k=3, seed=5, offset=2)
    if op == "probs_from_logits":
        return dict(logits=torch.randn(B, V, generator=g), temperature=0.8, top_k=5, top_p=0.9)
    if op == "tree_attention":
        return dict(q=torch.randn(B, TREE.num_nodes, 4, 8, generator=g),
                    k_cache=torch.randn(B, 16, 2, 8, generator=g),
                    v_cache=torch.randn(B, 16, 2, 8, generator=g),
                    cache_seqlens=_i32([0, 5, 9]), tree=TREE)  # fmt: skip
    if op == "commit_kv":
        return dict(caches=torch.randn(2, 2, B, 16, 2, 8, generator=g),
                    cache_seqlens=torch.tensor([3, 5, 0], dtype=torch.int32),
                    accepted_slots=torch.tensor([[1, 3, -1], [0, 2, 4], [-1, -1, -1]],
                                                dtype=torch.int32))  # fmt: skip
    if op == "append_kv":
        return dict(k_cache=torch.randn(B, 16, 2, 8, generator=g),
                    v_cache=torch.randn(B, 16, 2, 8, generator=g),
                    k=torch.randn(B, 4, 2, 8, generator=g), v=torch.randn(B, 4, 2, 8, generator=g),
                    cache_seqlens=_i32([0, 5, 12]))  # fmt: skip
    if op == "gather_rows":
        return dict(src=torch.randn(B, 10, 8, generator=g), index=_tokens(4, g, hi=10))
    if op == "drafter_inputs":
        return dict(embedding=torch.randn(V, 6, generator=g), tokens=_tokens(4, g),
                    features=torch.randn(B, 4, 5, generator=g))  # fmt: skip
    if op == "path_similarity":
        return dict(paths=torch.randint(0, V, (B, 3, 4), generator=g),
                    codebook=torch.randn(V, 6, generator=g), alpha=0.9)  # fmt: skip
    raise KeyError(op)


# what an op writes in place (compared after the call, with what it returns)
_WRITTEN = {"commit_kv": ("caches", "cache_seqlens"), "append_kv": ("k_cache", "v_cache")}


def _first(op):
    special = {"probs_from_logits": "logits", "tree_attention": "q", "commit_kv": "caches",
               "append_kv": "k", "gather_rows": "src", "drafter_inputs": "embedding",
               "path_similarity": "codebook"}  # fmt: skip
    return "probs" if op.startswith("sample") else special.get(op, "target_probs")


def _tok(op):
    return "window_tokens" if op == "verify_jacobi" else "draft_tokens"


def _set(key, fn):
    """A mutation: kwargs[key] = fn(kwargs[key]) (fn may also read the whole dict)."""

    def mutate(kw):
        kw[key] = fn(kw[key]) if fn.__code__.co_argcount == 1 else fn(kw[key], kw)
        return kw

    return mutate


def _lastdim_strided(t):
    return t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() >= 2 else t[::1]


_COMMON = {
    "valid": lambda kw: kw,
    "probs f16": lambda kw: _set(_first(kw["_op"]), lambda t: t.half())(kw),
    "probs bf16": lambda kw: _set(_first(kw["_op"]), lambda t: t.bfloat16())(kw),
    "probs f64": lambda kw: _set(_first(kw["_op"]), lambda t: t.double())(kw),
    "probs int": lambda kw: _set(_first(kw["_op"]), lambda t: t.int())(kw),
    "probs last dim strided": lambda kw: _set(_first(kw["_op"]), _lastdim_strided)(kw),
    "probs batch expanded": lambda kw: _set(_first(kw["_op"]), lambda t: t[:1].expand_as(t))(kw),
    "probs rows sliced": lambda kw: _set(
        _first(kw["_op"]), lambda t: torch.cat([t, t], 0)[::2] if t.dim() else t
    )(kw),
    "probs empty vocab": lambda kw: _set(_first(kw["_op"]), lambda t: t[..., :0])(kw),
    "probs one dim less": lambda kw: _set(_first(kw["_op"]), lambda t: t[0])(kw),
    "probs 0-dim": lambda kw: _set(_first(kw["_op"]), lambda t: t.flatten()[0])(kw),
    "probs meta": lambda kw: _set(_first(kw["_op"]), lambda t: t.to("meta"))(kw),
    "probs requires grad": lambda kw: _set(
        _first(kw["_op"]), lambda t: t.clone().requires_grad_(True)
    )(kw),
    "probs a list": lambda kw: _set(_first(kw["_op"]), lambda t: t.tolist())(kw),
    "probs nan": lambda kw: _set(
        _first(kw["_op"]), lambda t: t.index_fill(-1, torch.tensor([1]), float("nan"))
    )(kw),
}

_RNG = {
    "seed tensor [B]": _set("seed", lambda s: torch.arange(B, dtype=torch.int64) + 9),
    "seed tensor [1]": _set("seed", lambda s: torch.tensor([9])),
    "seed tensor [2]": _set("seed", lambda s: torch.tensor([9, 4])),
    "seed tensor []": _set("seed", lambda s: torch.tensor(9)),
    "seed tensor [B, 1]": _set("seed", lambda s: torch.arange(B).reshape(B, 1)),
    "seed tensor int32": _set("seed", lambda s: torch.tensor([9], dtype=torch.int32)),
    "seed tensor strided": _set("seed", lambda s: torch.arange(2 * B, dtype=torch.int64)[::2]),
    "seed tensor expanded": _set("seed", lambda s: torch.tensor([9]).expand(B)),
    "seed 2**63": _set("seed", lambda s: 2**63),
    "seed -2**63": _set("seed", lambda s: -(2**63)),
    "seed -1": _set("seed", lambda s: -1),
    "seed True": _set("seed", lambda s: True),
    "seed float": _set("seed", lambda s: 1.5),
    "offset tensor [1]": _set("offset", lambda s: torch.tensor([3])),
    "offset tensor []": _set("offset", lambda s: torch.tensor(3)),
    "offset tensor [1, 1]": _set("offset", lambda s: torch.tensor([[3]])),
    "offset tensor [2]": _set("offset", lambda s: torch.tensor([3, 4])),
    "offset tensor int32": _set("offset", lambda s: torch.tensor([3], dtype=torch.int32)),
    "offset 2**64": _set("offset", lambda s: 2**64),
    "offset meta": _set("offset", lambda s: torch.tensor([3], device="meta")),
}

_TOKENS = {
    "tokens int64": lambda kw: _set(_tok(kw["_op"]), lambda t: t.long())(kw),
    "tokens int16": lambda kw: _set(_tok(kw["_op"]), lambda t: t.short())(kw),
    "tokens float": lambda kw: _set(_tok(kw["_op"]), lambda t: t.float())(kw),
    "tokens last dim strided": lambda kw: _set(_tok(kw["_op"]), _lastdim_strided)(kw),
    "tokens one column less": lambda kw: _set(_tok(kw["_op"]), lambda t: t[:, :-1])(kw),
    "tokens one row less": lambda kw: _set(_tok(kw["_op"]), lambda t: t[:-1])(kw),
    "tokens out of vocab": lambda kw: _set(_tok(kw["_op"]), lambda t: t + V)(kw),
    "tokens negative": lambda kw: _set(_tok(kw["_op"]), lambda t: t - V)(kw),
    "tokens int64 past int32": lambda kw: _set(_tok(kw["_op"]), lambda t: t.long() + 2**32)(kw),
    "tokens meta": lambda kw: _set(_tok(kw["_op"]), lambda t: t.to("meta"))(kw),
}

_DRAFT = {
    "draft None": _set("draft_probs", lambda t: None),
    "draft f16": _set("draft_probs", lambda t: t.half()),
    "draft wrong vocab": _set("draft_probs", lambda t: t[..., :-1]),
    "draft one row less": _set("draft_probs", lambda t: t[:, :-1]),
    "draft batch expanded": _set("draft_probs", lambda t: t[:1].expand_as(t)),
    "draft last dim strided": _set("draft_probs", _lastdim_strided),
}


def _batch0(*names):
    """A mutation: the inputs ``names`` without their rows (batch 0)."""
    return lambda kw: {**kw, **{name: kw[name][:0] for name in names}}


def _out(shapes_dtypes):
    return tuple(torch.empty(s, dtype=d) for s, d in shapes_dtypes)


_I32 = torch.int32
_OPS_VERIFY_SAMPLE = {
    "verify_chain": {
        **_RNG,
        **_TOKENS,
        **_DRAFT,
        "batch 0": _batch0("target_probs", "draft_tokens", "draft_probs"),
        "no rows": lambda kw: {**kw, "target_probs": kw["target_probs"][:, :0]},
        "greedy": lambda kw: {**kw, "greedy": True},
        "greedy 1": lambda kw: {**kw, "greedy": 1},
        "num_draft int64": lambda kw: {**kw, "num_draft": torch.tensor([0, 2, K])},
        "num_draft int32": lambda kw: {**kw, "num_draft": torch.tensor([0, 2, K], dtype=_I32)},
        "num_draft [B, 1]": lambda kw: {**kw, "num_draft": torch.tensor([[0], [2], [K]])},
        "num_draft strided": lambda kw: {**kw, "num_draft": torch.tensor([0, 9, 2, 9, K, 9])[::2]},
        "num_draft past K": lambda kw: {**kw, "num_draft": torch.tensor([K + 3, -2, 1])},
        "uniforms": lambda kw: {**kw, "uniforms": _rand(B, K + 1)},
        "uniforms transposed": lambda kw: {**kw, "uniforms": _rand(K + 1, B).t()},
        "uniforms wrong shape": lambda kw: {**kw, "uniforms": _rand(B, K)},
        "uniforms f64": lambda kw: {**kw, "uniforms": _rand(B, K + 1, dtype=torch.float64)},
        "out": lambda kw: {**kw, "out": _out([((B, K + 1), _I32), ((B,), _I32)])},
        "out list": lambda kw: {**kw, "out": list(_out([((B, K + 1), _I32), ((B,), _I32)]))},
        "out int64": lambda kw: {**kw, "out": _out([((B, K + 1), torch.int64), ((B,), _I32)])},
        "out strided": lambda kw: {
            **kw,
            "out": (torch.empty(K + 1, B, dtype=_I32).t(), torch.empty(B, dtype=_I32)),
        },
        "out expanded": lambda kw: {
            **kw,
            "out": (torch.empty(1, K + 1, dtype=_I32).expand(B, -1), torch.empty(B, dtype=_I32)),
        },
        "out one tensor": lambda kw: {**kw, "out": torch.empty(B, K + 1, dtype=_I32)},
        "out with a None": lambda kw: {**kw, "out": (torch.empty(B, K + 1, dtype=_I32), None)},
        "out three": lambda kw: {**kw, "out": _out([((B, K + 1), _I32), ((B,), _I32)] * 2)[:3]},
        "relax": lambda kw: {
            **kw,
            "relax": specops.Relaxation(torch.randint(0, V, (V, 2), generator=gen(2)), 0.2),
        },
    },  # fmt: skip
    "verify_tree": {
        **_RNG,
        **_TOKENS,
        **_DRAFT,
        "without replacement": lambda kw: {**kw, "without_replacement": True},
        "without replacement 1": lambda kw: {**kw, "without_replacement": 1},
        "greedy": lambda kw: {**kw, "greedy": True},
        "tree of batch B": lambda kw: {**kw, "tree": Tree.kary(2, 3, batch=B)},
        "tree too small": lambda kw: {**kw, "tree": Tree.kary(2, 2)},
        "tree not a Tree": lambda kw: {**kw, "tree": TREE.first_child},
        "tree meta": lambda kw: {**kw, "tree": TREE.to("meta")},
        "uniforms": lambda kw: {**kw, "uniforms": _rand(B, TREE.num_nodes)},
        "uniforms wrong shape": lambda kw: {**kw, "uniforms": _rand(B, 2)},
        "out": lambda kw: {**kw, "out": _out([((B, 3), _I32), ((B, 3), _I32), ((B,), _I32)])},
        "out wrong width": lambda kw: {
            **kw,
            "out": _out([((B, 4), _I32), ((B, 4), _I32), ((B,), _I32)]),
        },
        "batch 0": _batch0("target_probs", "draft_tokens", "draft_probs"),
    },  # fmt: skip
    "verify_jacobi": {
        **_RNG,
        **_TOKENS,
        **_DRAFT,
        "tree": lambda kw: {**kw, "tree": JTREE},
        "tree wrong size": lambda kw: {**kw, "tree": TREE},
        "candidates 3": lambda kw: {**kw, "num_candidates": 3},
        "candidates 3 tree": lambda kw: {**kw, "num_candidates": 3, "tree": JTREE},
        "candidates 0": lambda kw: {**kw, "num_candidates": 0},
        "candidates True": lambda kw: {**kw, "num_candidates": True},
        "no continuation": lambda kw: {**kw, "continue_after_reject": False},
        "continuation 0": lambda kw: {**kw, "continue_after_reject": 0},
        "uniforms": lambda kw: {**kw, "uniforms": _rand(B, 12)},
        "uniforms wrong shape": lambda kw: {**kw, "uniforms": _rand(B, 6)},
        "batch 0": _batch0("target_probs", "window_tokens", "draft_probs"),
    },  # fmt: skip
    "path_acceptance": {
        **_TOKENS,
        **_DRAFT,
        "tree of batch B": lambda kw: {**kw, "tree": Tree.kary(2, 3, batch=B)},
        "tree too small": lambda kw: {**kw, "tree": Tree.kary(2, 2)},
        "out": lambda kw: {**kw, "out": _out([((B, 4), torch.float32)] * 2)},
        "out wrong dtype": lambda kw: {**kw, "out": _out([((B, 4), _I32)] * 2)},
    },  # fmt: skip
    "sample": {
        **_RNG,
        "probs 1-D": lambda kw: {**kw, "probs": kw["probs"][0]},
        "probs 3-D": lambda kw: {**kw, "probs": kw["probs"].reshape(B, 1, V)},
        "batch 0": _batch0("probs"),
        "out": lambda kw: {**kw, "out": torch.empty(B, dtype=_I32)},
        "out strided": lambda kw: {**kw, "out": torch.empty(2 * B, dtype=_I32)[::2]},
        "out expanded": lambda kw: {**kw, "out": torch.empty(1, dtype=_I32).expand(B)},
        "out int64": lambda kw: {**kw, "out": torch.empty(B, dtype=torch.int64)},
        "out wrong shape": lambda kw: {**kw, "out": torch.empty(B + 1, dtype=_I32)},
        "out a tuple": lambda kw: {**kw, "out": (torch.empty(B, dtype=_I32),)},
        "uniforms": lambda kw: {**kw, "uniforms": _rand(B)},
    },  # fmt: skip
    "sample_without_replacement": {
        **_RNG,
        "k 0": lambda kw: {**kw, "k": 0},
        "k past V": lambda kw: {**kw, "k": V + 2},
        "k True": lambda kw: {**kw, "k": True},
        "k float": lambda kw: {**kw, "k": 2.0},
        "probs 3-D": lambda kw: {**kw, "probs": kw["probs"].reshape(B, 1, V)},
        "batch 0": _batch0("probs"),
        "out": lambda kw: {**kw, "out": torch.empty(B, 3, dtype=_I32)},
        "out strided": lambda kw: {**kw, "out": torch.empty(3, B, dtype=_I32).t()},
        "out a tuple": lambda kw: {**kw, "out": (torch.empty(B, 3, dtype=_I32),)},
    },  # fmt: skip
}
