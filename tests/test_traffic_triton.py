"""bench/traffic_triton.py (issue 36, item 2): planted Triton kernels with known traffic give the
exact counts the definitions of bench/traffic_common.py predict, the interpreter is left as it
was, and every Triton kernel of specops is counted through its public op."""

import os
import re
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":  # conftest sets it on machines without a GPU
    pytest.skip("counts the Triton interpreter (TRITON_INTERPRET=1)", allow_module_level=True)

import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from specops.bench import traffic_triton as tt  # noqa: E402
from specops.bench.traffic_common import SECTOR  # noqa: E402
from triton.runtime import interpreter as interp  # noqa: E402

BLOCK = 256


@triton.jit
def _pass(x, y, n, SX: tl.constexpr, SY: tl.constexpr, REPEAT: tl.constexpr, HOLES: tl.constexpr,
          BLOCK: tl.constexpr):  # fmt: skip
    """y[SY i] = 2 x[SX i] for i < n, REPEAT times; HOLES: only even i (a mask with holes)."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    if HOLES:
        m = m & (o % 2 == 0)
    for _ in range(REPEAT):
        v = tl.load(x + o * SX, mask=m)
        tl.store(y + o * SY, v * 2, mask=m)


@triton.jit
def _one_program(x, y, n_ptr, BLOCK: tl.constexpr):
    """Every program reads n (one scalar lane); program 0 alone copies all n elements."""
    n = tl.load(n_ptr)
    if tl.program_id(0) == 0:
        for i in range(0, n, BLOCK):
            o = i + tl.arange(0, BLOCK)
            tl.store(y + o, tl.load(x + o, mask=o < n), mask=o < n)


@triton.jit
def _atomics(c, BLOCK: tl.constexpr):
    tl.debug_barrier()
    tl.atomic_add(c + tl.arange(0, BLOCK), 1)
    tl.debug_barrier()


def _aligned(n, dtype=torch.float32):
    t = torch.arange(n).to(dtype)
    assert t.data_ptr() % SECTOR == 0  # the expected sectors assume aligned rows
    return t


def _run(x, y, n, sx=1, sy=1, repeat=1, holes=False):
    grid = (triton.cdiv(n, BLOCK),)
    with tt.count_traffic() as launches:
        _pass[grid](x, y, n, SX=sx, SY=sy, REPEAT=repeat, HOLES=holes, BLOCK=BLOCK)
    assert len(launches) == 1
    t = launches[0]
    assert (t.backend, t.kernel, t.grid, t.barriers) == ("triton", "_pass", (*grid, 1, 1), 0)
    return t


def test_coalesced_fp32_pass():
    n = 4096
    x, y = _aligned(n), torch.zeros(n)
    t = _run(x, y, n)
    assert torch.equal(y, 2 * x)  # counting changes nothing
    # 4N read + 4N written; 2N lanes in groups of 32 = 256 requests of 128 contiguous bytes,
    # 4 sectors each
    assert (t.bytes_read, t.bytes_written) == (4 * n, 4 * n)
    assert (t.requests, t.sectors, t.sectors_per_request) == (256, 1024, 4.0)
    assert t.cta_bytes == [2 * 4 * BLOCK] * 16
    assert (t.ctas, t.ctas_with_work, t.critical_cta_bytes) == (16, 16, 2048)


@pytest.mark.parametrize(
    "dtype,sectors", [(torch.int8, 1), (torch.float16, 2), (torch.float32, 4), (torch.float64, 8)]
)
def test_element_size(dtype, sectors):
    """32 contiguous lanes of e bytes: 32 e bytes = e sectors a request."""
    n = 1024
    x, y = _aligned(n, dtype), torch.zeros(n, dtype=dtype)
    t = _run(x, y, n)
    e = x.element_size()
    assert (t.bytes_read, t.bytes_written, t.requests) == (e * n, e * n, 64)
    assert t.sectors_per_request == sectors


@pytest.mark.parametrize("stride", [2, 4, 8, 32, 64])
def test_strided_fp32_pass(stride):
    """Lane i at byte 4 s i: a request's 32 lanes span 128 s bytes, so min(4 s, 32) sectors (from
    s = 8 on every lane has a sector of its own); bytes stay 4N each way."""
    n = 1024
    x, y = _aligned(stride * n), torch.zeros(stride * n)
    t = _run(x, y, n, sx=stride, sy=stride)
    assert torch.equal(y[::stride], 2 * x[::stride]) and not y.view(-1, stride)[:, 1:].any()
    assert (t.bytes_read, t.bytes_written, t.requests) == (4 * n, 4 * n, 64)
    assert t.sectors_per_request == min(4 * stride, 32)
    assert t.sectors == 64 * min(4 * stride, 32)


def test_stride32_read_coalesced_write():
    """Loads of stride 32 (32 sectors each) and coalesced stores (4 each): (32 + 4) / 2 = 18."""
    n = 1024
    x, y = _aligned(32 * n), torch.zeros(n)
    t = _run(x, y, n, sx=32, sy=1)
    assert torch.equal(y, 2 * x[::32])
    assert (t.requests, t.sectors, t.sectors_per_request) == (64, 32 * 32 + 32 * 4, 18.0)


def test_pass_twice():
    """The same pass twice in one launch doubles bytes, requests and sectors; two launches give
    two records equal to one pass each."""
    n = 4096
    x, y = _aligned(n), torch.zeros(n)
    once, twice = _run(x, y, n), _run(x, y, n, repeat=2)
    assert (twice.bytes_read, twice.bytes_written) == (8 * n, 8 * n)
    assert (twice.requests, twice.sectors) == (2 * once.requests, 2 * once.sectors)
    assert twice.cta_bytes == [2 * b for b in once.cta_bytes]
    assert twice.sectors_per_request == once.sectors_per_request == 4.0
    with tt.count_traffic() as launches:
        for _ in range(2):
            _pass[(16,)](x, y, n, SX=1, SY=1, REPEAT=1, HOLES=False, BLOCK=BLOCK)
    assert launches == [once, once]


def test_masked_tail():
    """N = 1000 over 4 programs of 256: the last has 232 active lanes = 7 full requests of 4
    sectors and one of 8 lanes (32 bytes, 1 sector); masked lanes move nothing."""
    n = 1000
    x, y = _aligned(1024), torch.zeros(1024)
    t = _run(x, y, n)
    assert torch.equal(y[:n], 2 * x[:n]) and not y[n:].any()
    assert (t.bytes_read, t.bytes_written) == (4000, 4000)
    assert t.cta_bytes == [2048, 2048, 2048, 2 * 4 * 232]
    assert (t.requests, t.sectors) == (2 * (3 * 8 + 8), 2 * (3 * 8 * 4 + 7 * 4 + 1))


def test_mask_with_holes():
    """Even lanes only: 128 active lanes a program = 4 groups of 32 (traffic_common: active lanes
    are grouped in order), each over 64 elements = 256 bytes = 8 sectors."""
    n = 4096
    x, y = _aligned(n), torch.zeros(n)
    t = _run(x, y, n, holes=True)
    assert torch.equal(y[::2], 2 * x[::2]) and not y[1::2].any()
    assert (t.bytes_read, t.bytes_written) == (2 * n, 2 * n)
    assert (t.requests, t.sectors, t.sectors_per_request) == (128, 1024, 8.0)


def test_one_program_does_all_the_work():
    n, programs = 4096, 8
    x, y = _aligned(n), torch.zeros(n)
    n_t = torch.tensor([n], dtype=torch.int32)
    with tt.count_traffic() as launches:
        _one_program[(programs,)](x, y, n_t, BLOCK=BLOCK)
    (t,) = launches
    assert torch.equal(y, x)
    # program 0: its scalar n (4 bytes) + 4N read + 4N written; the others only n (under 1% of
    # the busiest program: not counted as having work)
    assert t.cta_bytes == [4 + 8 * n] + [4] * (programs - 1)
    assert (t.bytes_read, t.bytes_written) == (4 * programs + 4 * n, 4 * n)
    assert (t.ctas, t.ctas_with_work) == (programs, 1)
    assert t.critical_cta_bytes == 4 + 8 * n == t.bytes_read + t.bytes_written - 4 * (programs - 1)
    # requests: 8 scalar loads (1 lane, 1 sector) + 16 tiles x 8 requests x 2 (load, store)
    assert (t.requests, t.sectors) == (programs + 16 * 8 * 2, programs + 16 * 8 * 2 * 4)


def test_atomics_and_barriers():
    """An atomic is a read-modify-write: its bytes count both ways; each tl.debug_barrier call
    counts one barrier."""
    c = torch.zeros(32, dtype=torch.int32)
    with tt.count_traffic() as launches:
        _atomics[(3,)](c, BLOCK=32)
    (t,) = launches
    assert torch.equal(c, torch.full((32,), 3, dtype=torch.int32))
    assert (t.bytes_read, t.bytes_written, t.requests, t.sectors) == (3 * 128, 3 * 128, 3, 12)
    assert (t.barriers, t.barriers_per_cta) == (6, 2.0)


def test_sectors_of_misaligned_lanes():
    """An element that straddles a 32-byte boundary touches both sectors; a 33rd lane opens a new
    request."""
    import numpy as np

    assert tt._sectors(np.array([28], np.int64), 8) == 2
    assert tt._sectors(np.arange(33, dtype=np.int64) * 4, 4) == 4 + 1
    assert tt._sectors(np.arange(32, dtype=np.int64) * 4 + 16, 4) == 5  # 128 bytes, misaligned


def _pristine():
    return (
        not {"create_masked_load", "create_masked_store", "create_barrier", "set_grid_dim"}
        & set(vars(interp.interpreter_builder))
        and interp.GridExecutor.__call__ is _ORIG_CALL
    )


_ORIG_CALL = interp.GridExecutor.__call__


def test_restores_the_interpreter():
    n = 256
    x, y = _aligned(n), torch.zeros(n)
    with pytest.raises(KeyError), tt.count_traffic() as launches:
        _pass[(1,)](x, y, n, SX=1, SY=1, REPEAT=1, HOLES=False, BLOCK=BLOCK)
        raise KeyError("the block fails after a launch")
    assert len(launches) == 1 and _pristine()
    _pass[(1,)](x, y, n, SX=1, SY=1, REPEAT=1, HOLES=False, BLOCK=BLOCK)  # not counted
    assert len(launches) == 1
    with tt.count_traffic(), pytest.raises(RuntimeError, match="already active"):
        with tt.count_traffic():
            pass
    assert _pristine()


def _launched_kernels() -> set[str]:
    """Every kernel the package launches: launch(<kernel>, ...) in triton_kernels/*.py."""
    import specops.triton_kernels as tk

    names = set()
    for f in Path(tk.__file__).parent.glob("*.py"):
        names |= set(re.findall(r"\blaunch\(\s*(_\w+)\s*,", f.read_text()))
    return names


def test_every_specops_kernel_counted():
    rows = tt.count_triton_ops(quick=True)
    kernels = {t.kernel for _, _, t in rows}
    assert kernels == _launched_kernels()
    for op, shape, t in rows:
        # (a last radix level of probs' split path may find every row decided: it only reads)
        assert t.backend == "triton" and t.bytes_read > 0, (op, shape, t.kernel)
        assert len(t.cta_bytes) == t.ctas and t.ctas_with_work >= 1
        assert 1 <= t.sectors_per_request <= 32
        assert t.barriers == 0 or t.kernel == "_commit_kv_kernel"
    ops = {op for op, _, _ in rows}
    assert {"verify_chain", "sample", "probs_from_logits", "tree_attention", "append_kv",
            "commit_kv", "gather_rows", "drafter_inputs", "path_similarity"} <= ops  # fmt: skip
    shapes = {s for op, s, _ in rows if op == "tree_attention"}
    assert any("page=" in s for s in shapes) and any("page=" not in s for s in shapes)
    assert any(s.endswith("split") for op, s, _ in rows if op == "probs_from_logits")
    assert any(s.endswith("row") for op, s, _ in rows if op == "probs_from_logits")
    assert _pristine()


def test_verify_inputs_force_a_rejection_and_counting_changes_nothing():
    import specops

    b, k, v = 2, 3, 1000
    p, x, q = tt.verify_inputs(b, k, v, torch.Generator().manual_seed(0))
    with specops.validation(False):
        plain = specops.verify_chain(p, x, q, seed=1, backend="triton")
        with tt.count_traffic() as launches:
            counted = specops.verify_chain(p, x, q, seed=1, backend="triton")
    assert (plain.num_accepted <= k // 2).all()
    assert torch.equal(plain.tokens, counted.tokens)
    assert torch.equal(plain.num_accepted, counted.num_accepted)
    assert [t.kernel for t in launches] == ["_verify_chain_kernel"]
