"""NVTX ranges (docs/profiling.md), checked with a recorder since the CPU has no Nsight: with
SPECOPS_NVTX=1 every public op records its range, and every decoding step of every method records
its draft / target_forward / verify / commit phases (drafter_forward inside draft) in the right
nesting, never while torch.compile traces; with it unset nothing is wrapped at all."""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import specops
from specops import _nvtx

ROOT = Path(__file__).resolve().parents[1]
# the op families (specops/ops/<family>.py), whose __all__ functions are the public ops
_FAMILIES = ("sample", "probs", "verify", "jacobi", "tree_build", "attention", "kv", "features")

# One process with SPECOPS_NVTX=1 (it is read at import): each run's recorded events, as JSON.
_SCRIPT = r"""
import json, sys
import torch
import specops
from specops import _nvtx
from specops.decode import ar, sjd, sjd_pac, speculative, vvs
from specops.models.loading import load_default

assert _nvtx.ENABLED
m = load_default()
c = torch.arange(2)
runs = {
    "ar": lambda: ar(m.target, c, length=4),
    "ar compiled": lambda: ar(m.target, c, length=4, compile_step="aot_eager"),
    "sjd": lambda: sjd(m.target, c, window=4, length=6),
    "sjd-pac": lambda: sjd_pac(m.target, c, window=8, branch=2, depth=2, length=8),
    "spec-chain": lambda: speculative(m.target, m.drafter, c, tree=None, num_draft=3, length=6),
    "spec-tree": lambda: speculative(
        m.target, m.drafter, c, branch=3, depth=3, num_nodes=10, length=6, cfg_scale=2.0),
    "spec-conf": lambda: speculative(
        m.target, m.drafter, c, tree="confidence", branch=3, depth=3, num_nodes=10, length=6),
    "spec-static": lambda: speculative(
        m.target, m.drafter, c, tree=specops.Tree.kary(2, 3), length=6),
    "vvs": lambda: vvs(m.target, m.drafter, c, m.vq.latents, paths="frontier", threshold=0.7,
                       branch=3, depth=3, num_nodes=10, length=12),
}
out = {}
with specops.validation(False):
    for name, run in runs.items():
        with _nvtx.recording() as ev:
            run()
        out[name] = ev
    # the one public op no decoding method calls
    tree = specops.Tree.kary(2, 2)
    p = torch.softmax(torch.randn(1, 3, 5), -1)
    with _nvtx.recording() as ev:
        specops.path_acceptance(p, p, tree, torch.zeros(1, 3, dtype=torch.int32))
    out["path_acceptance"] = ev
    out["wrapped"] = sorted(
        n for n in specops.ops.__all__ if hasattr(getattr(specops, n), "__wrapped__")
    ) + (["FeatureCache.write"] if hasattr(specops.FeatureCache.write, "__wrapped__") else [])
json.dump(out, sys.stdout)
"""


def _public_ops() -> list[str]:
    """The public ops: the functions each op family (specops/ops/<family>.py) exports, and
    FeatureCache.write."""
    ops = ["FeatureCache.write"]
    for family in _FAMILIES:
        mod = importlib.import_module(f"specops.ops.{family}")
        ops += [n for n in mod.__all__ if not isinstance(getattr(mod, n), type)]
    return sorted(ops)


@pytest.fixture(scope="module")
def recorded():
    env = {**os.environ, "SPECOPS_NVTX": "1"}
    res = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600,
        cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout)


class Node:
    def __init__(self, name):
        self.name, self.children = name, []

    def find(self, name):
        """Every range called ``name`` in this subtree, depth first."""
        for ch in self.children:
            if ch.name == name:
                yield ch
            yield from ch.find(name)

    def names(self) -> list[str]:
        return [ch.name for ch in self.children]


def _tree(events) -> Node:
    root, stack = Node(None), []
    stack.append(root)
    for kind, name in events:
        if kind == "push":
            node = Node(name)
            stack[-1].children.append(node)
            stack.append(node)
        else:
            assert len(stack) > 1, "a pop without its push"
            stack.pop()
    assert len(stack) == 1, f"ranges left open: {[n.name for n in stack[1:]]}"
    return root


def _check_phases(step: Node, phases: tuple[str, ...]) -> None:
    """The step's direct children hold ``phases`` in this order (first occurrences)."""
    names = step.names()
    assert set(phases) <= set(names), (step.name, names)
    assert sorted(phases, key=names.index) == list(phases), (step.name, names)


def _check_inside(node: Node, phase: str, ops: set[str]) -> None:
    """The ``phase`` ranges under ``node`` together hold a range of each of ``ops`` directly."""
    seen = set()
    for p in node.find(phase):
        seen |= set(p.names())
    assert ops <= seen, (phase, ops - seen)


# the phases of one step, in order, and the ops each phase calls
_STEP = {
    "ar": ("target_forward", "commit"),
    "sjd": ("target_forward", "verify", "commit", "draft"),
    "sjd-pac": ("target_forward", "verify", "commit", "draft"),
    "spec-chain": ("draft", "target_forward", "verify", "commit"),
    "spec-tree": ("draft", "target_forward", "verify", "commit"),
    "spec-conf": ("draft", "target_forward", "verify", "commit"),
    "spec-static": ("draft", "target_forward", "verify", "commit"),
    "vvs": ("draft", "target_forward", "verify", "commit"),
}
_VERIFY = {"sjd": "verify_jacobi", "sjd-pac": "verify_jacobi", "spec-chain": "verify_chain"}
_DRAFT_OPS = {
    "sjd": {"sample"},
    "sjd-pac": {"sample"},
    "spec-chain": {"drafter_forward", "probs_from_logits", "sample"},
    "spec-tree": {"drafter_forward", "select_frontier", "build_dynamic_tree"},
    "spec-conf": {"drafter_forward", "select_frontier", "build_dynamic_tree"},
    "spec-static": {"drafter_forward", "probs_from_logits", "sample_without_replacement"},
    "vvs": {"drafter_forward", "select_frontier", "build_dynamic_tree", "path_similarity"},
}


@pytest.mark.parametrize("method", sorted(_STEP))
def test_each_step_records_its_phases(recorded, method):
    top = _tree(recorded[method])
    # the run: one prefill, then its steps, nothing else outside a range of its own
    assert top.names()[0] == f"{method}.prefill", top.names()[:3]
    steps = [n for n in top.children if n.name == f"{method}.step"]
    assert len(steps) >= 1 and len(steps) == len(top.children) - 1, top.names()
    # every step with a target pass (VVS: not every step has one) has the phases in order
    full = [s for s in steps if "target_forward" in s.names()]
    assert full, [s.names() for s in steps]
    for s in full:
        _check_phases(s, _STEP[method])
    prefill = top.children[0]
    assert {"target_forward", "commit", "sample"} <= set(prefill.names()), prefill.names()
    # the ops sit in their phases; a model pass runs the attention ops
    _check_inside(top, "target_forward", {"tree_attention", "append_kv", "probs_from_logits"})
    _check_inside(top, "commit", {"commit_kv"})
    if method != "ar":
        _check_inside(top, "verify", {_VERIFY.get(method, "verify_tree")})
        _check_inside(top, "draft", _DRAFT_OPS[method])
    if "drafter_forward" in _DRAFT_OPS.get(method, ()):
        _check_inside(top, "drafter_forward", {"tree_attention", "append_kv", "drafter_inputs"})
        assert not [p for p in top.find("drafter_forward") if list(p.find("target_forward"))]
    if method == "vvs":
        assert {"FeatureCache.write"} <= {n.name for s in full for n in s.children} | {
            n for p in top.find("vvs.prefill") for n in p.names()
        }


def test_a_compiled_step_records_its_step_range_only(recorded):
    """compile_step: the ranges inside the step are not traced into the graph (and break
    nothing: fullgraph=True); the loop's step range stays."""
    top = _tree(recorded["ar compiled"])
    steps = [n for n in top.children if n.name == "ar.step"]
    assert len(steps) == 3 and top.names()[0] == "ar.prefill", top.names()
    assert all(s.children == [] for s in steps), [s.names() for s in steps]


def test_every_public_op_records_its_range(recorded):
    assert set(_public_ops()) <= set(recorded["wrapped"])
    seen = {name for run in recorded.values() if run and isinstance(run[0], list)
            for kind, name in run if kind == "push"}  # fmt: skip
    assert set(_public_ops()) <= seen, set(_public_ops()) - seen


def test_every_public_op_is_traced_in_its_source():
    """Each public op of specops/ops/<family>.py carries @traced("<its name>")."""
    for family in _FAMILIES:
        path = ROOT / "specops" / "ops" / f"{family}.py"
        mod = ast.parse(path.read_text())
        public = set()
        for node in mod.body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
                public = set(ast.literal_eval(node.value))
        for node in ast.walk(mod):
            if isinstance(node, ast.FunctionDef) and node.name in public:
                calls = [d for d in node.decorator_list if isinstance(d, ast.Call)]
                names = [ast.literal_eval(d.args[0]) for d in calls if d.func.id == "traced"]
                assert names == [node.name], (path.name, node.name, names)


@pytest.mark.skipif(_nvtx.ENABLED, reason="SPECOPS_NVTX=1 in this process")
def test_off_costs_nothing():
    """Unset: the public ops are the functions themselves and a phase is a shared null
    context (no allocation per call), so tracing the loop adds no work, on the host or device."""
    for name in _public_ops():
        fn = specops.FeatureCache.write if name == "FeatureCache.write" else getattr(specops, name)
        assert not hasattr(fn, "__wrapped__"), name
    fn = lambda: None  # noqa: E731
    assert _nvtx.traced("x")(fn) is fn
    assert _nvtx.nvtx_range("a") is _nvtx.nvtx_range("b")
    assert isinstance(_nvtx.nvtx_range("a"), contextlib.nullcontext)
    with _nvtx.recording() as ev, _nvtx.nvtx_range("a"):
        specops.sample(torch.full((1, 4), 0.25), seed=0)
    assert ev == []
