"""The harness of the boundary fuzz (tests/test_fuzz_boundary_*.py): layouts, moving inputs where a
backend runs, and the comparison with the "reference" backend run on contiguous copies of the same
values (exact equality for tokens, ids and cache contents, a tolerance for attention,
probabilities and features).  Arguments an op writes (``out``, caches, ``cache_seqlens``) must be
honoured or rejected with a ValueError / TypeError naming the argument, and memory around a
written view must stay untouched.

Cases known to fail are marked ``xfail(strict=True)`` one by one (``_XFAIL``): whoever fixes one
gets an XPASS failure and removes its entry.  ``_ASAN_SKIP`` lists cases that read or write out
of bounds under scripts/sanitize.sh (they are skipped there; SPECOPS_ASAN_STAGE=1 is set by that
script)."""

from __future__ import annotations

import os

import pytest
import torch
from fuzz_cases import Case
from helpers import triton_device

import specops
from specops import _build

IN_ASAN = os.environ.get("SPECOPS_ASAN_STAGE") == "1"
# backend "triton": the interpreter on CPU tensors (CI), or compiled on CUDA tensors on a GPU
# (the same cases, moved there with their layouts by ``_on_device``)
_TRITON_DEVICE = triton_device()
_F_PAD, _I_PAD = 1000.0, 99991  # what surrounds a sliced/narrowed view: loud when read

# known failures on main (issue 14), one entry per case ------------------------------------
_XFAIL: dict[str, str] = {}  # case id -> what is wrong
_SKIP: dict[str, str] = {}  # cases that crash the process (none found so far)
_ASAN_SKIP: dict[str, str] = {}  # cases with a sanitizer report: skipped under sanitize.sh


def _known(table, reason, *ids):
    for i in ids:
        table[i] = reason


# Every case found failing when this file was written (per-request seeds, uniforms, out=,
# cache_seqlens and block tables read as if contiguous; expanded caches written; empty tensors
# rejected as non-contiguous; raw errors for seeds outside int64; edge sizes that did not advance
# cache_seqlens) is fixed: the tables are empty.  Mark a newly found failure with
# _known(_XFAIL, "what is wrong", "<case id>") so it turns into an XPASS failure once fixed.


# layouts ------------------------------------------------------------------------------------
LAYOUTS = ("sliced", "narrow", "outer", "transposed", "expanded")


def _pad_like(t: torch.Tensor, shape) -> torch.Tensor:
    fill = _F_PAD if t.dtype.is_floating_point else _I_PAD
    return torch.full(shape, fill, dtype=t.dtype)


def layout_ok(t: torch.Tensor, layout: str) -> bool:
    if layout == "contiguous":
        return True
    if t.dim() == 0 or t.numel() == 0:
        return False
    if layout in ("sliced", "narrow"):
        return True
    if layout == "outer":  # stride 2 on dim 0: same as sliced for rank 1
        return t.dim() >= 2
    if layout == "transposed":
        return t.dim() >= 2 and t.shape[0] > 1 and t.shape[-1] > 1
    if layout == "expanded":
        return t.shape[0] > 1
    raise AssertionError(layout)


def lay(t: torch.Tensor, layout: str):
    """-> (view with ``t``'s values (rows of dim 0 all equal to row 0 for "expanded"), the
    tensor that owns its memory or None).  "sliced": stride 2 on the last dim; "narrow": the
    first columns of a wider tensor; "outer": stride 2 on dim 0; "transposed": dims 0 and -1
    swapped in memory; "expanded": row 0 broadcast along dim 0 (stride 0)."""
    if layout == "contiguous":
        return t.clone(), None
    if layout == "sliced":
        base = _pad_like(t, (*t.shape[:-1], 2 * t.shape[-1]))
        base[..., ::2] = t
        return base[..., ::2], base
    if layout == "narrow":
        base = _pad_like(t, (*t.shape[:-1], t.shape[-1] + 3))
        base[..., : t.shape[-1]] = t
        return base[..., : t.shape[-1]], base
    if layout == "outer":
        base = _pad_like(t, (2 * t.shape[0], *t.shape[1:]))
        base[::2] = t
        return base[::2], base
    if layout == "transposed":
        base = t.transpose(0, -1).contiguous()
        return base.transpose(0, -1), base
    if layout == "expanded":
        base = t[:1].clone()
        return base.expand(t.shape), base
    raise AssertionError(layout)


def _out(r):
    return tuple(r) if isinstance(r, tuple) else (r,)


def _available(backend: str) -> bool:
    if backend == "triton":
        return _TRITON_DEVICE is not None
    return backend == "cpu" and _build.has_cpp()


def _device(backend: str) -> str:
    return _TRITON_DEVICE if backend == "triton" else "cpu"


def _on_device(backend: str, views: dict, bases: dict) -> tuple[dict, dict]:
    """The inputs where ``backend`` runs, each laid out as given: a base is copied there and
    its view re-made over the copy with the same sizes, strides and offset."""
    dev = _device(backend)
    return (views, bases) if dev == "cpu" else _move(views, bases, dev)


def _move(views: dict, bases: dict, dev: str) -> tuple[dict, dict]:
    moved = {k: None if b is None else b.to(dev, copy=True) for k, b in bases.items()}
    out = {}
    for k, v in views.items():
        b = bases.get(k)
        if not isinstance(v, torch.Tensor) or v.device.type == "meta":
            out[k] = v  # a meta tensor is the wrong-device input of a device check: kept
        elif b is None:
            out[k] = v.to(dev)
        else:
            off = v.storage_offset() - b.storage_offset() + moved[k].storage_offset()
            out[k] = moved[k].as_strided(v.shape, v.stride(), off)
    return out, moved


# running and comparing ----------------------------------------------------------------------
def _assert_same(got, want, tol, what=""):
    got, want = _out(got), _out(want)
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        if a is None or b is None:
            assert a is None and b is None, f"{what} output {i}"
            continue
        assert a.shape == b.shape and a.dtype == b.dtype, (
            f"{what} output {i}: {a.shape} {a.dtype} vs reference {b.shape} {b.dtype}"
        )
        if a.dtype.is_floating_point:
            torch.testing.assert_close(a, b, atol=tol, rtol=tol, equal_nan=True,
                                       msg=lambda m, i=i: f"{what} output {i}: {m}")  # fmt: skip
        else:
            assert torch.equal(a, b), f"{what} output {i}:\n{a}\nreference:\n{b}"


def _clone_all(t: dict) -> dict:
    return {k: v.clone() for k, v in t.items()}


def _run_reference(case: Case, inputs: dict):
    return _snapshot(case.call("reference", _clone_all(inputs)))


def _snapshot(r):
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in _out(r))


def check_against_reference(case: Case, backend: str, views: dict, bases: dict, ctx=None):
    """Run ``backend`` on ``views`` (some laid out) and the reference on contiguous copies of
    their values; written views: honoured (and memory around them untouched) or rejected with an
    error naming the argument."""
    canon = {k: v.contiguous().clone() for k, v in views.items()}
    ctx = ctx if ctx is not None else _nullctx
    with ctx():
        want = _run_reference(case, canon)
    views, bases = _on_device(backend, views, bases)
    before = {k: b.clone() for k, b in bases.items() if b is not None}
    with ctx():
        try:
            got = _snapshot(case.call(backend, views))
        except (ValueError, TypeError) as e:
            laid_written = [k for k in case.written if bases.get(k) is not None]
            if not laid_written:
                raise
            names = [case.names.get(k, k) for k in laid_written]
            assert any(n in str(e) for n in names), f"rejection does not name {names}: {e}"
            for k, b in before.items():
                assert torch.equal(bases[k], b), f"{k} was written before being rejected"
            return
    got = tuple(x.cpu() if isinstance(x, torch.Tensor) else x for x in got)
    _assert_same(got, want, case.float_tol, backend)
    for k in case.written:  # memory around a written view: untouched
        if bases.get(k) is None or views[k].stride() == bases[k].stride():
            continue
        v = views[k]
        off = v.storage_offset() - bases[k].storage_offset()
        a, b = bases[k].clone(), before[k].clone()
        for x in (a, b):
            x.as_strided(v.shape, v.stride(), off).fill_(0)
        assert torch.equal(a, b), f"{k}: memory outside the view was written"


def _fast():
    return specops.validation(False)


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _param(case_id, *values, skip_reason=None):
    marks = []
    if case_id in _XFAIL:
        # a case that reads past its tensors' storage fails or passes with whatever memory
        # follows: not strict (scripts/sanitize.sh reports it instead)
        strict = case_id not in _ASAN_SKIP
        marks.append(pytest.mark.xfail(strict=strict, reason="issue 14: " + _XFAIL[case_id]))
    if case_id in _SKIP:
        marks.append(pytest.mark.skip(reason="issue 14 (crashes the process): " + _SKIP[case_id]))
    if IN_ASAN and case_id in _ASAN_SKIP:
        marks.append(pytest.mark.skip(reason="issue 14 (ASan report): " + _ASAN_SKIP[case_id]))
    if skip_reason:
        marks.append(pytest.mark.skip(reason=skip_reason))
    return pytest.param(*values, id=case_id, marks=marks)
