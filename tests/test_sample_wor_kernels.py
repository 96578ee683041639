"""sample_without_replacement kernels (C++ CPU twin "cpu", CUDA "cuda") against the reference.

The keys are float32 ``log(p) - log(-log(u))``.  The reference's torch.log (SLEEF, <= 1 ulp) and
the kernels' logf (glibc / CUDA, <= 1 ulp) may differ in the last bit, so two keys closer than a
few ulps can come out in either order: ids agree exactly except on such near-ties.  The tests
require exact agreement on the vast majority of rows and check that every disagreement is a
near-tie of the reference's own keys.  With explicit uniforms that make keys tie exactly, both
sides break the tie towards the lower id."""

from __future__ import annotations

import pytest
import torch
from helpers import KERNEL_BACKENDS, one_torch_thread_fixture, random_probs
from test_reference_sample_wor import joint_pvalue

import specops
from specops.reference import sample_without_replacement as wor
from specops.reference.philox import row_uniforms
from specops.reference.sampling import rows_per_seed

PASS = 1e-3
BACKENDS = KERNEL_BACKENDS

_one_torch_thread = one_torch_thread_fixture()


def _dev(be):
    return "cuda" if be == "cuda" else "cpu"


def _keys(p2, u2):
    keys = torch.log(p2.float().clamp_min(0)) - torch.log(-torch.log(u2))
    return torch.where(p2 > 0, keys, float("-inf"))


def check_agreement(be, p, k, *, seed=0, offset=0, uniforms=None, max_mismatch_frac=0.01):
    """Kernel vs reference; returns the number of rows that differ (all near-ties)."""
    dev = _dev(be)
    kw = dict(seed=seed, offset=offset)
    if uniforms is not None:
        kw = dict(uniforms=uniforms)
    to = {n: (t.to(dev) if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    got = specops.sample_without_replacement(p.to(dev), k, backend=be, **to).cpu()
    want = wor(p, k, **kw)
    assert got.dtype == torch.int32 and got.shape == want.shape
    v = p.shape[-1]
    g2, w2 = got.reshape(-1, k), want.reshape(-1, k)
    bad = (g2 != w2).any(-1).nonzero()[:, 0]
    if bad.numel() == 0:
        return 0
    assert bad.numel() <= max(1, max_mismatch_frac * g2.shape[0]), f"{bad.numel()} rows differ"
    p2 = p.reshape(-1, v).float()
    r = p2.shape[0]
    if uniforms is not None:
        u2 = uniforms.reshape(r, v).float()
    else:
        u2 = row_uniforms(seed, offset, r, v, rows_per_seed=rows_per_seed(seed, r))
    keys = _keys(p2, u2)
    for i in bad.tolist():
        j = int((g2[i] != w2[i]).nonzero()[0, 0])  # first differing rank
        a, b = int(g2[i, j]), int(w2[i, j])
        assert a >= 0 and b >= 0 and p2[i, a] > 0, (i, j, a, b)
        ka, kb = float(keys[i, a]), float(keys[i, b])
        assert abs(ka - kb) <= 1e-5 * max(1.0, abs(kb)), (i, j, a, b, ka, kb)  # a near-tie
    return bad.numel()


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize(
    "shape,k",
    [
        ((1, 7), 1),
        ((1, 7), 3),
        ((3, 111), 4),
        ((17, 111), 8),
        ((17, 1000), 3),
        ((2, 32000), 8),
        ((1, 65536), 3),
        ((3, 5, 111), 13),
        ((2, 200), 64),
    ],
)
def test_matches_reference(be, shape, k):
    gen = torch.Generator().manual_seed(hash((shape, k)) % 2**31)
    for sharp, zf in ((1.0, 0.0), (3.0, 0.3), (12.0, 0.0)):
        p = random_probs(*shape, generator=gen, sharpness=sharp, zero_frac=zf)
        check_agreement(be, p, k, seed=int(torch.randint(0, 2**40, (1,), generator=gen)))


@pytest.mark.parametrize("be", BACKENDS)
def test_many_rows_agree_exactly(be):
    # the "vast majority": over 2000 rows at V = 1000 at most 1% may differ (near-ties only)
    gen = torch.Generator().manual_seed(1)
    p = random_probs(2000, 1000, generator=gen, sharpness=2.0, zero_frac=0.2)
    n = check_agreement(be, p, 8, seed=5, offset=7)
    assert n <= 20


def test_cpu_skips_keep_the_top_k():
    """The CPU twin skips the logs of entries whose 1 - u rules them out and the Philox draw of
    entries too small to get in whatever their u (sample.cpp gumbel_topk_host): on wide rows with
    a long tail of tiny probabilities (most entries skipped) the ids still equal the reference."""
    gen = torch.Generator().manual_seed(3)
    for sharp in (3.0, 8.0):
        p = random_probs(12, 65536, generator=gen, sharpness=sharp)
        for k in (1, 3, 40):
            assert check_agreement("cpu", p, k, seed=11 + k) <= 1


@pytest.mark.parametrize("be", BACKENDS)
def test_seeds_offsets_uniforms(be):
    gen = torch.Generator().manual_seed(2)
    p = random_probs(4, 3, 300, generator=gen, zero_frac=0.2)
    check_agreement(be, p, 5, seed=torch.tensor([1, 2, 3, 4]), offset=torch.tensor(2**33 + 1))
    check_agreement(be, p, 5, seed=torch.tensor(9), offset=torch.tensor([3]))
    check_agreement(be, p, 5, seed=-3, offset=2**40)
    check_agreement(be, p, 5, uniforms=torch.rand(4, 3, 300, generator=gen))
    # request 2 under seed 3 alone: the same draws as inside the batch only through its rows
    dev = _dev(be)
    s = torch.tensor([1, 2, 3, 4], device=dev)
    a = specops.sample_without_replacement(p.to(dev), 5, seed=s, offset=7, backend=be)
    b = specops.sample_without_replacement(p.to(dev), 5, seed=s, offset=7, backend=be)
    assert torch.equal(a, b)


@pytest.mark.parametrize("be", BACKENDS)
def test_padding_zero_rows_and_large_k(be):
    dev = _dev(be)
    p = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0], [0.0] * 5, [0.2] * 5])
    got = specops.sample_without_replacement(p.to(dev), 3, seed=1, backend=be).cpu()
    assert torch.equal(got, wor(p, 3, seed=1))
    assert (got[0, 2] == -1) and sorted(got[0, :2].tolist()) == [1, 3]
    assert (got[1] == -1).all() and sorted(got[2].tolist()) == sorted(set(got[2].tolist()))
    got = specops.sample_without_replacement(p.to(dev), 9, seed=1, backend=be).cpu()
    assert torch.equal(got, wor(p, 9, seed=1)) and (got[:, 5:] == -1).all()
    with specops.validation(False):  # negative entries are never chosen
        q = torch.tensor([[-1.0, 0.3, -0.5, 0.7]])
        assert torch.equal(
            specops.sample_without_replacement(q.to(dev), 4, seed=2, backend=be).cpu(),
            wor(q, 4, seed=2),
        )


@pytest.mark.parametrize("be", BACKENDS)
def test_exact_ties_and_unit_uniforms(be):
    dev = _dev(be)
    v = 600
    p = torch.full((2, v), 1.0 / v)
    u = torch.full((2, v), 0.5)  # every key equal: lowest ids first
    got = specops.sample_without_replacement(p.to(dev), 10, uniforms=u.to(dev), backend=be).cpu()
    assert torch.equal(got, wor(p, 10, uniforms=u))
    assert got[0].tolist() == list(range(10))
    # u = 1.0 (the stream's largest value rounds to it): key = +inf, chosen first, ties by id
    u[:, [17, 300, 5]] = 1.0
    got = specops.sample_without_replacement(p.to(dev), 4, uniforms=u.to(dev), backend=be).cpu()
    assert torch.equal(got, wor(p, 4, uniforms=u)) and got[0].tolist() == [5, 17, 300, 0]


@pytest.mark.parametrize("be", ["reference", *BACKENDS])
def test_zero_and_nan_uniforms_count_as_the_smallest(be):
    # a caller's u below 2^-24 (0, NaN) counts as 2^-24, Philox's smallest: an entry with mass
    # keeps a finite key and is chosen before -1 padding, on every backend alike
    dev = _dev(be)
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0], [0.25] * 5, [0.0, 0.5, 0.0, 0.5, 0.0]])
    u = torch.zeros(3, 5)
    u[1, 3] = float("nan")
    u[2, 3] = 0.5
    with specops.validation(False):  # NaN is outside [0, 1]: validation mode rejects it
        got = specops.sample_without_replacement(p.to(dev), 4, uniforms=u.to(dev), backend=be)
    got = got.cpu()
    # equal u: keys rank by p (ties by id); row 2: u = 0.5 beats u = 2^-24 at equal p
    assert got.tolist() == [[2, 3, 0, -1], [0, 1, 2, 3], [3, 1, -1, -1]]
    small = torch.full((3, 5), 2.0**-24)
    assert torch.equal(got, wor(p, 4, uniforms=small.where(u.isnan() | (u == 0), u)))


@pytest.mark.parametrize("be", ["reference", *BACKENDS])
def test_uniforms_above_one_count_as_one(be):
    """Issue 47: a caller's u above 1 (+inf included) counts as 1 on every backend (key +inf:
    first, ties by id), never a NaN key that put -1 before valid ids (the reference) or
    disagreed between backends; validation mode rejects u outside [0, 1], naming it."""
    dev = _dev(be)
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.2], [0.25] * 5, [0.0, 0.5, 0.0, 0.5, 0.0]])
    u = torch.full((3, 5), 0.5)
    u[0, 4] = 1.5
    u[1, [3, 1]] = float("inf")
    u[2, 3] = 2.0
    with specops.validation(False):
        got = specops.sample_without_replacement(p.to(dev), 4, uniforms=u.to(dev), backend=be)
    assert got.cpu().tolist() == [[4, 2, 3, 0], [1, 3, 0, 2], [3, 1, -1, -1]]
    assert torch.equal(got.cpu(), wor(p, 4, uniforms=u.clamp_max(1.0)))
    for bad in (1.5, float("inf"), -0.5, float("nan")):
        u2 = torch.full((3, 5), 0.5)
        u2[1, 2] = bad
        with pytest.raises(ValueError, match=r"uniforms must be in \[0, 1\]"):
            specops.sample_without_replacement(p.to(dev), 4, uniforms=u2.to(dev), backend=be)


@pytest.mark.parametrize("be", BACKENDS)
def test_top_keys_in_one_thread(be):
    # the heavy entries sit at stride 256 (one CUDA thread owns all of them): forces the
    # block merge to refill from a new pass when k exceeds the per-thread list
    v = 256 * 40
    p = torch.full((3, v), 1e-6)
    p[:, ::256] = 1.0
    p = p / p.sum(-1, keepdim=True)
    for k in (8, 9, 20, 45):
        check_agreement(be, p, k, seed=k)


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs(be, dtype):
    gen = torch.Generator().manual_seed(3)
    p = random_probs(5, 2000, generator=gen, zero_frac=0.3).to(dtype)
    check_agreement(be, p, 6, seed=4)


def test_cpu_draws_follow_sequential_sampling_without_replacement():
    p = random_probs(5, generator=torch.Generator().manual_seed(0), sharpness=1.5)
    draws = specops.sample_without_replacement(p.expand(30000, -1), 3, seed=11, backend="cpu")
    assert joint_pvalue(draws, p) > PASS
    # negative control on the same statistic: the first three ids in descending p are not a
    # sample of the law
    top = torch.sort(p, descending=True).indices[:3].expand(30000, -1)
    assert joint_pvalue(top, p) < PASS


@pytest.mark.parametrize("be", BACKENDS)
def test_opcheck_compiled_backends(be):
    p = random_probs(3, 40, generator=torch.Generator().manual_seed(0)).to(_dev(be))
    torch.library.opcheck(
        torch.ops.specops.sample_without_replacement.default,
        (p, 3, None, 1, None, 2, None, be),
        test_utils=("test_schema", "test_faketensor"),
    )
