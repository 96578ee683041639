"""Each declared op (specops/ops/_decl.py OpDecl) is written once: the public function's
parameters, its checks, its reference adaptor, its Triton entry point, its compiled bindings and
its torch.library schema all follow the declaration's order and names."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from helpers import random_probs

import specops
from specops import _build
from specops.ops._decl import _DECLS

OPS = sorted(_DECLS)


def _params(fn) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def _binding_params(fn) -> list[tuple[str, bool]]:
    """(name, has a default) of each ``py::arg`` of a pybind11 function, from its signature."""
    sig = fn.__doc__.splitlines()[0]
    inner = sig[sig.index("(") + 1 : sig.rindex(") ->")]
    return [(p.split(":")[0], " = " in p) for p in inner.split(", ")]


def test_every_op_with_philox_draws_is_declared():
    assert {"verify_chain", "verify_tree", "path_acceptance", "verify_jacobi",
            "sample_without_replacement"} <= set(OPS)  # fmt: skip


@pytest.mark.parametrize("op", [op for op in OPS if op != "feature_cache_write"])
def test_public_function_takes_the_declared_arguments_in_order(op):
    d = specops.declaration(op)
    public = [p for p in _params(getattr(specops, op)) if p not in ("backend", "out", "lse_out")]
    assert tuple(public) == d.params


def test_feature_cache_write_takes_the_declared_arguments_after_its_store():
    """FeatureCache.write is the op's public face: the cache holds store and stamps."""
    d = specops.declaration("feature_cache_write")
    assert d.params[:2] == ("store", "stamps")
    assert _params(specops.FeatureCache.write) == ("self", *d.params[2:])


@pytest.mark.parametrize("op", OPS)
def test_checks_take_the_declared_arguments_in_order(op):
    d = specops.declaration(op)
    assert _params(d.check) == (*d.params, "backend")


@pytest.mark.parametrize("op", OPS)
def test_reference_adaptor_takes_the_flat_arguments_by_name(op):
    d = specops.declaration(op)
    assert _params(d.reference) == d.flat_names


@pytest.mark.parametrize("op", [op for op in OPS if _DECLS[op].triton and not _DECLS[op].kernel])
def test_triton_entry_takes_the_flat_arguments_in_order(op):
    # run() calls it with the flat arguments by name, the random stream as one rng (a kernel
    # hook calls its entry itself)
    pytest.importorskip("triton")
    d = specops.declaration(op)
    assert _params(d.triton_kernel()) == d.flat_names


@pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("be", ["cpu", "cuda", "cuda_sim"])
def test_bindings_take_the_declared_order(op, be):
    fn = getattr(_build._C, f"{op}_{be}", None)
    if fn is None:
        pytest.skip(f"specops._C has no {op}_{be}")
    d = specops.declaration(op)
    params = _binding_params(fn)
    assert tuple(n for n, _ in params[: len(d.binding_names)]) == d.binding_names
    # what follows the outputs are workspaces and options the binding defaults
    assert all(has_default for _, has_default in params[len(d.binding_names) :])


@pytest.mark.parametrize("op", OPS)
def test_torch_library_schema_is_the_declarations(op):
    d = specops.declaration(op)
    schema = str(getattr(torch.ops.specops, op).default._schema)
    flat = re.findall(r"(\w+)(?:=[^,)]*)?(?=[,)])", schema[schema.index("(") : schema.index("->")])
    assert tuple(flat) == (*(n for n, _ in d.schema_flat), "backend")
    if "rng" in d.flat_names:  # the one Rng, as its four fields where the Rng was
        i = d.flat_names.index("rng")
        assert tuple(flat[i : i + 4]) == specops.ops._rng.Rng._fields
    assert schema.count("!") == len(d.mutates)
    if d.outs:  # the out= variant writes each output
        out = str(getattr(torch.ops.specops, op + "_out").default._schema)
        assert out.count("!") == len(d.mutates) + len(d.outs)


def test_an_undeclared_op_is_a_clear_error():
    with pytest.raises(ValueError, match="not a declared op"):
        specops.declaration("no_such_op")


@pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")
def test_fast_lowering_declines_what_the_binding_cannot_check(monkeypatch):
    """The generated fast path (specops/ops/_generated_verify.py) hands the binding only what
    its checks cover, in the declared order: a relaxation, a non-bool flag or an unusual seed
    goes to the checked path."""
    from specops.ops import _dispatch

    d = specops.declaration("verify_chain")
    binding, calls = _build._C.verify_chain_cpu, []

    def spy(*args):
        calls.append(args)
        return binding(*args)

    monkeypatch.setitem(_dispatch._FAST, ("verify_chain", "cpu"), spy)
    p, x = random_probs(2, 4, 9, generator=torch.Generator().manual_seed(0)), torch.zeros(2, 3)
    x = x.long()
    relax = specops.Relaxation(torch.zeros(9, 1, dtype=torch.int32), 0.1)
    with specops.validation(False):
        specops.verify_chain(p, x)
        assert len(calls) == 1 and len(calls[0]) == len(d.binding_names)
        specops.verify_chain(p, x, relax=relax)
        with pytest.raises(TypeError, match="greedy"):
            specops.verify_chain(p, x, greedy=1)
        with pytest.raises(ValueError, match="seed"):
            specops.verify_chain(p, x, seed=torch.zeros(3, dtype=torch.long))
        with pytest.raises(ValueError, match="target_probs"):
            specops.verify_chain(p[0], x)
    assert len(calls) == 1  # none of the last four reached the binding directly


def test_checked_lowering_flattens_the_kinds():
    """A Relaxation becomes its neighbours and delta, seed and offset one Rng."""
    d = specops.declaration("verify_chain")
    p, x = torch.rand(2, 4, 9), torch.zeros(2, 3, dtype=torch.long)
    relax = specops.Relaxation(torch.zeros(9, 1, dtype=torch.int32), 0.1)
    flat = dict(zip(d.flat_names, d.flat_args(p, x, None, None, torch.tensor(3), 5, relax, False,
                                              None, False)))  # fmt: skip
    assert flat["neighbors"] is relax.neighbors and flat["delta"] == 0.1
    rng = flat["rng"]
    assert type(rng) is specops.ops._rng.Rng
    assert rng.seed.shape == (1,) and rng.seed_value == 0
    assert rng.offset is None and rng.offset_value == 5


def test_out_shapes_follow_the_declared_symbols():
    t = specops.Tree.kary_chain(2, 3, 9)
    d = specops.declaration("verify_jacobi")
    p, x = torch.rand(2, t.num_nodes, 7), torch.zeros(2, t.num_nodes, dtype=torch.long)
    flat = d.flat_args(p, x, None, t, True, 3, 0, 0, None, None)
    L = t.num_nodes
    assert d.out_shapes(flat) == ((2,), (2, L), (2,), (2, L, 3), (2, L))
    flat = d.flat_args(p, x, None, None, True, 1, 0, 0, None, None)
    assert d.out_shapes(flat) == ((2,), (2, L), (2,), (2, L, 0), (2, 0))
    wor = specops.declaration("sample_without_replacement")
    flat = wor.flat_args(torch.rand(2, 3, 11), 4, 0, 0, None)
    assert wor.out_shapes(flat) == ((2, 3, 4),)
