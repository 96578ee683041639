"""verify_chain's fast backends against the reference, token for token, on fresh random inputs:
the C++ CPU twin ("cpu"), the Triton kernel ("triton", triton_kernels/verify.py) and the CUDA
kernel ("cuda", GPU only); the Triton kernel's statistical losslessness and sm_90 lowering (the
CPU twin's statistical tests are in test_verify_kernels.py).

Without a GPU the Triton kernel runs in the interpreter on CPU tensors (~10-30 ms per program:
the batches here are sized for it); with one, on CUDA tensors.  The reference always runs on the
CPU.  Identity is exact except on exact rounding ties of the float64 sums (summation order
differs at the 1e-16 level), which random inputs never hit."""

from __future__ import annotations

import pytest
import torch
from helpers import CUDA_SIM, aot_compile, random_probs
from helpers import gen as _gen
from test_verify_kernels import _dev, case_rng, make_chain, opcheck_chain, run_chain
from verify_stats import PASS, Markov, _draw, joint_pvalue

import specops
from specops import Relaxation
from specops.ops import verify as ops_verify
from specops.reference import verify as rv

try:
    import triton  # noqa: F401

    _HAS_TRITON = True
except ImportError:  # pragma: no cover
    _HAS_TRITON = False
needs_triton = pytest.mark.skipif(not _HAS_TRITON, reason="needs triton")

DEV = _dev("triton")  # where the triton backend runs
BACKENDS = [
    "cpu",
    pytest.param("triton", marks=needs_triton),
    pytest.param("cuda", marks=pytest.mark.gpu),
    CUDA_SIM,
]


SMALL_KINDS = ["mixed", "one_hot", "near_one_hot", "zero_q", "all_rejected"]
# (B, K, V, scenario kinds): every kind at several shapes, sized for the interpreter
CASES = [
    (1, 1, 7, SMALL_KINDS),
    (3, 4, 111, SMALL_KINDS),
    (17, 8, 111, ["mixed", "zero_q"]),
    (17, 1, 7, ["one_hot", "all_rejected"]),
    (17, 4, 32000, ["near_one_hot"]),
    (3, 64, 7, ["mixed", "near_one_hot"]),
    (3, 8, 32000, ["mixed", "all_rejected"]),
    (1, 3, 65536, ["mixed", "all_rejected"]),
]


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("b,k,v,kinds", CASES)
def test_chain_matches_reference(be, b, k, v, kinds):
    gen, seeds = case_rng(b * 1000 + k * 10 + v, b)
    big = v >= 32000
    for kind in kinds:
        p, x, q = make_chain(b, k, v, gen, kind)
        nd = torch.randint(0, k + 1, (b,), generator=gen)
        xpad = torch.where(torch.rand(b, k, generator=gen) < 0.1, -1, x)
        for i, dp in enumerate((q, None)):
            s = int(torch.randint(0, 2**31, (1,), generator=gen))
            if big:  # one sampled call per draft kind at the large vocabularies, and greedy
                kw = dict(seed=s) if i == 0 else dict(num_draft=nd, seed=seeds, offset=2**33)
                run_chain(be, p, x if i == 0 else xpad, dp, **kw)
                if i == 0:
                    run_chain(be, p, xpad, dp, greedy=True, num_draft=nd)
                continue
            run_chain(be, p, x, dp, seed=s)
            run_chain(be, p, xpad, dp, num_draft=nd, seed=seeds, offset=torch.tensor(2**33 + 5))
            run_chain(be, p, x, dp, greedy=True, num_draft=nd)


@pytest.mark.parametrize("be", BACKENDS)
def test_greedy_split_walk_matches_reference(be):
    """Greedy at small batch and large vocabularies: CUDA splits every row's argmax over blocks
    (verify_chain_greedy_split_kernel), then walks the chunk results.  Matched prefixes of every
    length (up to all K, and past a 16-row walk round), maxima tied across chunks (the first
    maximal id wins), a row without mass (argmax 0) and one with NaNs, num_draft and -1 pads."""
    g = _gen(77)
    for b, k, v in [(1, 8, 65536), (2, 20, 16384), (3, 4, 32000)]:
        p = torch.softmax(torch.randn(b, k + 1, v, generator=g) * 2, -1)
        top = p.argmax(-1)
        p[0, 0, v - 5] = p[0, 0, top[0, 0]]  # a later tie: the earlier id stays the argmax
        p[0, 1, : top[0, 1]] = 0.0
        p[0, 1, (int(top[0, 1]) + v // 2) % v] = p[0, 1, top[0, 1]]  # maybe an earlier tie
        p[b - 1, 2].zero_()  # without mass: argmax 0
        p[b - 1, 3, 7::13] = float("nan")  # NaN counts as no mass
        best = torch.nan_to_num(p, nan=0.0).argmax(-1)[:, :k]  # the first maximal id
        keep = torch.tensor([k, 17, 0][:b] if k == 20 else [k // 2 + 1, k, 1][:b])[:, None]
        x = torch.where(torch.arange(k) < keep, best, (best + 1) % v)
        with specops.validation(False):
            want = run_chain(be, p, x, None, greedy=True)
            assert torch.equal(want.num_accepted, keep[:, 0].int()), want.num_accepted
            nd = torch.randint(0, k + 1, (b,), generator=g)
            run_chain(be, p, x, None, greedy=True, num_draft=nd)
            xpad = torch.where(torch.rand(b, k, generator=g) < 0.2, -1, x)
            run_chain(be, p, xpad, None, greedy=True)


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_acceptance_mix_is_exercised(be):
    # the scenarios reach accepted prefixes of every kind: none, some, all (bonus)
    gen = _gen(5)
    p, x, q = make_chain(40, 6, 50, gen, "mixed")
    r = run_chain(be, p, x, q, seed=3)
    a = r.num_accepted
    assert (a == 0).any() and (a > 2).any() and (a < 6).any() and (a == 6).any()


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_relax(be):
    gen = _gen(6)
    for b, k, v in [(3, 8, 111), (5, 4, 7), (1, 2, 4099)]:
        p, x, q = make_chain(b, k, v, gen, "mixed")
        nb = torch.randint(-1, v, (v, 5), generator=gen).int()
        nb[:, 0] = torch.arange(v)  # x itself is skipped
        for delta in (0.0, 0.05, 2.0):
            for dp in (q, None):
                run_chain(be, p, x, dp, relax=Relaxation(nb, delta), seed=int(delta * 100) % 97)
        run_chain(be, p, x, q, relax=Relaxation(nb.long(), 0.2), seed=1)
    # a relaxation that flips decisions: with delta >= 1 every neighbour's mass is pooled
    p, x, q = make_chain(8, 4, 7, gen, "all_rejected")
    nb = torch.arange(7).roll(1)[:, None].expand(7, 3).contiguous()
    r = run_chain(be, p, x, q, relax=Relaxation(nb, 1.0), seed=2)
    assert (r.num_accepted > 0).any()


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_explicit_uniforms_and_known_answer(be):
    gen = _gen(7)
    b, k, v = 17, 6, 111
    p, x, q = make_chain(b, k, v, gen, "mixed")
    u = torch.rand(b, k + 1, generator=gen)
    for dp in (q, None):
        run_chain(be, p, x, dp, uniforms=u)
    pp = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]], device=_dev(be))
    qq = torch.tensor([[[0.2, 0.5, 0.3]]], device=_dev(be))
    xx = torch.tensor([[1]], device=_dev(be))

    def f(q, u):
        u = torch.tensor([u], device=_dev(be))
        return specops.verify_chain(pp, xx, q, uniforms=u, backend=be).tokens.tolist()

    assert f(qq, [0.59, 0.95]) == [[1, 2]]  # 0.59 * 0.5 < 0.3: accepted; bonus at 0.95 -> 2
    assert f(qq, [0.61, 0.95]) == [[0, -1]]  # rejected: residual (0.3, 0, 0) -> 0
    assert f(None, [0.31, 0.8]) == [[2, -1]]  # rejected: residual (0.5, 0, 0.2)/0.7 at 0.8 -> 2


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_draw_past_the_end_takes_the_last_positive_id(be):
    """u = 1 puts the draw's target at the row's total: no running sum passes it, and the token
    is the last id with mass (the residual's after a rejection, the bonus row's otherwise), also
    when that id sits in a tile before the last one."""
    v = 5000
    p = torch.zeros(1, 2, v, device=_dev(be))
    p[0, :, :10] = 0.1
    p[0, :, 3] = 0.0
    # rejected (p(3) = 0: the residual is p); no draft; accepted (0.05 < p(7)): the bonus row
    for x, u0, a in (([[3]], 0.5, 0), ([[-1]], 0.5, 0), ([[7]], 0.05, 1)):
        xx = torch.tensor(x, device=_dev(be))
        u = torch.tensor([[u0, 1.0]], device=_dev(be))
        got = specops.verify_chain(p, xx, None, uniforms=u, backend=be)
        want = specops.verify_chain(p.cpu(), xx.cpu(), None, uniforms=u.cpu(), backend="reference")
        assert got.tokens.tolist() == want.tokens.tolist()
        assert got.num_accepted.tolist() == [a] and got.tokens[0, a].item() == 9


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("v", [300, 9000])  # 9000: the CUDA final draw split over 4 blocks
def test_chain_residual_without_mass_draws_from_p(be, v):
    """q = 2 p (not a distribution, accepted without validation): the draft is rejected for
    u >= 1/2 and max(p - q, 0) has no mass, so the corrected token is p's draw at u_final."""
    gen = _gen(11)
    p = torch.softmax(torch.randn(1, 2, v, generator=gen), -1).to(_dev(be))
    q = 2 * p[:, :1]
    x = torch.tensor([[5]], device=_dev(be))
    u = torch.tensor([[0.7, 0.37]], device=_dev(be))
    got = specops.verify_chain(p, x, q, uniforms=u, backend=be)
    c = p[0, 0].double().cpu().cumsum(0)
    assert got.num_accepted.tolist() == [0]
    assert got.tokens[0, 0].item() == int(torch.nonzero(c > 0.37 * c[-1])[0])


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_seed_tensor_shapes_and_int32_ids(be):
    gen = _gen(8)
    b, k, v = 3, 4, 111
    p, x, q = make_chain(b, k, v, gen, "mixed")
    run_chain(be, p, x.int(), q, seed=torch.tensor(123), offset=torch.tensor([9]))
    run_chain(be, p, x.int(), q, seed=torch.tensor([123]), offset=4)
    run_chain(be, p, x, q, seed=torch.tensor([1, 2, 3]), num_draft=torch.tensor([4, 0, 2]).int())
    run_chain(be, p, x, None, seed=-5, offset=2**40)
    run_chain(
        be, p, x.int(), None, seed=-(2**63), offset=2**63 - 1, num_draft=torch.tensor([4, 1, 3])
    )
    run_chain(be, p, x.int(), None, greedy=True, num_draft=torch.tensor([4, 1, 3]))
    # request b reads stream row b under seed[b], whatever the other requests' seeds
    seeds = torch.tensor([11, 12, 13])
    a = run_chain(be, p, x, q, seed=seeds, offset=3)
    c = run_chain(be, p, x, q, seed=torch.tensor([99, 12, 98]), offset=3)
    assert torch.equal(a.tokens[1], c.tokens[1])


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_chain_half_inputs(be, dtype):
    gen = _gen(9)
    b, k, v = 3, 5, 32000
    p, x, q = make_chain(b, k, v, gen, "mixed")
    p, q = p.to(dtype), q.to(dtype)
    run_chain(be, p, x, q, seed=4)
    run_chain(be, p, x.int(), None, seed=5)
    run_chain(be, p, x, q, greedy=True)
    # a float32 target with a half draft (dtypes may differ)
    run_chain(be, p.float(), x, q, seed=6)


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_strided_inputs(be):
    gen = _gen(10)
    b, k, v = 5, 3, 111
    p, x, q = make_chain(b, k + 2, v, gen, "mixed")
    # non-contiguous views (the last dim stays contiguous for p; draft ids strided)
    run_chain(be, p[:, 2:], x[:, 1:-1], q[:, 1:-1], seed=3)
    run_chain(be, p[:, 2:], x.t().contiguous().t()[:, :k], q[:, :k], seed=4)
    run_chain(be, p[::2, 2:], x[::2, :k], q[::2, :k], num_draft=torch.tensor([3, 1, 2]), seed=5)
    # a probability row with a non-unit last stride is made contiguous by the launcher
    run_chain(be, p.transpose(1, 2).contiguous().transpose(1, 2)[:, 2:], x[:, :k], None, seed=6)


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_fast_mode_out_of_range_ids(be):
    gen = _gen(11)
    b, k, v = 6, 4, 111
    p, x, q = make_chain(b, k, v, gen, "mixed")
    x = x.clone()
    x[:, 1] = torch.tensor([v, v + 1000, -2, 2**31 - 1, -(2**31), 2**40])
    nb = torch.randint(-3, v + 3, (v, 3), generator=gen).int()
    with specops.validation(False):
        for dp in (q, None):
            r = run_chain(be, p, x, dp, seed=2)
            assert (r.num_accepted <= 1).all()
            run_chain(be, p, x, dp, seed=3, relax=Relaxation(nb, 0.5))
            run_chain(be, p, x, dp, greedy=True)
        # int64 neighbours are read as int64: ids past int32 are out of range, not wrapped
        nb64 = nb.long()
        nb64[:, 1] = 2**32 + (torch.arange(v) + 1) % v  # would wrap to a real neighbour
        run_chain(be, p, x, q, seed=4, relax=Relaxation(nb64, 2.0))
        # rows without mass: token 0 (the documented fallback)
        r = run_chain(be, torch.zeros(2, k + 1, v), x[:2], None, seed=1)
        assert (r.tokens[:, 0] == 0).all()


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_int64_neighbours_past_int32_stay_out_of_range(be):
    """A LANTERN neighbour id 2^32 + 1 is outside the vocabulary (pool 0), not neighbour 1: with
    p(x) = 0 the draft must be rejected; read as neighbour 1 it would be accepted (pool 0.5)."""
    v = 7
    p = torch.zeros(1, 2, v)
    p[0, :, 1:3] = 0.5
    x = torch.zeros(1, 1, dtype=torch.long)  # p(x) = 0
    nb = torch.full((v, 1), 2**32 + 1, dtype=torch.long)
    u = torch.tensor([[0.1, 0.3]])
    with specops.validation(False):
        r = run_chain(be, p, x, None, relax=Relaxation(nb, 1.0), uniforms=u)
    assert r.num_accepted.tolist() == [0]


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_empty(be):
    gen = _gen(12)
    p, x, q = make_chain(4, 0, 111, gen, "mixed")
    run_chain(be, p, x, q, seed=1)
    run_chain(be, p, x, None, seed=1)
    run_chain(be, p, x, None, greedy=True)
    r = specops.verify_chain(
        torch.rand(0, 3, 5, device=_dev(be)),
        torch.zeros(0, 2, dtype=torch.long, device=_dev(be)),
        None,
        backend=be,
    )
    assert r.tokens.shape == (0, 3) and r.num_accepted.shape == (0,)


@needs_triton
def test_backend_listing_and_auto_choice():
    from specops import _build
    from specops.ops._common import pick_backend

    have = ops_verify.CHAIN.backends
    assert "triton" in have
    got = pick_backend("verify_chain", "auto", torch.device(DEV), have)
    if DEV == "cpu":
        assert got != "triton"  # auto never picks the interpreter
    else:
        assert got == ("cuda" if _build.has_cuda_kernels() else "triton")


@needs_triton
def test_opcheck_triton_backend():
    opcheck_chain("triton", DEV, _gen(14))


# --------------------------------------------------------------------------------------------
# statistical losslessness of the kernel's own output (identity with the reference is tested
# above; this checks the law directly).  Drafts are far from the target (every draft row is its
# target row reversed), so a kernel that mishandles q or the residual is visibly biased; the
# negative controls run the same statistic, on the same inputs and draws, through deliberately
# broken reference variants and must fail it.
# --------------------------------------------------------------------------------------------
STAT_B = 600


def _stat_inputs(gen, b):
    m = Markov(4, 3, gen)
    m.p0 = random_probs(4, generator=gen, sharpness=3.0, zero_frac=0.15)
    m.T = [None] + [
        random_probs(4, 4, generator=gen, sharpness=3.0, zero_frac=0.15) for _ in range(3)
    ]
    m.q0 = m.p0.flip(-1)
    m.Q = [None] + [t.flip(-1) for t in m.T[1:]]
    prev = torch.zeros(b, dtype=torch.long)
    xs, tp, dp = [], [], []
    for i in range(2):
        q = m.draft_row(i, prev)
        xs.append(_draw(q, gen)[:, 0])
        tp.append(m.target_row(i, prev))
        dp.append(q)
        prev = xs[-1]
    tp.append(m.target_row(2, prev))
    nd = torch.randint(0, 3, (b,), generator=gen)  # ragged: 0, 1 or 2 drafts
    return m, torch.stack(tp, 1), torch.stack(xs, 1), torch.stack(dp, 1), nd


def _stat_pvalue(backend, dev):
    gen = _gen(4)
    m, tp, x, dp, nd = _stat_inputs(gen, STAT_B)
    r = specops.verify_chain(
        tp.to(dev), x.to(dev), dp.to(dev), num_draft=nd.to(dev), seed=31, offset=2,
        backend=backend,
    )  # fmt: skip
    seqs = m.complete(r.tokens.cpu(), r.num_accepted.cpu().long() + 1, 3, gen)
    return joint_pvalue(seqs, m)


@needs_triton
def test_chain_is_lossless():
    # joint law of the first three tokens (missing ones completed from the true conditionals)
    assert _stat_pvalue("triton", DEV) > PASS


@pytest.mark.parametrize("broken", ["residual_without_q", "accept_without_q"])
def test_lossless_statistic_has_power(monkeypatch, broken):
    if broken == "residual_without_q":  # on rejection sample from p, not norm(max(p - q, 0))
        monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    else:  # accept iff u < p(x), as if the drafts were deterministic
        acc = rv._accept
        monkeypatch.setattr(rv, "_accept", lambda u, p, q, x, relax: acc(u, p, None, x, relax))
    assert _stat_pvalue("reference", "cpu") < PASS


# --------------------------------------------------------------------------------------------
# ahead-of-time lowering
# --------------------------------------------------------------------------------------------
_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from specops.triton_kernels.grouped import GROUP_SIGNATURE
from specops.triton_kernels.philox import RNG_SIGNATURE
from specops.triton_kernels.verify import _verify_chain_kernel as k

ptrs = dict(target="*fp32", draft="*fp32", tokens="*i64", num_draft="*i64", neighbors="*i32",
            grp=GROUP_SIGNATURE, rng=RNG_SIGNATURE, uniforms="*fp32", out_tokens="*i32",
            out_num_accepted="*i32")
# (draft probs, num_draft, relax, greedy, seed tensor, offset tensor, uniforms, dtype, ids,
#  GSD grouping)
cases = [
    (True, True, False, False, True, True, False, "fp32", "i64", False),
    (False, False, False, False, False, False, False, "bf16", "i32", False),
    (True, False, True, False, False, False, True, "fp16", "i64", False),
    (False, True, False, True, False, False, False, "fp32", "i32", False),
    (True, True, False, False, False, False, True, "bf16", "i64", True),
    (False, False, False, False, True, False, False, "fp32", "i32", True),
]
for has_q, has_nd, relax, greedy, seed_t, off_t, unif, dt, ids, group in cases:
    sig = {n: "i32" for n in k.arg_names}
    sig.update(ptrs)
    sig.update(target="*" + dt, draft="*" + dt, tokens="*" + ids, delta_bits="i64")
    consts = dict(HAS_Q=has_q, HAS_NUM_DRAFT=has_nd, HAS_RELAX=relax, GREEDY=greedy,
                  HAS_SEED_PTR=seed_t, HAS_OFFSET_PTR=off_t, HAS_UNIFORMS=unif,
                  HAS_GROUP=group, BLOCK_VERIFY=False, BLOCK_K=16, BLOCK_NB=8, BLOCK_W=8,
                  GROUP_TILE=1024, TILE=4096)
    sig.update({n: "constexpr" for n in consts})
    src = ASTSource(k, signature=sig, constexprs=consts)
    triton.compile(src, target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=8, enable_fp_fusion=False))
print("compiled")
"""


@needs_triton
def test_triton_kernel_lowers_for_sm90():
    """Ahead-of-time compile for sm_90 (no GPU needed, out of the interpreter): catches lowering
    errors the interpreter does not see (scalar branches, the greedy while loop, float64
    scans, the bitcast of delta, GSD's int64 keys and per-draft walk)."""
    aot_compile(_AOT)
