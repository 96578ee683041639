"""features: the Triton kernels equal the reference (copies: exactly; path_similarity: 1e-5)."""

import pytest
import torch
from helpers import aot_compile, to_device, triton_device
from test_reference_features import brute_path_similarity

import specops
from specops import reference

DEV = "cuda" if torch.cuda.is_available() else "cpu"
FAST = ["triton", "cpu"]  # cpu: the C++ twin (CPU tensors)


def _dev(backend):
    return "cpu" if backend == "cpu" else DEV


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", FAST)
def test_gather_rows(backend, dtype):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(0)
    src = torch.randn(3, 7, 40, generator=g).to(dtype).to(dev)
    index = torch.tensor([[0, 6, -1, 2, 2], [1, -1, 3, 4, 5], [-1, -1, -1, -1, -1]], device=dev)
    for idx in (index, index.int()):
        got = specops.gather_rows(src, idx, backend=backend)
        assert got.dtype == dtype and got.shape == (3, 5, 40)
        assert torch.equal(got, reference.gather_rows(src, idx))
    # strided source (a view), wide rows (two column chunks), and the auto backend
    wide = torch.randn(2, 9, 2 * 2100, generator=g).to(dev)[:, 1:, ::2]
    idx = torch.tensor([[7, 0, -1], [3, 3, 1]], device=dev)
    got = specops.gather_rows(wide, idx, backend=backend)
    assert torch.equal(got, reference.gather_rows(wide, idx))
    assert torch.equal(specops.gather_rows(wide, idx), got)


@pytest.mark.parametrize("backend", FAST)
def test_gather_rows_fast_mode_out_of_range_reads_zeros(backend):
    dev = _dev(backend)
    src = torch.randn(2, 4, 8, device=dev)
    idx = torch.tensor([[4, -5, 1], [100, 0, -1]], device=dev)
    with specops.validation(False):
        got = specops.gather_rows(src, idx, backend=backend)
    want = torch.zeros(2, 3, 8, device=dev)
    want[0, 2], want[1, 1] = src[0, 1], src[1, 0]
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="index"):
        specops.gather_rows(src, idx)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", ["none", "broadcast", "per_row"])
@pytest.mark.parametrize("backend", FAST)
def test_drafter_inputs(backend, dtype, step):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(50, 24, generator=g).to(dtype).to(dev)
    tokens = torch.randint(0, 50, (2, 5), generator=g).to(dev)
    tokens[1, 3] = -1
    feats = torch.randn(2, 5, 33, generator=g).to(dtype).to(dev)
    st = {
        "none": None,
        "broadcast": torch.randn(7, generator=g).to(dtype).to(dev),
        "per_row": torch.randn(2, 5, 7, generator=g).to(dtype).to(dev),
    }[step]
    got = specops.drafter_inputs(emb, tokens.int(), feats, st, backend=backend)
    want = reference.drafter_inputs(emb, tokens, feats, st)
    assert got.dtype == dtype and got.shape == want.shape
    assert torch.equal(got, want)
    manual = [emb[tokens.clamp_min(0)] * (tokens >= 0)[..., None], feats]
    if st is not None:
        manual.append(st.expand(2, 5, 7))
    assert torch.equal(got, torch.cat(manual, -1))


@pytest.mark.parametrize("backend", FAST)
def test_drafter_inputs_strided_and_out_of_range(backend):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(2)
    emb = torch.randn(30, 16, generator=g).to(dev)[::2]  # strided [15, 16]
    feats = torch.randn(3, 6, 10, generator=g).to(dev).transpose(0, 1)  # [6, 3, 10] view
    tokens = torch.tensor([[0, 14, 15], [99, -7, 3], [1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1]])
    tokens = tokens.to(dev)
    with specops.validation(False):
        got = specops.drafter_inputs(emb, tokens, feats, backend=backend)
    assert torch.equal(got, reference.drafter_inputs(emb, tokens, feats))
    assert torch.equal(got[0, 2, :16], torch.zeros(16, device=dev))  # id 15 == V: zero row
    with pytest.raises(ValueError, match="token id"):
        specops.drafter_inputs(emb, tokens, feats)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape", [(1, 2, 5, 8), (3, 5, 9, 4), (2, 3, 4, 300)])
@pytest.mark.parametrize("backend", FAST)
def test_path_similarity_vs_pairwise_loop(backend, stride, shape):
    dev = _dev(backend)
    b, p, length, c = shape
    g = torch.Generator().manual_seed(b * 7 + c)
    codebook = torch.randn(40, c, generator=g)
    # correlated paths (realistic: candidate paths share most tokens) and a random one
    base = torch.randint(0, 40, (b, 1, length), generator=g)
    paths = base.expand(b, p, length).clone()
    flip = torch.rand(b, p, length, generator=g) < 0.4
    paths[flip] = torch.randint(0, 40, (int(flip.sum()),), generator=g)
    for alpha in (0.9, 0.6):
        want = brute_path_similarity(paths, codebook, alpha, stride)
        got = specops.path_similarity(
            paths.to(dev), codebook.to(dev), alpha=alpha, stride=stride, backend=backend
        )
        assert got.dtype == torch.float32 and got.shape == (b,)
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-7)
        ref = specops.path_similarity(paths, codebook, alpha=alpha, stride=stride)
        torch.testing.assert_close(ref.double(), want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", FAST)
def test_path_similarity_edge_cases(backend):
    dev = _dev(backend)
    cb = torch.randn(10, 6, generator=torch.Generator().manual_seed(3)).to(dev)
    one = torch.randint(0, 10, (2, 1, 4)).to(dev)
    assert specops.path_similarity(one, cb, backend=backend).tolist() == [1.0, 1.0]
    same = torch.tensor([[[1, 2, 3, 4]] * 3]).to(dev)
    torch.testing.assert_close(
        specops.path_similarity(same, cb, backend=backend), torch.ones(1, device=dev)
    )
    # half-precision codebooks; ids out of range count as zero vectors in fast mode
    paths = torch.tensor([[[0, 1, 2], [0, 11, 2], [3, 1, -1]]]).to(dev)
    for dt in (torch.float16, torch.bfloat16):
        with specops.validation(False):
            got = specops.path_similarity(paths, cb.to(dt), alpha=0.8, backend=backend)
        want = brute_path_similarity(paths.cpu(), cb.to(dt).float().cpu(), 0.8, 1)
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-7)
    # half subnormals, zeros and large values convert exactly (the C++ twin decodes the bits)
    tiny = torch.tensor([[6e-8, 0.0, 1e-5], [-3e-5, 6e4, 0.0], [0.0, 0.0, 0.0]], device=dev)
    tp = torch.tensor([[[0, 1], [1, 2], [0, 0]]], device=dev)
    got = specops.path_similarity(tp, tiny.half(), backend=backend)
    want = brute_path_similarity(tp.cpu(), tiny.half().float().cpu(), 0.9, 1)
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="token id"):
        specops.path_similarity(paths, cb)


@pytest.mark.parametrize("backend", [*FAST, "reference"])
def test_feature_cache_round_trip_and_ages(backend):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(4)
    b, cap, h = 2, 16, 12
    fc = specops.FeatureCache(b, cap, h, dtype=torch.float16, device=dev, backend=backend)
    ref_store = torch.zeros(b, cap, h, dtype=torch.float16, device=dev)
    ref_stamps = torch.full((b, cap), -1, dtype=torch.int32, device=dev)
    assert fc.read(torch.tensor([[0, 5], [15, -1]], device=dev)).abs().sum() == 0
    for step in range(4):
        pos = torch.stack([torch.randperm(cap, generator=g)[:5] for _ in range(b)]).to(dev)
        pos[0, -1] = -1
        feats = torch.randn(b, 5, h, generator=g).to(dev)  # float32 in, stored as float16
        st = step if step < 2 else torch.tensor([step, step + 1], device=dev)
        fc.write(pos, feats, st)
        reference.feature_cache_write(ref_store, ref_stamps, pos, feats, st)
        assert torch.equal(fc.features, ref_store) and torch.equal(fc.stamps, ref_stamps)
        back = fc.read(pos)
        assert torch.equal(back[pos >= 0], feats.half()[pos >= 0])
        assert torch.equal(back[pos < 0], torch.zeros_like(back[pos < 0]))
        assert (fc.age(pos, st + 1)[pos >= 0] == 1).all()
    q = torch.arange(cap, device=dev).expand(b, cap)
    assert torch.equal(fc.age(q, 10), reference.feature_cache_age(ref_stamps, q, 10))
    assert ((fc.age(q, 10) == -1) == (ref_stamps == -1)).all()


@pytest.mark.parametrize("backend", FAST)
def test_feature_cache_vvs_pattern(backend):
    """Verified steps write back; a skipped step reads the most recent cached features for its
    unverified tokens (mixed staleness) without a host sync; post verification overwrites."""
    dev = _dev(backend)
    b, cap, h = 2, 32, 4
    fc = specops.FeatureCache(b, cap, h, device=dev, backend=backend)
    hidden = lambda pos, step: (pos[..., None] * 10 + step).float().expand(*pos.shape, h)
    # step 0 (verified): positions 0..5 for request 0, 0..3 for request 1
    pos0 = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, -1, -1]], device=dev)
    fc.write(pos0, hidden(pos0, 0), step=0)
    # step 1 (verified): request 0 accepts 2 more (6, 7), request 1 accepts 4 (4..7)
    pos1 = torch.tensor([[6, 7, -1, -1], [4, 5, 6, 7]], device=dev)
    fc.write(pos1, hidden(pos1, 1), step=1)
    verified = torch.tensor([8, 8], device=dev)
    # step 2 skipped: 3 and 5 tokens accepted without verification -> the 3 / 5 most recent
    unverified = torch.tensor([3, 5], device=dev)
    pos = fc.recent_positions(verified, unverified, 5)
    assert pos.tolist() == [[5, 6, 7, -1, -1], [3, 4, 5, 6, 7]]
    feats = fc.read(pos)
    assert feats[0, :3, 0].tolist() == [50.0, 61.0, 71.0]  # mixed staleness: step 0 and 1
    assert fc.age(pos, 2).tolist() == [[2, 1, 1, -1, -1], [2, 1, 1, 1, 1]]
    # step 3 verified (post verification re-runs the unverified tokens 8..): write-back
    pos3 = verified[:, None] + torch.arange(4, device=dev)
    fc.write(pos3, hidden(pos3, 3), step=torch.tensor(3, device=dev))
    assert fc.read(pos3)[:, :, 0].tolist() == [[83.0, 93.0, 103.0, 113.0]] * 2


def test_feature_cache_bad_inputs():
    fc = specops.FeatureCache(2, 8, 4, device=DEV)
    with pytest.raises(ValueError, match="positions"):
        fc.write(torch.zeros(3, 2, dtype=torch.long, device=DEV), torch.zeros(3, 2, 4), 0)
    with pytest.raises(ValueError, match="feats"):
        fc.write(torch.zeros(2, 2, dtype=torch.long, device=DEV), torch.zeros(2, 2, 5), 0)
    with pytest.raises(ValueError, match="position 8"):
        fc.write(torch.tensor([[8, 0], [1, 2]], device=DEV), torch.zeros(2, 2, 4, device=DEV), 0)
    with pytest.raises(ValueError, match="repeats"):
        fc.write(torch.tensor([[1, 1], [1, 2]], device=DEV), torch.zeros(2, 2, 4, device=DEV), 0)
    with pytest.raises(TypeError, match="step"):
        fc.write(torch.tensor([[1, 0], [1, 2]], device=DEV), torch.zeros(2, 2, 4, device=DEV), 1.5)
    with pytest.raises(ValueError, match="step"):
        fc.age(torch.tensor([[1, 0], [1, 2]], device=DEV), torch.tensor([1, 2, 3], device=DEV))
    with pytest.raises(TypeError, match="dtype"):
        specops.FeatureCache(2, 8, 4, dtype=torch.int32)
    # fast mode: out-of-range writes are dropped, reads give zeros
    with specops.validation(False):
        fc.write(torch.tensor([[8, -3], [1, 2]], device=DEV), torch.ones(2, 2, 4, device=DEV), 5)
        assert fc.stamps[0].eq(-1).all() and fc.stamps[1, 1:3].eq(5).all()
        assert fc.read(torch.tensor([[8, 1], [1, 9]], device=DEV))[:, :, 0].tolist() == [
            [0.0, 0.0],
            [1.0, 0.0],
        ]


def test_bad_inputs():
    emb, tok, feats = torch.randn(10, 4), torch.zeros(2, 3, dtype=torch.long), torch.randn(2, 3, 5)
    with pytest.raises(TypeError, match="features"):
        specops.drafter_inputs(emb, tok, feats.half())
    with pytest.raises(ValueError, match="features"):
        specops.drafter_inputs(emb, tok, feats[:1])
    with pytest.raises(ValueError, match="step_embedding"):
        specops.drafter_inputs(emb, tok, feats, torch.randn(2, 2, 3))
    with pytest.raises(TypeError, match="tokens"):
        specops.drafter_inputs(emb, tok.float(), feats)
    with pytest.raises(ValueError, match="index"):
        specops.gather_rows(torch.randn(2, 3, 4), torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="paths"):
        specops.path_similarity(torch.zeros(2, 0, 3, dtype=torch.long), torch.randn(4, 2))
    with pytest.raises(ValueError, match="stride"):
        specops.path_similarity(torch.zeros(2, 2, 3, dtype=torch.long), torch.randn(4, 2), stride=0)
    with pytest.raises(ValueError, match="alpha"):
        specops.path_similarity(torch.zeros(2, 2, 3, dtype=torch.long), torch.randn(4, 2), alpha=-1)
    with pytest.raises(RuntimeError, match="not available"):  # no CUDA kernel for this op
        specops.gather_rows(
            torch.randn(2, 3, 4), torch.zeros(2, 2, dtype=torch.long), backend="cuda"
        )


def test_opcheck():
    g = torch.Generator().manual_seed(5)
    src, idx = torch.randn(2, 5, 8, generator=g), torch.tensor([[0, -1, 4], [2, 2, 1]])
    emb, feats = torch.randn(9, 4, generator=g), torch.randn(2, 3, 6, generator=g)
    paths, cb = torch.randint(0, 9, (2, 3, 4), generator=g), torch.randn(9, 5, generator=g)
    store, stamps = torch.zeros(2, 6, 8), torch.full((2, 6), -1, dtype=torch.int32)
    pos = torch.tensor([[0, 3, -1], [5, 1, 2]])
    utils = ("test_schema", "test_faketensor")
    rows = torch.randn(2, 3, 8, generator=g)
    for be in ("triton", "cpu", "reference"):
        dev = triton_device() if be == "triton" else "cpu"
        if dev is None:
            continue

        def on(*args, dev=dev):
            return tuple(to_device(a, dev) for a in args)

        ops = torch.ops.specops
        torch.library.opcheck(ops.gather_rows.default, on(src, idx, be), test_utils=utils)
        torch.library.opcheck(
            ops.drafter_inputs.default, on(emb, idx, feats, torch.randn(3), be), test_utils=utils
        )
        torch.library.opcheck(
            ops.path_similarity.default, on(paths, cb, 0.9, 2, be), test_utils=utils
        )
        torch.library.opcheck(
            ops.feature_cache_write.default,
            on(store.clone(), stamps.clone(), pos, rows, None, 4, be),
            test_utils=utils,
        )


_AOT = """
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import specops.triton_kernels.features as k

f = "*" + sys.argv[1]


def compile_(fn, ptrs, consts, scalar="i64"):
    sig = {n: scalar for n in fn.arg_names}
    sig.update(ptrs)
    sig.update({n: "constexpr" for n in consts})
    src = ASTSource(fn, signature=sig, constexprs=consts)
    triton.compile(src, target=GPUTarget("cuda", 90, 32))


compile_(k._gather_kernel, dict(src=f, index="*i64", out=f), {"ROWS": 2, "BLOCK": 2048})
for mode in (0, 1, 2):
    ptrs = dict(emb=f, tokens="*i32", feats=f, step=f, out=f)
    compile_(k._drafter_kernel, ptrs, {"STEP_MODE": mode, "ROWS": 4, "BLOCK": 1024})
    ptrs = dict(store=f, stamps="*i32", pos="*i64", feats="*fp32", step_ptr="*i64")
    ptrs["step_value"] = "i32"
    compile_(k._write_kernel, ptrs, {"STEP_MODE": mode, "ROWS": 4, "BLOCK": 1024})
ptrs = dict(paths="*i64", codebook=f, out="*fp32", alpha_stride="fp32")
consts = {"STRIDE": 2, "BLOCK_P": 16, "BLOCK_C": 256}
compile_(k._path_sim_kernel, ptrs, consts, scalar="i32")
print("compiled")
"""


@pytest.mark.parametrize("dt", ["bf16"])
def test_triton_kernels_lower_for_sm90(dt):
    """Ahead-of-time compile for sm_90 (no GPU needed, out of the interpreter): catches lowering
    errors the interpreter does not see."""
    aot_compile(_AOT, dt)


def _rounding_cases(src: torch.dtype, dst: torch.dtype) -> torch.Tensor:
    """Values of dtype ``src`` exactly halfway between two neighbours in ``dst`` (both ways of
    rounding a tie), a hair off halfway, past dst's largest finite value, and NaN / inf."""
    half = {torch.bfloat16: 1 << 15, torch.float16: 1 << 12}[dst]
    base = torch.tensor([1.0, 1.5, -1.25, 3.0, 0.75, 1e-3, 6e4, -2.5e-5], dtype=torch.float32)
    b = base.view(torch.int32)
    bits = torch.cat([b + half, b + 3 * half, b + half - 1, b + half + 1, b - half, b])
    x = torch.cat([bits.view(torch.float32), torch.tensor([3.5e38, float("nan"), -float("inf")])])
    return x.to(src)


_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16


@pytest.mark.parametrize("src,dst", [(_F32, _BF16), (_F32, _F16), (_F16, _BF16), (_BF16, _F16)])
@pytest.mark.parametrize("backend", ["reference", *FAST])
def test_feature_cache_stores_round_to_nearest_even(backend, src, dst):
    """A value stored into a lower-precision cache rounds to nearest-even on every backend: the
    caches are bit-identical to torch's conversion, NaN aside (the Triton kernel rounds bfloat16
    itself; the interpreter's cast truncates)."""
    x = _rounding_cases(src, dst)
    h = x.numel()
    fc = specops.FeatureCache(1, 3, h, dtype=dst, device=_dev(backend), backend=backend)
    fc.write(torch.tensor([[1]], device=_dev(backend)), x.reshape(1, 1, h).to(_dev(backend)), 1)
    got, want = fc.features[0, 1].cpu(), x.to(dst)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)  # NaN stays NaN (its payload is not specified)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16)), (got, want)
