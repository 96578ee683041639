"""specops.probs_from_logits: the fused Triton kernel against the reference; argument checks.

On CPU the kernel runs in the Triton interpreter (cost per program and per loop iteration), so
rows are few and vocabularies moderate; GPU-only cases are marked ``gpu``."""

import math

import pytest
import torch
from helpers import aot_compile, served_vocab_logits, triton_device

import specops

DEV = "cuda" if torch.cuda.is_available() else "cpu"


# the fast backends: the Triton kernel (interpreted on CPU) and the C++ CPU twin on CPU tensors
FAST = ["triton"] + (["cpu"] if DEV == "cpu" else [])


def both(logits, be="triton", **kw):
    got = specops.probs_from_logits(logits, backend=be, **kw)
    want = specops.probs_from_logits(logits, backend="reference", **kw)
    return got.cpu(), want.cpu()


def assert_same(got, want):
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got > 0, want > 0), "kept sets differ"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("v", [7, 111, 32000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("be", FAST)
def test_fast_matches_reference(v, dtype, be):
    gen = torch.Generator().manual_seed(v + 3)
    b, n = 3, 1
    logits = (torch.randn(b, n, v, generator=gen) * 3).to(dtype).to(DEV)
    uncond = (torch.randn(b, n, v, generator=gen) * 3).to(dtype).to(DEV)
    t = torch.tensor([0.7, 0.0, 1.3], device=DEV)
    k = torch.tensor([min(5, v - 1), 0, v // 2], dtype=torch.int32, device=DEV)
    p = torch.tensor([0.9, 0.5, 0.95], device=DEV)
    s = torch.tensor([4.0, 1.0, 7.5], device=DEV)
    assert_same(
        *both(logits, be, temperature=t, top_k=k, top_p=p, cfg_scale=s, uncond_logits=uncond)
    )
    assert_same(*both(logits, be, temperature=1.1, top_p=0.8))
    assert_same(*both(logits, be, top_k=max(1, v // 7)))
    if v <= 111:
        assert_same(*both(logits, be))
        assert_same(*both(logits, be, temperature=0.5, top_k=3, top_p=0.7, cfg_scale=2.0,
                          uncond_logits=uncond))  # fmt: skip


@pytest.mark.parametrize("be", FAST)
def test_fast_visual_ar_config(be):
    """The LlamaGen / Lumina setting: CFG, top-k 2000 over a 65536 vocabulary (one request)."""
    gen = torch.Generator().manual_seed(0)
    c = (torch.randn(1, 2, 65536, generator=gen) * 2).bfloat16().to(DEV)
    u = (torch.randn(1, 2, 65536, generator=gen) * 2).bfloat16().to(DEV)
    got, want = both(c, be, top_k=2000, cfg_scale=4.0, uncond_logits=u)
    assert_same(got, want)
    assert ((got > 0).sum(-1) >= 2000).all()


@pytest.mark.parametrize("be", FAST)
def test_fast_ties_at_both_thresholds(be):
    # few distinct values: the k-th value and the top-p boundary are tied many times over
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(-4, 4, (4, 300), generator=gen).float().to(DEV)
    for kw in (
        dict(top_k=10),
        dict(top_k=torch.tensor([1, 37, 150, 299], device=DEV)),
        dict(top_p=torch.tensor([0.3, 0.5, 0.77, 0.999], device=DEV)),
        dict(top_k=100, top_p=0.6),
        dict(temperature=0.0),
    ):
        assert_same(*both(x, be, **kw))
    half = torch.randn(2, 4000, generator=gen).half().to(DEV)  # fp16 logits tie often
    assert_same(*both(half, be, top_k=1000, top_p=0.9, temperature=0.8))


@pytest.mark.parametrize("be", FAST)
def test_fast_masked_and_degenerate_rows(be):
    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(2))
    x[0, :] = -math.inf  # no mass: one-hot of token 0
    x[1, 10:] = -math.inf  # top-k larger than the finite tokens
    x[2, ::2] = -math.inf
    x[3, :] = 1.5  # every token tied
    x = x.to(DEV)
    u = torch.zeros_like(x)
    u[2, 1] = -math.inf  # masked in the unconditional row only
    for kw in (
        dict(top_k=20, top_p=0.9),
        dict(top_p=0.5, cfg_scale=3.0, uncond_logits=u),
        dict(temperature=torch.tensor([0.0, 1.0, 0.0, 2.0], device=DEV), top_k=3),
        dict(top_k=1),
    ):
        got, want = both(x, be, **kw)
        assert_same(got, want)
        assert got[0].tolist() == [1.0] + [0.0] * 49
    got, _ = both(x, be, top_p=0.5, cfg_scale=3.0, uncond_logits=u)
    assert got[2, 1] == 0 and got[2, ::2].eq(0).all()


@pytest.mark.parametrize("be", FAST)
def test_fast_per_request_params_strides_and_out(be):
    gen = torch.Generator().manual_seed(4)
    base = torch.randn(2, 3, 2 * 90, generator=gen).to(DEV)
    logits = base[..., ::2]  # non-unit stride in V
    k = torch.tensor([4, 0], device=DEV)  # int64 accepted
    t = torch.tensor([0.5, 2.0], dtype=torch.float64, device=DEV)
    out = torch.empty(2, 3, 90, device=DEV)
    got = specops.probs_from_logits(logits, temperature=t, top_k=k, backend=be, out=out)
    assert got is out
    assert_same(out.cpu(), specops.probs_from_logits(logits, temperature=t, top_k=k).cpu())
    assert ((out[0] > 0).sum(-1) == 4).all() and ((out[1] > 0).sum(-1) == 90).all()
    one = torch.tensor([3], device=DEV)  # [1] tensors broadcast to every request
    assert_same(*both(logits.contiguous(), be, top_k=one))
    assert_same(*both(torch.randn(33, device=DEV), be, top_k=torch.tensor(5, device=DEV)))
    # an int64 top_k past the int32 range keeps everything (it must not wrap to 5)
    big = torch.tensor([2**32 + 5, 4], device=DEV)
    got = specops.probs_from_logits(logits, top_k=big, backend=be)
    assert ((got[0] > 0).sum(-1) == 90).all() and ((got[1] > 0).sum(-1) == 4).all()
    assert_same(got.cpu(), specops.probs_from_logits(logits.cpu(), top_k=big.cpu()))


@pytest.mark.parametrize("be", ["reference", *FAST])
def test_top_p_is_read_as_float32_with_one_rule(be):
    """Issue 47: every backend reads p as float32 and cuts at max(p * Z, 1e-30).  A p that
    rounds to 0 (1e-300) keeps the arg-max (the C++ twin kept everything), as do tensor entries
    at or below 0 in fast mode (the twin kept 50 and 500); a p that rounds to 1 keeps every
    token (the reference cut a tail of mass below 1e-9).  Validation mode rejects p outside
    (0, 1], naming it."""
    gen = torch.Generator().manual_seed(47)
    x = (torch.randn(2, 500, generator=gen) * 2).to(DEV)
    x[:, 7] = -40.0  # mass ~1e-17 of the row: below 1 - float64(1 - 1e-9)
    kept = lambda **kw: (specops.probs_from_logits(x, backend=be, **kw) > 0).sum(-1).tolist()
    assert kept(top_p=1e-300) == [1, 1]
    assert kept(top_p=1e-300, top_k=50) == [1, 1]
    assert kept(top_p=1 - 1e-9) == [500, 500]
    p, k = torch.tensor([0.0, -1.0], device=DEV), torch.tensor([50, 0], device=DEV)
    with specops.validation(False):
        assert kept(top_p=p, top_k=k) == [1, 1]
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        kept(top_p=p, top_k=k)


def test_triton_block_sizes_do_not_change_the_result():
    from specops.triton_kernels.probs import probs_triton

    x = (torch.randn(2, 3000, generator=torch.Generator().manual_seed(9)) * 3).to(DEV)
    want = specops.probs_from_logits(x, top_k=300, top_p=0.9, backend="reference").cpu()
    for block, pblock, npiv in ((1024, 256, 4), (4096, 512, 16)):
        out = torch.empty(2, 3000, device=DEV)
        probs_triton(x, None, 1.0, 300, 0.9, None, 1, out, block=block, pblock=pblock, npiv=npiv)
        assert_same(out.cpu(), want)


def test_auto_backend_and_empty():
    x = torch.randn(2, 10)
    got = specops.probs_from_logits(x, top_k=3)  # CPU: auto = the C++ twin, never the interpreter
    assert_same(got, specops.probs_from_logits(x, top_k=3, backend="reference"))
    dev = triton_device()
    if dev is not None:
        empty = torch.zeros(0, 8, device=dev)
        assert specops.probs_from_logits(empty, backend="triton").shape == (0, 8)
    with pytest.raises(RuntimeError, match="not available"):  # no CUDA kernel: Triton on GPUs
        specops.probs_from_logits(x, backend="cuda")


def test_bad_inputs():
    x = torch.randn(2, 10)
    u = torch.randn(2, 11)
    with pytest.raises(ValueError, match="uncond_logits.*shape"):
        specops.probs_from_logits(x, cfg_scale=2.0, uncond_logits=u)
    with pytest.raises(ValueError, match="cfg_scale is None"):
        specops.probs_from_logits(x, uncond_logits=x)
    with pytest.raises(ValueError, match="uncond_logits is None"):
        specops.probs_from_logits(x, cfg_scale=2.0)
    with pytest.raises(TypeError, match="logits"):
        specops.probs_from_logits(x.long())
    with pytest.raises(ValueError, match="logits"):
        specops.probs_from_logits(torch.zeros(2, 0))
    with pytest.raises(ValueError, match="temperature"):
        specops.probs_from_logits(x, temperature=-1.0)
    with pytest.raises(ValueError, match="temperature"):
        specops.probs_from_logits(x, temperature=torch.tensor([1.0, -0.5]))
    with pytest.raises(ValueError, match="top_k"):
        specops.probs_from_logits(x, top_k=-3)
    with pytest.raises(TypeError, match="top_k"):
        specops.probs_from_logits(x, top_k=2.5)
    with pytest.raises(TypeError, match="top_k"):
        specops.probs_from_logits(x, top_k=torch.tensor([2.0, 3.0]))
    with pytest.raises(ValueError, match="top_k"):
        specops.probs_from_logits(x, top_k=torch.tensor([2, -1]))
    with pytest.raises(ValueError, match="top_k.*one per request"):
        specops.probs_from_logits(x, top_k=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="top_p"):
        specops.probs_from_logits(x, top_p=0.0)
    with pytest.raises(ValueError, match="top_p"):
        specops.probs_from_logits(x, top_p=torch.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match="cfg_scale"):
        specops.probs_from_logits(x, cfg_scale=math.nan, uncond_logits=x)
    with pytest.raises(ValueError, match="NaN"):
        specops.probs_from_logits(torch.tensor([[0.0, math.nan]]))
    with pytest.raises(TypeError, match="out"):
        specops.probs_from_logits(x, out=torch.empty(2, 10, dtype=torch.float16))
    with pytest.raises(ValueError, match="out"):
        specops.probs_from_logits(x, out=torch.empty(2, 9))
    with pytest.raises(ValueError, match="backend"):
        specops.probs_from_logits(x, backend="metal")


def test_opcheck_and_compile():
    x = torch.randn(2, 3, 20)
    t = torch.tensor([0.5, 1.0])
    out = torch.empty(2, 3, 20)
    args = (x, t, 1.0, None, 4, None, 0.8, None, 1.0, None, "reference")  # the declared order
    for op, a in ((torch.ops.specops.probs_from_logits_out, (*args, out)),
                  (torch.ops.specops.probs_from_logits, args)):  # fmt: skip
        torch.library.opcheck(op.default, a, test_utils=("test_schema", "test_faketensor"))
    f = torch.compile(lambda a: specops.probs_from_logits(a, temperature=t, top_k=4), dynamic=False)
    assert_same(f(x), specops.probs_from_logits(x, temperature=t, top_k=4))


@pytest.mark.gpu
def test_gpu_large_vocab_bf16():
    for c, u, t, k in served_vocab_logits(11, rows=8):
        p = torch.tensor([1.0, 0.9, 0.95, 0.5], device="cuda")
        kw = dict(temperature=t, top_k=k, top_p=p, cfg_scale=4.0, uncond_logits=u)
        assert_same(*both(c, **kw))


_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from specops.triton_kernels.probs import _probs_kernel as k

# (logits dtype, CFG, per-request parameter tensors, top-k)
for dt, cfg, ptr, topk in (("bf16", True, True, True), ("fp32", False, False, False)):
    sig = {n: "i32" for n in k.arg_names}
    sig.update(cond="*" + dt, uncond="*" + dt, out="*fp32")
    sig.update(t_val="fp32", p_val="fp32", s_val="fp32")
    sig.update({n: "*fp32" if ptr else "*" + dt for n in ("t_ptr", "p_ptr", "s_ptr")})
    sig.update(k_ptr="*i32" if ptr else "*" + dt)
    consts = dict(CFG=cfg, TOPK=topk, TOPP=True, T_PTR=ptr, K_PTR=ptr and topk, P_PTR=ptr,
                  S_PTR=ptr and cfg, BLOCK=4096, PBLOCK=1024, NPIV=8)
    sig.update({n: "constexpr" for n in consts})
    src = ASTSource(k, signature=sig, constexprs=consts)
    triton.compile(src, target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=8, enable_fp_fusion=False))
print("compiled")
"""


def test_triton_kernel_lowers_for_sm90():
    """Ahead-of-time compile for sm_90 (no GPU needed, out of the interpreter): catches lowering
    errors the interpreter does not see."""
    aot_compile(_AOT)
