"""commit_kv: every backend equals the reference exactly (these are copies)."""

import pytest
import torch
from helpers import CUDA_SIM, aot_compile, kv_caches

import specops
from specops import _build, reference

BACKENDS = ["cpu", "triton"] + (["cuda"] if torch.cuda.is_available() else []) + [CUDA_SIM]
HKV, D = 2, 8


def _device(backend):
    gpu = torch.cuda.is_available()
    return "cuda" if backend == "cuda" or (backend == "triton" and gpu) else "cpu"


def _random_slots(b, m_max, window, g, *, min_m=0):
    """Strictly increasing offsets in [0, window), -1 padded; row lengths vary (0 allowed)."""
    slots = torch.full((b, m_max), -1, dtype=torch.int32)
    for r in range(b):
        m = int(torch.randint(min_m, m_max + 1, (1,), generator=g))
        slots[r, :m] = torch.randperm(window, generator=g)[:m].sort().values.to(torch.int32)
    return slots


def _case(layers, b, page, g, dtype=torch.float32, m_max=6, window=10):
    """(stacked caches, block_table or None, cache_seqlens, accepted_slots).  page None:
    contiguous [layers, 2, B, S, Hkv, D]; else paged with a shuffled block table."""
    capacity = 32
    caches, bt = kv_caches(g, layers, b, capacity, HKV, D, page, dtype=dtype)
    cs = torch.randint(0, capacity - window + 1, (b,), generator=g, dtype=torch.int32)
    slots = _random_slots(b, m_max, window, g)
    return caches, bt, cs, slots


def _run(backend, caches, bt, cs, slots, as_list=False):
    dev = _device(backend)
    caches, cs = caches.clone().to(dev), cs.clone().to(dev)
    bt = None if bt is None else bt.to(dev)
    if as_list:
        pairs = [(caches[i, 0].clone(), caches[i, 1].clone()) for i in range(caches.shape[0])]
        specops.commit_kv(pairs, cs, slots.to(dev), block_table=bt, backend=backend)
        caches = torch.stack([torch.stack(p) for p in pairs])
    else:
        specops.commit_kv(caches, cs, slots.to(dev), block_table=bt, backend=backend)
    return caches.cpu(), cs.cpu()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layers", [1, 32])
@pytest.mark.parametrize("b", [1, 4])
@pytest.mark.parametrize("page", [None, 1, 16])
def test_matches_reference(backend, layers, b, page):
    g = torch.Generator().manual_seed(layers * 100 + b * 10 + (page or 0))
    for trial in range(1 if backend == "triton" else 3):  # the interpreter is slow
        caches, bt, cs, slots = _case(layers, b, page, g)
        want = _run("reference", caches, bt, cs, slots)
        got = _run(backend, caches, bt, cs, slots)
        assert torch.equal(got[1], want[1])
        assert torch.equal(got[0], want[0])
        assert torch.equal(want[1] - cs, (slots >= 0).sum(1).to(torch.int32))
        if trial == 0:
            got_list = _run(backend, caches, bt, cs, slots, as_list=True)
            assert torch.equal(got_list[0], want[0]) and torch.equal(got_list[1], want[1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_dtypes_and_overlapping_moves(backend, dtype):
    g = torch.Generator().manual_seed(7)
    caches = torch.randn(2, 2, 3, 16, HKV, D, generator=g).to(dtype)
    cs = torch.tensor([1, 4, 0], dtype=torch.int32)
    # 0: tree path 0 -> 2 -> 5 (slot 2 -> 1 while 5 -> 2); 1: in-place Jacobi prefix; 2: m = 0
    slots = torch.tensor([[0, 2, 5, -1], [0, 1, 2, 3], [-1, -1, -1, -1]], dtype=torch.int32)
    got = _run(backend, caches, None, cs, slots)
    want = caches.clone()
    want[:, :, 0, 2] = caches[:, :, 0, 3]
    want[:, :, 0, 3] = caches[:, :, 0, 6]
    assert torch.equal(got[0], want)
    assert got[1].tolist() == [4, 8, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_path_crosses_pages(backend):
    """More moves than the CUDA tile (8) and page boundaries, int64 slots."""
    g = torch.Generator().manual_seed(3)
    caches, bt, cs, _ = _case(2, 2, 4, g)
    cs = torch.tensor([3, 0], dtype=torch.int32)
    slots = torch.stack([torch.arange(1, 28, 2)[:13], torch.arange(0, 26, 2)[:13]])
    want = _run("reference", caches, bt, cs, slots)
    got = _run(backend, caches, bt, cs, slots)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[1].tolist() == [16, 13]


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_caches_and_no_out_of_bounds_writes(backend):
    """Fast mode: malformed slots commit only their valid prefix; guard positions around the
    cache (it is a view inside a larger buffer) and every other byte outside the moves stay."""
    g = torch.Generator().manual_seed(4)
    layers, b, s = 2, 4, 12
    big = torch.randn(layers, 2, b, s + 4, HKV, D, generator=g)
    cs = torch.tensor([2, 5, 10, 12], dtype=torch.int32)
    slots = torch.tensor(
        [
            [0, 3, -1, 4],  # -1 before a valid entry: cut after 2
            [1, 1, 2, -1],  # not increasing: cut after 1
            [0, 1, 2, 3],  # 10 + 2 >= 12: cut after 2 (path longer than the free space)
            [0, -1, -1, -1],  # full cache: nothing
        ],
        dtype=torch.int32,
    )
    outs = []
    for be in ["reference", backend]:
        buf = big.clone().to(_device(be))
        view = buf[:, :, :, 2 : s + 2]
        c = cs.clone().to(_device(be))
        with specops.validation(False):
            specops.commit_kv(view, c, slots.to(c.device), backend=be)
        outs.append((buf.cpu(), c.cpu()))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    buf = outs[1][0]
    assert torch.equal(buf[:, :, :, :2], big[:, :, :, :2])
    assert torch.equal(buf[:, :, :, s + 2 :], big[:, :, :, s + 2 :])
    assert outs[1][1].tolist() == [4, 6, 12, 12]


@pytest.mark.parametrize("backend", BACKENDS)
def test_paged_bad_block_table_no_out_of_bounds(backend):
    g = torch.Generator().manual_seed(5)
    num_pages, page = 6, 2
    big = torch.randn(1, 2, num_pages + 2, page, HKV, D, generator=g)
    bt = torch.tensor([[1, 2, -3, 4], [0, 5, num_pages, 3]], dtype=torch.int32)
    cs = torch.tensor([1, 2], dtype=torch.int32)
    slots = torch.tensor([[0, 2, 3, 5], [1, 2, 3, -1]], dtype=torch.int32)
    outs = []
    for be in ["reference", backend]:
        buf = big.clone().to(_device(be))
        c = cs.clone().to(buf.device)
        with specops.validation(False):
            specops.commit_kv(
                buf[:, :, 1 : num_pages + 1],
                c,
                slots.to(c.device),
                block_table=bt.to(c.device),
                backend=be,
            )
        outs.append((buf.cpu(), c.cpu()))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(outs[1][0][:, :, [0, num_pages + 1]], big[:, :, [0, num_pages + 1]])
    # request 0: source position 1 + 3 = 4 lies in page id -3: cut after 2 entries
    # request 1: source 2 + 2 = 4 lies in page id 6 (out of range): cut after 1 entry
    assert outs[1][1].tolist() == [3, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_ids_past_int32_stay_invalid(backend):
    """int64 slots and page ids past the int32 range are invalid (the reference's semantics), not
    wrapped into valid ones by the int32 conversion the kernels need."""
    g = torch.Generator().manual_seed(6)
    big = 2**32
    cs = torch.tensor([1, 2], dtype=torch.int32)
    flat_slots = torch.tensor([[0, big + 2, -1], [big + 1, 3, -1]])  # wrapped: [0, 2], [1, 3]
    contiguous = torch.randn(1, 2, 2, 8, HKV, D, generator=g)
    paged = torch.randn(1, 2, 6, 2, HKV, D, generator=g)
    bt = torch.tensor([[0, big + 1, 2, 3], [4, 5, 1, 2]])  # wrapped: page 1 is valid
    paged_slots = torch.tensor([[0, 1, -1], [big + 1, 3, -1]])  # request 0's 2nd source: page 1
    for caches, table, slots in ((contiguous, None, flat_slots), (paged, bt, paged_slots)):
        want, want_cs = caches.clone(), cs.clone()
        specops.reference.commit_kv(want, want_cs, slots, block_table=table)
        dev = _device(backend)
        got, got_cs = caches.clone().to(dev), cs.clone().to(dev)
        with specops.validation(False):
            specops.commit_kv(
                got, got_cs, slots.to(dev),
                block_table=None if table is None else table.to(dev), backend=backend,
            )  # fmt: skip
        assert torch.equal(got.cpu(), want) and torch.equal(got_cs.cpu(), want_cs)
        assert want_cs.tolist() == [2, 2]  # one entry for request 0, none for request 1
    with pytest.raises(ValueError, match="accepted_slots"):  # validation sees the real ids
        specops.commit_kv(contiguous.clone(), cs.clone(), torch.tensor([[0, big], [0, 1]]))


def test_bad_inputs_raise():
    caches = torch.zeros(2, 2, 2, 8, HKV, D)
    cs = torch.tensor([2, 3], dtype=torch.int32)
    ok = torch.tensor([[0, 1, -1], [0, 2, 3]], dtype=torch.int32)
    with pytest.raises(ValueError, match="caches"):
        specops.commit_kv(caches[:, :1], cs, ok)
    with pytest.raises(TypeError, match="caches"):
        specops.commit_kv(caches.int(), cs, ok)
    with pytest.raises(ValueError, match="contiguous"):
        specops.commit_kv(caches.transpose(-1, -2), cs, ok)
    with pytest.raises(TypeError, match="cache_seqlens"):
        specops.commit_kv(caches, cs.long(), ok)
    with pytest.raises(ValueError, match="accepted_slots"):
        specops.commit_kv(caches, cs, ok[:1])
    with pytest.raises(ValueError, match="batch dim"):
        specops.commit_kv(caches, torch.zeros(3, dtype=torch.int32), ok.repeat(2, 1)[:3])
    with pytest.raises(ValueError, match="block_table"):
        specops.commit_kv(caches, cs, ok, block_table=torch.zeros(3, 2, dtype=torch.int32))
    with pytest.raises(TypeError, match="pair"):
        specops.commit_kv([caches[0, 0]], cs, ok)
    with pytest.raises(ValueError, match="strides"):
        specops.commit_kv(
            [(caches[0, 0], caches[0, 1].transpose(0, 1).contiguous().transpose(0, 1))], cs, ok
        )
    # value checks (validation mode, on in the test suite)
    for bad, msg in [
        ([[0, -1, 1], [0, 1, 2]], "padding"),
        ([[0, 2, 1], [0, 1, 2]], "increasing"),
        ([[0, 1, -2], [0, 1, 2]], "< -1"),
        ([[0, 1, -1], [0, 1, 5]], "beyond the capacity"),
    ]:
        with pytest.raises(ValueError, match=msg):
            specops.commit_kv(caches, cs, torch.tensor(bad, dtype=torch.int32))
    with pytest.raises(ValueError, match="free space"):
        specops.commit_kv(caches, torch.tensor([7, 0], dtype=torch.int32), ok)
    paged = torch.zeros(1, 2, 4, 2, HKV, D)
    with pytest.raises(ValueError, match="page outside"):
        specops.commit_kv(
            paged, cs, ok, block_table=torch.tensor([[0, 1, 2, 3], [2, 3, 9, 1]]).int()
        )
    assert cs.tolist() == [2, 3]  # nothing was committed by a raising call
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="not available"):
            specops.commit_kv(caches, cs, ok, backend="cuda")


def test_build_info_lists_commit_kv():
    info = specops.build_info()
    assert "commit_kv" in info["host_kernels"]
    if info["cuda_compiled"]:
        assert "commit_kv" in info["cuda_kernels"]


def test_opcheck_and_compile():
    g = torch.Generator().manual_seed(6)
    caches, bt, cs, slots = _case(2, 2, 4, g)
    for args in [
        ([caches.clone()], cs.clone(), slots, bt, "cpu"),  # the stacked tensor: a list of one
        ([caches.clone()], cs.clone(), slots, None, "reference"),
    ]:
        if args[3] is None:
            args = ([torch.randn(2, 2, 2, 32, HKV, D, generator=g)], *args[1:])
        torch.library.opcheck(
            torch.ops.specops.commit_kv.default,
            args,
            test_utils=("test_schema", "test_faketensor"),
        )
    pairs = [caches[i, j].clone() for i in range(2) for j in range(2)]
    torch.library.opcheck(
        torch.ops.specops.commit_kv.default,
        (pairs, cs.clone(), slots, bt, "cpu"),
        test_utils=("test_schema", "test_faketensor"),
    )

    def step(kv, lens, s):
        specops.commit_kv(kv, lens, s, block_table=bt, backend="cpu")
        return lens + 0

    f = torch.compile(step, fullgraph=False)
    a, a_cs = caches.clone(), cs.clone()
    want, want_cs = _run("reference", caches, bt, cs, slots)
    assert torch.equal(f(a, a_cs, slots), want_cs)
    assert torch.equal(a, want)


def test_reference_backend_matches_module():
    g = torch.Generator().manual_seed(8)
    caches, bt, cs, slots = _case(2, 4, 16, g)
    a, a_cs = caches.clone(), cs.clone()
    reference.commit_kv(a, a_cs, slots, block_table=bt)
    got = _run("reference", caches, bt, cs, slots)
    assert torch.equal(got[0], a) and torch.equal(got[1], a_cs)


def test_auto_picks_the_compiled_kernel():
    from specops.ops._common import pick_backend

    want = "cpu" if _build.has_cpp() else "reference"
    assert (
        pick_backend("commit_kv", "auto", torch.device("cpu"), ("cuda", "cpu", "reference")) == want
    )


_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from specops.triton_kernels.kv import _commit_kv_kernel as k

for paged in (False, True):
    for offsets in (False, True):
        sig = {n: "i64" for n in k.arg_names}
        sig.update(cache="*i16", slab_offsets="*i64", seqlens="*i32", slots="*i32", bt="*i32")
        sig.update(counters="*i32")
        consts = dict(PAGE=16 if paged else 1, PAGED=paged, HAS_OFFSETS=offsets, BLOCK_M=16,
                      TILE=8, BLOCK=1024)
        sig.update({n: "constexpr" for n in consts})
        src = ASTSource(k, signature=sig, constexprs=consts)
        triton.compile(src, target=GPUTarget("cuda", 90, 32))
print("compiled")
"""


def test_triton_kernel_lowers_for_sm90():
    """Ahead-of-time compile for sm_90 (no GPU needed, out of the interpreter)."""
    aot_compile(_AOT)
