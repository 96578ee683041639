"""The fast-path case table (tests/test_fast_path_*.py): every op's rows, those of
fast_path_cases.py and those of probs_from_logits, tree_attention and the KV ops, with the rows
whose outputs alias an input or each other; ``_kwargs`` makes a row's call arguments."""

from __future__ import annotations

import math

import torch
from fast_path_cases import (
    _COMMON,
    _I32,
    _OPS_VERIFY_SAMPLE,
    TREE,
    B,
    K,
    V,
    _base,
    _i32,
    _lastdim_strided,
    _randn,
    _set,
)

from specops import Tree

_OPS = {op: dict(rows) for op, rows in _OPS_VERIFY_SAMPLE.items()}
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
_OPS["gather_rows"] = {
    "index int64 with -1": lambda kw: {**kw, "index": torch.tensor([[0, -1, 9, 3]] * B)},
    "index past the rows": lambda kw: {**kw, "index": _i32([[0, 10, 99, -7]] * B)},
    "index other batch": lambda kw: {**kw, "index": kw["index"][:2]},
    "index float": lambda kw: {**kw, "index": kw["index"].float()},
    "index strided": lambda kw: {**kw, "index": torch.cat([kw["index"]] * 2, 1)[:, ::2]},
    "src transposed": lambda kw: {
        **kw,
        "src": kw["src"].transpose(1, 2).contiguous().transpose(1, 2),
    },
    "src 2-D": lambda kw: {**kw, "src": kw["src"][0]},
    "out given": lambda kw: {**kw, "out": torch.empty(B, 4, 8)},
    "out wrong dtype": lambda kw: {**kw, "out": torch.empty(B, 4, 8, dtype=torch.float16)},
    "out strided": lambda kw: {**kw, "out": torch.empty(B, 4, 16)[..., ::2]},
    "out aliases src": lambda kw: {**kw, "out": kw["src"][:, :4]},
}
_OPS["drafter_inputs"] = {
    "step [S]": lambda kw: {**kw, "step_embedding": torch.linspace(-1, 1, 3)},
    "step [B, M, S]": lambda kw: {
        **kw,
        "step_embedding": torch.linspace(-1, 1, B * 12).reshape(B, 4, 3),
    },
    "step 2-D": lambda kw: {**kw, "step_embedding": torch.linspace(-1, 1, 12).reshape(4, 3)},
    "step f16": lambda kw: {**kw, "step_embedding": torch.linspace(-1, 1, 3).half()},
    "features f16": lambda kw: {**kw, "features": kw["features"].half()},
    "features other rows": lambda kw: {**kw, "features": kw["features"][:, :2]},
    "tokens past the vocab": lambda kw: {**kw, "tokens": _i32([[0, -1, V, 99]] * B)},
    "tokens int64 strided": lambda kw: {
        **kw,
        "tokens": torch.cat([kw["tokens"].long()] * 2, 1)[:, ::2],
    },
    "out given": lambda kw: {**kw, "out": torch.empty(B, 4, 11)},
    "out wrong width": lambda kw: {**kw, "out": torch.empty(B, 4, 12)},
    "out aliases features": lambda kw: (lambda buf: {**kw, "out": buf, "features": buf[..., :5]})(
        torch.zeros(B, 4, 11)
    ),
}
_OPS["path_similarity"] = {
    "alpha 1": lambda kw: {**kw, "alpha": 1.0},
    "alpha 0": lambda kw: {**kw, "alpha": 0.0},
    "alpha int": lambda kw: {**kw, "alpha": 1},
    "alpha 1.5": lambda kw: {**kw, "alpha": 1.5},
    "alpha 1e6": lambda kw: {**kw, "alpha": 1e6},
    "alpha nan": lambda kw: {**kw, "alpha": float("nan")},
    "alpha -1": lambda kw: {**kw, "alpha": -1.0},
    "stride 2": lambda kw: {**kw, "stride": 2},
    "stride past L": lambda kw: {**kw, "stride": 2**62},
    "stride 0": lambda kw: {**kw, "stride": 0},
    "stride True": lambda kw: {**kw, "stride": True},
    "one path": lambda kw: {**kw, "paths": kw["paths"][:, :1]},
    "no positions": lambda kw: {**kw, "paths": kw["paths"][:, :, :0]},
    "ids past the vocab": lambda kw: {**kw, "paths": torch.full((B, 3, 4), V + 5)},
    "paths int32 strided": lambda kw: {**kw, "paths": kw["paths"].int()[..., ::2]},
    "out given": lambda kw: {**kw, "out": torch.empty(B)},
    "out int": lambda kw: {**kw, "out": torch.empty(B, dtype=torch.int32)},
}
for _op, _t in _ALIAS.items():
    _OPS[_op].update(_t)

_CASES = [(op, name, mutate) for op, t in _OPS.items() for name, mutate in {**_COMMON, **t}.items()]


def _kwargs(op, mutate):
    kw = _base(op)
    kw["_op"] = op
    kw = mutate(kw)
    kw.pop("_op", None)
    return kw
