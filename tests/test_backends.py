"""The public backend helpers: specops.available_backends, resolve_backend, backend_table and
validating, as engines and the benchmarks use them (no private module needed)."""

from __future__ import annotations

import pytest
import torch

import specops
from specops import _build


def test_available_backends_follow_the_table_and_the_build():
    table = specops.backend_table()
    for op, have in table.items():
        got = specops.available_backends(op, "cpu")
        assert got == [b for b in have if b in got], f"{op}: not in the table's order"
        assert got[-1] == "reference" or "reference" not in have
        assert "cuda" not in got  # CPU tensors
        assert ("cpu" in got) == ("cpu" in have and _build.has_cpp())
        assert "triton" not in got  # the interpreter only when asked for
    with_interp = specops.available_backends("sample", "cpu", interpreter=True)
    assert ("triton" in with_interp) == (_build.has_triton() and _build.triton_interpret())
    if torch.cuda.is_available():
        assert specops.available_backends("sample", "cuda")[0] in ("cuda", "triton")


def test_resolve_backend_is_what_auto_runs():
    want = "cpu" if _build.has_cpp() else "reference"
    assert specops.resolve_backend("sample", "cpu") == want
    assert specops.resolve_backend("build_dynamic_tree", "cpu") == "reference"
    assert specops.resolve_backend("sample", "cpu", "reference") == "reference"
    with pytest.raises(RuntimeError, match="backend 'cuda' is not available for cpu tensors"):
        specops.resolve_backend("sample", "cpu", "cuda")


@pytest.mark.parametrize("fn", [specops.available_backends, specops.resolve_backend])
def test_unknown_op_is_named(fn):
    with pytest.raises(ValueError, match="unknown op 'sampel'"):
        fn("sampel", "cpu")


def test_validating_follows_validation():
    before = specops.validating()
    with specops.validation(True):
        assert specops.validating() is True
        with specops.validation(False):
            assert specops.validating() is False
    assert specops.validating() is before


def test_auto_on_a_gpu_follows_the_committed_measurements(monkeypatch):
    """The table lists each op's backends fastest first as the committed GPU CSVs measured them
    (sample: Triton ahead of CUDA, h200-940f467.csv), and "auto" on a GPU takes the first usable
    one.  The build is pretended to have CUDA and Triton."""
    from specops.ops import _backends

    monkeypatch.setattr(_backends, "_RESOLVED", {})
    monkeypatch.setattr(_build, "has_cuda_kernels", lambda: True)
    monkeypatch.setattr(_build, "has_triton", lambda: True)
    monkeypatch.setattr(_build, "triton_interpret", lambda: False)
    gpu = torch.device("cuda")
    assert specops.backend_table()["sample"][:2] == ("triton", "cuda")
    assert specops.resolve_backend("sample", gpu) == "triton"
    assert specops.resolve_backend("sample", gpu, "cuda") == "cuda"  # named: as asked
    assert specops.resolve_backend("verify_chain", gpu) == "cuda"
    assert specops.resolve_backend("sample", "cpu") == ("cpu" if _build.has_cpp() else "reference")
