"""Boundary fuzz (issue 14), edges: empty and edge sizes of every public op, and out-of-range
values in fast mode, against the reference (tests/fuzz_harness.py)."""

from __future__ import annotations

import pytest
import torch
from fuzz_cases import BUILDERS, _gen
from fuzz_harness import _available, _clone_all, _fast, _param, check_against_reference

# empty and edge sizes ------------------------------------------------------------------------
_EDGES = {
    "B0": {k: {"b": 0} for k in BUILDERS if not k.startswith("commit_kv")},
    "V1": {
        k: {"v": 1}
        for k in (
            "sample",
            "sample_uniforms",
            "sample_wor",
            "verify_chain",
            "verify_chain_uniforms",
            "verify_tree",
            "verify_jacobi",
            "path_acceptance",
            "probs_from_logits",
            "drafter_inputs",
            "path_similarity",
        )
    },  # fmt: skip
    "K0": {"verify_chain": {"k": 0}, "verify_chain_uniforms": {"k": 0}},
    "L1": {"verify_jacobi": {"L": 1}},
    "M0": {
        "commit_kv": {"m": 0},
        "commit_kv_paged": {"m": 0},
        "gather_rows": {"m": 0},
        "drafter_inputs": {"m": 0},
        "feature_cache": {"m": 0},
    },  # fmt: skip
    "H0": {"gather_rows": {"h": 0}, "feature_cache": {"h": 0}, "drafter_inputs": {"h": 0}},
    "Hkv0": {"commit_kv": {"hkv": 0}, "commit_kv_list": {"hkv": 0}, "append_kv": {"hkv": 0}},
    "D0": {
        "commit_kv": {"d": 0},
        "commit_kv_paged": {"d": 0},
        "append_kv": {"d": 0},
        "append_kv_paged": {"d": 0},
    },  # fmt: skip
    "layers0": {"commit_kv": {"layers": 0}},
    "B0cache": {"commit_kv": {"b": 0}, "commit_kv_list": {"b": 0}},
}


def _edge_params():
    out = []
    for edge, per in _EDGES.items():
        for name in per:
            for be in BUILDERS[name](_gen(name)).backends:
                out.append(_param(f"{name}-{edge}-{be}", name, edge, be))
    return out


@pytest.mark.parametrize("name,edge,backend", _edge_params())
def test_edge_sizes(name, edge, backend):
    if not _available(backend):
        pytest.skip(f"backend {backend} not available")
    case = BUILDERS[name](_gen(name), **_EDGES[edge][name])
    check_against_reference(case, backend, _clone_all(case.inputs), {})


# out-of-range values in fast mode -------------------------------------------------------
def _set(t, idx, value):
    t = t.clone()
    t[idx] = value
    return t


# name -> {label: (input name, function of the input tensor -> bad tensor)}; the ids are made
# int64 first where the bad value needs it (2**40)
_BIG = 2**40
_OOR = {
    "verify_chain": {
        "draft_tokens": ("draft_tokens", [-5, 7, _BIG]),
        "num_draft": ("num_draft", [-3, 9, _BIG]),
    },
    "verify_chain_uniforms": {"draft_tokens": ("draft_tokens", [-5, 7, _BIG])},
    "verify_tree": {"draft_tokens": ("draft_tokens", [-5, 7, _BIG])},
    "verify_tree_wor_uniforms": {"draft_tokens": ("draft_tokens", [-5, 7, _BIG])},
    "verify_jacobi": {"window_tokens": ("window_tokens", [-5, 7, _BIG])},
    "verify_jacobi_tree": {"window_tokens": ("window_tokens", [-5, 7, _BIG])},
    "path_acceptance": {"draft_tokens": ("draft_tokens", [-5, 7, _BIG])},
    "probs_from_logits": {"top_k": ("top_k", [_BIG, 7 + 5])},
    "gather_rows": {"index": ("index", [-5, 6, _BIG])},
    "drafter_inputs": {"tokens": ("tokens", [-5, 7, _BIG])},
    "path_similarity": {"paths": ("paths", [-5, 7, _BIG])},
    "feature_cache": {
        "positions": ("positions", [-5, 8, _BIG]),
        "read_positions": ("read_positions", [-5, 8, _BIG]),
    },
    "tree_attention": {"cache_seqlens": ("cache_seqlens", [-3, 13, 40])},
    "tree_attention_paged": {
        "cache_seqlens": ("cache_seqlens", [-3, 13, 40]),
        "block_table": ("block_table", [-3, 14, _BIG]),
    },
    "append_kv": {"cache_seqlens": ("cache_seqlens", [-3, 13, 40])},
    "append_kv_paged": {
        "cache_seqlens": ("cache_seqlens", [-3, 13, 40]),
        "block_table": ("block_table", [-3, 14, _BIG]),
    },
    "commit_kv": {
        "cache_seqlens": ("cache_seqlens", [-3, 15, 40]),
        "accepted_slots": ("accepted_slots", [-5, 20, _BIG]),
    },
    "commit_kv_paged": {
        "cache_seqlens": ("cache_seqlens", [-3, 15, 40]),
        "accepted_slots": ("accepted_slots", [-5, 20, _BIG]),
        "block_table": ("block_table", [-3, 14, _BIG]),
    },
    "commit_kv_list": {"accepted_slots": ("accepted_slots", [-5, 20, _BIG])},
}


def _oor_params():
    out = []
    for name, per in _OOR.items():
        for be in BUILDERS[name](_gen(name)).backends:
            for label, (_, values) in per.items():
                for val in values if be != "triton" else values[1:]:
                    tag = "2e40" if val == _BIG else str(val)
                    out.append(_param(f"{name}-{label}={tag}-{be}", name, label, val, be))
    return out


@pytest.mark.parametrize("name,label,value,backend", _oor_params())
def test_out_of_range_fast_mode(name, label, value, backend):
    """Fast mode (no value checks): the kernels follow the reference's documented fast-mode
    semantics and never touch memory outside their tensors (scripts/sanitize.sh checks that)."""
    if not _available(backend):
        pytest.skip(f"backend {backend} not available")
    arg = _OOR[name][label][0]
    idt = torch.int64 if value == _BIG else torch.int32
    case = BUILDERS[name](_gen(name), idt=idt)
    t = case.inputs[arg]
    if value == _BIG:
        t = t.long()
    if t.dtype == torch.int32 and abs(value) >= 2**31:
        t = t.long()
    # one bad entry per request row 0 and 1 (row 2, if any, stays valid)
    idx = (slice(0, 2),) + (0,) * (t.dim() - 1) if t.dim() > 1 else slice(0, 2)
    case.inputs[arg] = _set(t, idx, value)
    check_against_reference(case, backend, _clone_all(case.inputs), {}, _fast)
