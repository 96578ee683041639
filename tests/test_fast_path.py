"""The eager fast path (specops/ops/_common.py fast_kernel) behaves exactly like the checked path.

An eager call with backend "auto" hands the user's tensors straight to the compiled binding, whose
C++ checks stand in for the Python ones; when the binding declines, the Python checks run.  So for
every input, valid or not, the fast call must give what the checked call gives (the same call with
the fast path switched off): the same outputs and in-place writes, or the same exception with the
same message.  Each table row is one edge of the op's arguments: dtypes, layouts (transposed,
expanded, sliced), empty dims, seeds and offsets of every accepted and rejected form, out buffers,
meta tensors, wrong types."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import CUDA_SIM, gen, random_probs

import specops
from specops import Tree, _build
from specops.ops import _common as c

pytestmark = pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")

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
    raise KeyError(op)


# what an op writes in place (compared after the call, with what it returns)
_WRITTEN = {"commit_kv": ("caches", "cache_seqlens"), "append_kv": ("k_cache", "v_cache")}


def _first(op):
    special = {"probs_from_logits": "logits", "tree_attention": "q", "commit_kv": "caches",
               "append_kv": "k"}  # fmt: skip
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


def _out(shapes_dtypes):
    return tuple(torch.empty(s, dtype=d) for s, d in shapes_dtypes)


_I32 = torch.int32
_OPS = {
    "verify_chain": {
        **_RNG,
        **_TOKENS,
        **_DRAFT,
        "batch 0": lambda kw: {
            **kw,
            "target_probs": kw["target_probs"][:0],
            "draft_tokens": kw["draft_tokens"][:0],
            "draft_probs": kw["draft_probs"][:0],
        },
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
        "batch 0": lambda kw: {
            **kw,
            "target_probs": kw["target_probs"][:0],
            "draft_tokens": kw["draft_tokens"][:0],
            "draft_probs": kw["draft_probs"][:0],
        },
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
        "batch 0": lambda kw: {
            **kw,
            "target_probs": kw["target_probs"][:0],
            "window_tokens": kw["window_tokens"][:0],
            "draft_probs": kw["draft_probs"][:0],
        },
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
        "batch 0": lambda kw: {**kw, "probs": kw["probs"][:0]},
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
        "batch 0": lambda kw: {**kw, "probs": kw["probs"][:0]},
        "out": lambda kw: {**kw, "out": torch.empty(B, 3, dtype=_I32)},
        "out strided": lambda kw: {**kw, "out": torch.empty(3, B, dtype=_I32).t()},
        "out a tuple": lambda kw: {**kw, "out": (torch.empty(B, 3, dtype=_I32),)},
    },  # fmt: skip
}

_I64 = torch.int64
_OPS.update({
    "probs_from_logits": {
        "temperature 0": lambda kw: {**kw, "temperature": 0.0},
        "temperature int": lambda kw: {**kw, "temperature": 2},
        "temperature nan": lambda kw: {**kw, "temperature": float("nan")},
        "temperature inf": lambda kw: {**kw, "temperature": float("inf")},
        "temperature -1": lambda kw: {**kw, "temperature": -1.0},
        "temperature True": lambda kw: {**kw, "temperature": True},
        "temperature tensor [B]": lambda kw: {**kw, "temperature": torch.tensor([0.5, 1.0, 2.0])},
        "temperature tensor [1]": lambda kw: {**kw, "temperature": torch.tensor([0.5])},
        "top_k None": lambda kw: {**kw, "top_k": None},
        "top_k 0": lambda kw: {**kw, "top_k": 0},
        "top_k -1": lambda kw: {**kw, "top_k": -1},
        "top_k 2**40": lambda kw: {**kw, "top_k": 2**40},
        "top_k 2**70": lambda kw: {**kw, "top_k": 2**70},
        "top_k True": lambda kw: {**kw, "top_k": True},
        "top_k float": lambda kw: {**kw, "top_k": 2.0},
        "top_k tensor": lambda kw: {**kw, "top_k": torch.tensor([1, 3, 0])},
        "top_p None": lambda kw: {**kw, "top_p": None},
        "top_p 1": lambda kw: {**kw, "top_p": 1},
        "top_p 0": lambda kw: {**kw, "top_p": 0.0},
        "top_p 1.5": lambda kw: {**kw, "top_p": 1.5},
        "top_p nan": lambda kw: {**kw, "top_p": float("nan")},
        "cfg": lambda kw: {**kw, "cfg_scale": 3.0, "uncond_logits": _randn(B, V)},
        "cfg int": lambda kw: {**kw, "cfg_scale": 3, "uncond_logits": _randn(B, V)},
        "cfg nan": lambda kw: {**kw, "cfg_scale": float("nan"), "uncond_logits": _randn(B, V)},
        "cfg inf": lambda kw: {**kw, "cfg_scale": float("inf"), "uncond_logits": _randn(B, V)},
        "cfg without uncond": lambda kw: {**kw, "cfg_scale": 3.0},
        "uncond without cfg": lambda kw: {**kw, "uncond_logits": _randn(B, V)},
        "uncond wrong shape": lambda kw: {**kw, "cfg_scale": 2.0, "uncond_logits": _randn(B, 2)},
        "uncond f16": lambda kw: {**kw, "cfg_scale": 2.0, "uncond_logits": _randn(B, V).half()},
        "uncond expanded": lambda kw: {**kw, "cfg_scale": 2.0,
                                       "uncond_logits": _randn(1, V).expand(B, V)},
        "logits -inf row": lambda kw: {**kw, "logits": kw["logits"].index_fill(0, torch.tensor([1]),
                                                                              float("-inf"))},
        "logits 3-D": lambda kw: {**kw, "logits": kw["logits"].reshape(B, 1, V)},
        "out": lambda kw: {**kw, "out": torch.empty(B, V)},
        "out strided": lambda kw: {**kw, "out": torch.empty(V, B).t()},
        "out f64": lambda kw: {**kw, "out": torch.empty(B, V, dtype=torch.float64)},
        "batch 0": lambda kw: {**kw, "logits": kw["logits"][:0]},
    },
    "tree_attention": {
        "sm_scale": lambda kw: {**kw, "sm_scale": 0.5},
        "sm_scale int": lambda kw: {**kw, "sm_scale": 2},
        "return_lse": lambda kw: {**kw, "return_lse": True},
        "out": lambda kw: {**kw, "out": torch.empty(B, 7, 4, 8)},
        "out strided": lambda kw: {**kw, "out": torch.empty(B, 7, 8, 4).transpose(2, 3)},
        "lse_out": lambda kw: {**kw, "return_lse": True, "lse_out": torch.empty(B, 7, 4)},
        "lse_out f16": lambda kw: {**kw, "return_lse": True,
                                   "lse_out": torch.empty(B, 7, 4, dtype=torch.float16)},
        "seqlens int64": lambda kw: {**kw, "cache_seqlens": kw["cache_seqlens"].long()},
        "seqlens int16": lambda kw: {**kw, "cache_seqlens": kw["cache_seqlens"].short()},
        "seqlens one less": lambda kw: {**kw, "cache_seqlens": kw["cache_seqlens"][:-1]},
        "seqlens negative": lambda kw: {**kw, "cache_seqlens": _i32([-4, 5, 9])},
        "seqlens past the end": lambda kw: {**kw, "cache_seqlens": torch.tensor([0, 12, 99],
                                                                                dtype=_I32)},
        "kv f16": lambda kw: {**kw, "k_cache": kw["k_cache"].half()},
        "kv transposed heads": lambda kw: {**kw, "k_cache": kw["k_cache"].transpose(1, 2)},
        "kv strided": lambda kw: {**kw, "v_cache": _lastdim_strided(kw["v_cache"])},
        "kv batch expanded": lambda kw: {**kw, "k_cache": kw["k_cache"][:1].expand(B, -1, -1, -1)},
        "kv 3 heads": lambda kw: {**kw, "k_cache": _randn(B, 16, 3, 8),
                                  "v_cache": _randn(B, 16, 3, 8)},
        "tree mask_bits": lambda kw: {**kw, "tree": TREE.mask_bits},
        "tree of batch B": lambda kw: {**kw, "tree": Tree.kary(2, 3, batch=B)},
        "tree too small": lambda kw: {**kw, "tree": Tree.kary(2, 2)},
        "paged": lambda kw: {**kw, "k_cache": kw["k_cache"].reshape(B * 4, 4, 2, 8),
                             "v_cache": kw["v_cache"].reshape(B * 4, 4, 2, 8),
                             "block_table": torch.arange(B * 4, dtype=_I32).reshape(B, 4).flip(1)},
        "paged page past P": lambda kw: {**kw, "k_cache": kw["k_cache"].reshape(B * 4, 4, 2, 8),
                                         "v_cache": kw["v_cache"].reshape(B * 4, 4, 2, 8),
                                         "block_table": torch.full((B, 4), 50, dtype=_I32)},
        "batch 0": lambda kw: {**kw, "q": kw["q"][:0], "k_cache": kw["k_cache"][:0],
                               "v_cache": kw["v_cache"][:0],
                               "cache_seqlens": kw["cache_seqlens"][:0]},
    },
    "commit_kv": {
        "slots int64": lambda kw: {**kw, "accepted_slots": kw["accepted_slots"].long()},
        "slots int64 past int32": lambda kw: {**kw, "accepted_slots": kw["accepted_slots"].long()
                                              + 2**33},
        "slots int16": lambda kw: {**kw, "accepted_slots": kw["accepted_slots"].short()},
        "slots none": lambda kw: {**kw, "accepted_slots": kw["accepted_slots"][:, :0]},
        "slots 2049 columns": lambda kw: {**kw, "accepted_slots": torch.full((B, 2049), -1,
                                                                             dtype=_I32)},
        "slots decreasing": lambda kw: {**kw, "accepted_slots": torch.tensor([[3, 1, -1]] * B,
                                                                            dtype=_I32)},
        "slots past capacity": lambda kw: {**kw, "accepted_slots": torch.tensor([[9, 14, 40]] * B,
                                                                               dtype=_I32)},
        "slots strided": _set("accepted_slots", _lastdim_strided),
        "seqlens int64": lambda kw: {**kw, "cache_seqlens": kw["cache_seqlens"].long()},
        "seqlens strided": lambda kw: {**kw, "cache_seqlens": torch.tensor([3, 0, 5, 0, 0, 0],
                                                                           dtype=_I32)[::2]},
        "seqlens negative": lambda kw: {**kw, "cache_seqlens": _i32([-3, 5, 16])},
        "caches zero layers": lambda kw: {**kw, "caches": kw["caches"][:0]},
        "caches no heads": lambda kw: {**kw, "caches": kw["caches"][..., :0, :]},
        "caches list": lambda kw: {**kw, "caches": [(kw["caches"][i, 0], kw["caches"][i, 1])
                                                    for i in range(2)]},
        "caches 5-D": lambda kw: {**kw, "caches": kw["caches"][0]},
        "caches D=1 strided": lambda kw: {**kw, "caches": kw["caches"][..., ::2][..., :1]},
        "slots 0-dim": lambda kw: {**kw, "accepted_slots": kw["accepted_slots"][0, 0]},
        "paged": lambda kw: {**kw, "caches": kw["caches"].reshape(2, 2, B * 4, 4, 2, 8),
                             "block_table": torch.arange(B * 4, dtype=_I32).reshape(B, 4)},
        "paged int64 table": lambda kw: {**kw, "caches": kw["caches"].reshape(2, 2, B * 4, 4, 2, 8),
                                         "block_table": torch.arange(B * 4).reshape(B, 4)},
    },
})  # fmt: skip


def _aliased_chain_out(kw):
    """out.tokens [B, K+1] is the buffer draft_tokens [B, K] is a slice of."""
    buf = torch.zeros(B, K + 1, dtype=_I32)
    buf[:, :K] = kw["draft_tokens"]
    return {**kw, "draft_tokens": buf[:, :K], "out": (buf, torch.empty(B, dtype=_I32))}


def _head(t, shape):
    """An int32 tensor of ``shape`` over the first bytes of ``t``."""
    return t.view(_I32).view(-1)[: math.prod(shape)].view(shape)


def _aliased_outs(shapes):
    """Outputs carved from one buffer, the last overlapping the first."""
    buf = torch.zeros(sum(math.prod(s) for s in shapes), dtype=_I32)
    outs, at = [], 0
    for s in shapes[:-1]:
        outs.append(buf[at : at + math.prod(s)].view(s))
        at += math.prod(s)
    outs.append(buf[: math.prod(shapes[-1])].view(shapes[-1]))
    return tuple(outs)


_ALIAS = {
    "verify_chain": {
        "out aliases draft_tokens": _aliased_chain_out,
        "out aliases out": lambda kw: {**kw, "out": _aliased_outs([(B, K + 1), (B,)])},
        "out aliases seed": lambda kw: (lambda s: {**kw, "seed": s, "out": (
            torch.empty(B, K + 1, dtype=_I32), s.view(_I32)[:B])})(torch.zeros(B, dtype=_I64)),
    },
    "verify_tree": {
        "out aliases out": lambda kw: {**kw, "out": _aliased_outs([(B, 3), (B, 3), (B,)])}},
    "verify_jacobi": {"out aliases out": lambda kw: {**kw, "out": _aliased_outs(
        [(B,), (B, 6), (B,)]) + (None, None)}},
    "path_acceptance": {"out aliases out": lambda kw: {**kw, "out": tuple(
        t.view(torch.float32) for t in _aliased_outs([(B, 4), (B, 4)]))}},
    "sample": {"out aliases probs": lambda kw: {**kw, "out": _head(kw["probs"], (B,))}},
    "sample_without_replacement": {
        "out aliases probs": lambda kw: {**kw, "out": _head(kw["probs"], (B, 3))}},
    "probs_from_logits": {"out is logits": lambda kw: {**kw, "out": kw["logits"]}},
    "tree_attention": {
        "out is q": lambda kw: {**kw, "out": kw["q"]},
        "lse_out in out": lambda kw: (lambda o: {**kw, "out": o, "return_lse": True,
                                                 "lse_out": o.view(-1)[: B * 28].view(B, 7, 4)})(
            torch.empty(B, 7, 4, 8)),
    },
}  # fmt: skip
_OPS["append_kv"] = {
    "seqlens int64": lambda kw: {**kw, "cache_seqlens": kw["cache_seqlens"].long()},
    "seqlens int16": lambda kw: {**kw, "cache_seqlens": kw["cache_seqlens"].short()},
    "seqlens negative": lambda kw: {**kw, "cache_seqlens": _i32([-2, 5, 14])},
    "seqlens past the end": lambda kw: {**kw, "cache_seqlens": _i32([13, 16, 99])},
    "seqlens strided": lambda kw: {**kw, "cache_seqlens": _i32([0, 9, 5, 9, 12, 9])[::2]},
    "v f16": lambda kw: {**kw, "v": kw["v"].half()},
    "v transposed heads": lambda kw: {**kw, "v": kw["v"].transpose(1, 2).contiguous()
                                      .transpose(1, 2)},
    "caches f16": lambda kw: {**kw, "k_cache": kw["k_cache"].half(),
                              "v_cache": kw["v_cache"].half()},
    "cache strided": lambda kw: {**kw, "k_cache": _lastdim_strided(kw["k_cache"])},
    "cache expanded": lambda kw: {**kw, "v_cache": kw["v_cache"][:1].expand(B, -1, -1, -1)},
    "cache 3 heads": lambda kw: {**kw, "k_cache": torch.randn(B, 16, 3, 8),
                                 "v_cache": torch.randn(B, 16, 3, 8)},
    "v_cache other shape": lambda kw: {**kw, "v_cache": kw["v_cache"][:, :8]},
    "paged": lambda kw: {**kw, "k_cache": kw["k_cache"].reshape(B * 4, 4, 2, 8),
                         "v_cache": kw["v_cache"].reshape(B * 4, 4, 2, 8),
                         "block_table": torch.arange(B * 4, dtype=_I32).reshape(B, 4).flip(1)},
    "paged bad pages": lambda kw: {**kw, "k_cache": kw["k_cache"].reshape(B * 4, 4, 2, 8),
                                   "v_cache": kw["v_cache"].reshape(B * 4, 4, 2, 8),
                                   "block_table": _i32([[-5, 99, 2, 3]] * B)},
    "paged int64 table": lambda kw: {**kw, "k_cache": kw["k_cache"].reshape(B * 4, 4, 2, 8),
                                     "v_cache": kw["v_cache"].reshape(B * 4, 4, 2, 8),
                                     "block_table": torch.arange(B * 4).reshape(B, 4)},
    "batch 0": lambda kw: {**kw, "k": kw["k"][:0], "v": kw["v"][:0], "k_cache": kw["k_cache"][:0],
                           "v_cache": kw["v_cache"][:0], "cache_seqlens": kw["cache_seqlens"][:0]},
    "no new rows": lambda kw: {**kw, "k": kw["k"][:, :0], "v": kw["v"][:, :0]},
}  # fmt: skip
for _op, _t in _ALIAS.items():
    _OPS[_op].update(_t)

_CASES = [(op, name, mutate) for op, t in _OPS.items() for name, mutate in {**_COMMON, **t}.items()]


def _kwargs(op, mutate):
    kw = _base(op)
    kw["_op"] = op
    kw = mutate(kw)
    kw.pop("_op", None)
    return kw


def _outcome(op, mutate):
    kw = _kwargs(op, mutate)
    try:
        with specops.validation(False):
            r = getattr(specops, op)(**kw)
    except Exception as e:  # noqa: BLE001 - the exception itself is what is compared
        return ("raised", type(e).__name__, str(e))
    if r is None:
        r = ()
    elif isinstance(r, torch.Tensor):
        r = (r,)
    written = []
    for name in _WRITTEN.get(op, ()):
        w = kw[name]
        written += [t for pair in w for t in pair] if isinstance(w, list) else [w]
    return ("returned", tuple(r) + tuple(written))


def _same(a, b):
    if a[0] != b[0] or a[0] == "raised":
        return a == b
    if len(a[1]) != len(b[1]):
        return False
    for x, y in zip(a[1], b[1]):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        nan_equal = x.is_floating_point() and torch.allclose(x, y, rtol=0, atol=0, equal_nan=True)
        if not (torch.equal(x, y) or nan_equal):
            return False
    return True


@pytest.mark.parametrize(("op", "name", "mutate"), _CASES, ids=[f"{o}-{n}" for o, n, _ in _CASES])
def test_fast_call_equals_checked_call(op, name, mutate, monkeypatch):
    fast = _outcome(op, mutate)
    monkeypatch.setattr(c, "fast_kernel", lambda *a: None)  # every call takes the checked path
    checked = _outcome(op, mutate)
    assert _same(fast, checked), f"{op} [{name}]: fast path {fast} != checked path {checked}"


@pytest.mark.parametrize("op", list(_OPS))
def test_fast_path_taken_for_valid_calls(op, monkeypatch):
    """A valid eager call reaches the binding once, with no Python checks before it (a spy on the
    cached binding), and a call in validation mode does not take it."""
    binding = getattr(_build._C, f"{op}_cpu")
    calls = []

    def spy(*args):
        calls.append(1)
        return binding(*args)

    monkeypatch.setitem(c._FAST, (op, "cpu"), spy)
    with specops.validation(False):  # the suite runs in validation mode (conftest.py)
        getattr(specops, op)(**_kwargs(op, lambda kw: kw))
    assert calls == [1]
    with specops.validation():
        getattr(specops, op)(**_kwargs(op, lambda kw: kw))
    assert calls == [1]


def _meta(x):
    return x.to("meta") if isinstance(x, (torch.Tensor, Tree)) else x


@pytest.mark.parametrize("validate", [False, True], ids=["fast", "validation"])
@pytest.mark.parametrize("op", list(_OPS))
def test_meta_inputs_are_a_clear_error(op, validate):
    """Meta tensors (no data) get a ValueError that says so, in both modes (validation mode's
    value checks would otherwise fail inside torch on the first read)."""
    kw = {k: _meta(v) for k, v in _base(op).items()}
    with specops.validation(validate), pytest.raises(ValueError, match="meta tensor"):
        getattr(specops, op)(**kw)


_ALIAS_CASES = [(op, name, m) for op, t in _ALIAS.items() for name, m in t.items()]


@pytest.mark.parametrize("backend", ["auto", "reference", "cpu", "triton", CUDA_SIM])
@pytest.mark.parametrize(
    ("op", "name", "mutate"), _ALIAS_CASES, ids=[f"{o}-{n}" for o, n, _ in _ALIAS_CASES]
)
def test_outputs_that_alias_are_rejected(op, name, mutate, backend):
    """An out buffer sharing bytes with an input or another output is a clear error on every
    backend (the Python check), and the compiled binding refuses it on its own too."""
    if backend not in ("auto", *c.backend_table()[op]):
        pytest.skip(f"{op} has no {backend} backend")
    kw = _kwargs(op, mutate)
    with specops.validation(False), pytest.raises(ValueError, match="shares memory"):
        getattr(specops, op)(**kw, backend=backend)


def test_bindings_reject_aliased_outputs():
    probs = random_probs(B, V, generator=gen(0))
    with pytest.raises(ValueError, match="out shares memory with probs"):
        _build._C.sample_cpu(probs, None, 1, None, 0, None, _head(probs, (B,)))
    buf = torch.zeros(B, K + 1, dtype=_I32)
    target, chain = random_probs(B, K + 1, V, generator=gen(0)), _build._C.verify_chain_cpu
    rest = (None, None, 0.0, False, False, None, 1, None, 0, None)
    with pytest.raises(ValueError, match="out_tokens shares memory with draft_tokens"):
        chain(target, None, buf[:, :K], *rest, buf, None)
    with pytest.raises(ValueError, match="out_num_accepted shares memory with out_tokens"):
        chain(target, None, torch.zeros(B, K, dtype=_I32), *rest, buf, buf.view(-1)[:B])


_WITHOUT_EXCHANGE = """
import torch, specops
from specops import _build, Tree
assert not _build._C.dlpack_exchange
g = torch.Generator().manual_seed(0)
p = torch.softmax(torch.randn(3, 5, 11, generator=g), -1)
x = torch.randint(0, 11, (3, 4), generator=g)
r = specops.verify_chain(p, x, p[:, :4].contiguous(), seed=1, offset=torch.tensor([2]))
t = Tree.kary(2, 2)
pt = torch.softmax(torch.randn(3, 3, 11, generator=g), -1)
rt = specops.verify_tree(pt, t, torch.randint(0, 11, (3, 3), generator=g), pt, seed=1)
s = specops.sample(p[:, 0], seed=4)
print(r.tokens.tolist(), r.num_accepted.tolist(), rt.path.tolist(), s.tolist())
"""


def test_without_the_dlpack_exchange_table():
    """torch < 2.10 has no exchange table: the bindings read the tensors' Python attributes and
    make outputs with torch.empty.  Same results (SPECOPS_DLPACK_EXCHANGE=0 takes that path)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, SPECOPS_DLPACK_EXCHANGE="0", SPECOPS_VALIDATE="0")
    cwd = os.path.dirname(__file__)  # not the checkout root: its source tree would shadow a wheel
    res = subprocess.run([sys.executable, "-c", _WITHOUT_EXCHANGE], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    env["SPECOPS_DLPACK_EXCHANGE"] = "1"
    script = _WITHOUT_EXCHANGE.replace("assert not", "assert")
    want = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert want.returncode == 0, want.stderr[-3000:]
    assert res.stdout == want.stdout


def test_bindings_from_two_threads():
    """The CPU twins run with the GIL released: calls of two Python threads overlap and end in any
    order.  Each call's outputs stay its own (the bindings' per-call state is per thread)."""
    import threading

    g = gen(8)
    target, draft = random_probs(4, 9, 4000, generator=g), random_probs(4, 8, 4000, generator=g)
    tokens = torch.randint(0, 4000, (4, 8), generator=g)
    src = torch.randn(4, 50, 64, generator=g)
    idx = torch.randint(0, 50, (4, 30), generator=g)
    with specops.validation(False):
        want_chain = specops.verify_chain(target, tokens, draft, seed=3)
        want_rows = specops.gather_rows(src, idx)
    errors = []

    def chain():
        for _ in range(600):
            r = specops.verify_chain(target, tokens, draft, seed=3)
            if not (torch.equal(r.tokens, want_chain.tokens) and len(r) == 2):
                errors.append("verify_chain")

    def rows():
        for _ in range(600):
            r = specops.gather_rows(src, idx)
            if not torch.equal(r, want_rows):
                errors.append("gather_rows")

    threads = [threading.Thread(target=f) for f in (chain, rows, chain, rows)]
    with specops.validation(False):  # a process-wide switch: set once, outside the threads
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:5]
