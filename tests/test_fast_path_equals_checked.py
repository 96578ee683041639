"""The eager fast path (specops/ops/_common.py fast_kernel) behaves exactly like the checked path:
for every row of the case table (fast_path_table.py), valid or not, the fast call gives what the
same call with the fast path switched off gives: the same outputs and in-place writes, or the
same exception with the same message."""

from __future__ import annotations

import pytest
import torch
from fast_path_cases import _WRITTEN, _base
from fast_path_table import _CASES, _OPS, _kwargs

import specops
from specops import Tree, _build
from specops.ops import _common as c
from specops.ops import _dispatch

pytestmark = pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")


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
    # every call takes the checked path (the generated dispatch reads it through _dispatch)
    monkeypatch.setattr(_dispatch, "fast_kernel", lambda *a: None)
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


# FeatureCache.write (op feature_cache_write): its public face is a method, not in the table
_WRITES = {
    "valid": lambda kw: kw,
    "positions int64": lambda kw: {**kw, "positions": kw["positions"].long()},
    "positions strided": lambda kw: {**kw, "positions": kw["positions"].t().contiguous().t()},
    "positions -1 and beyond": lambda kw: {**kw, "positions": torch.tensor([[-1, 7], [9, 0]])},
    "positions float": lambda kw: {**kw, "positions": kw["positions"].float()},
    "positions batch 1": lambda kw: {**kw, "positions": kw["positions"][:1]},
    "feats f16": lambda kw: {**kw, "feats": kw["feats"].half()},
    "feats strided": lambda kw: {
        **kw,
        "feats": kw["feats"].transpose(0, 1).contiguous().transpose(0, 1),
    },  # fmt: skip
    "feats wrong hidden": lambda kw: {**kw, "feats": kw["feats"][..., :3]},
    "step tensor [B]": lambda kw: {**kw, "step": torch.tensor([3, 4])},
    "step int32 tensor": lambda kw: {**kw, "step": torch.tensor([3], dtype=torch.int32)},
    "step 2**31": lambda kw: {**kw, "step": 2**31},
    "step -2**31": lambda kw: {**kw, "step": -(2**31)},
    "step True": lambda kw: {**kw, "step": True},
}


def _write_outcome(mutate):
    g = torch.Generator().manual_seed(3)
    fc = specops.FeatureCache(2, 8, 5)
    kw = mutate(dict(positions=torch.tensor([[0, 3], [5, 1]], dtype=torch.int32),
                     feats=torch.randn(2, 2, 5, generator=g), step=7))  # fmt: skip
    try:
        with specops.validation(False):
            fc.write(**kw)
    except Exception as e:  # noqa: BLE001 - the exception itself is what is compared
        return ("raised", type(e).__name__, str(e))
    return ("returned", (fc.features.clone(), fc.stamps.clone()))


@pytest.mark.parametrize("name", list(_WRITES))
def test_feature_cache_write_fast_equals_checked(name, monkeypatch):
    fast = _write_outcome(_WRITES[name])
    monkeypatch.setattr(_dispatch, "fast_kernel", lambda *a: None)
    checked = _write_outcome(_WRITES[name])
    assert _same(fast, checked), f"FeatureCache.write [{name}]: {fast} != {checked}"
