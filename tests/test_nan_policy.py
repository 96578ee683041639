"""The NaN policy (DESIGN.md, "Rules for every op"), on every backend that runs on the CPU.

In fast mode a NaN, negative or +inf probability counts as zero mass everywhere (sums, acceptance
tests, residuals, inverse CDFs, argmaxes, Gumbel keys, LANTERN pools), and a row left without mass
falls back to the documented token.  So every op on hostile rows must give exactly what the
reference gives on the same rows with those entries zeroed (``reference.mass``), and every
backend must give the reference's tokens.  NaN temperature / top_p / cfg_scale are errors in
validation mode and the neutral value otherwise.  Shapes are tiny: the Triton interpreter is
slow."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import NO_GROUP, random_probs
from helpers import gen as _gen
from helpers import to_device as _to

import specops
from specops import Relaxation, Tree, _build, reference

NAN, INF = float("nan"), float("inf")
V = 7
GPU = torch.cuda.is_available()
# the CUDA kernels: on the GPU, and their device code on the CPU (cuda_sim) where it is built
CUDA = (["cuda"] if GPU else []) + (["cuda_sim"] if _build.has_cuda_sim() else [])


def _dev(be):
    """Where backend ``be`` runs: cuda, and triton when there is a GPU (else the interpreter)."""
    return "cuda" if be == "cuda" or (be == "triton" and GPU) else "cpu"


def mass(p: torch.Tensor) -> torch.Tensor:
    """The policy, written out independently of the library: p where 0 < p < +inf, else 0."""
    p = p.float()
    return torch.where((p > 0) & (p < INF), p, torch.zeros(()))


@pytest.fixture(autouse=True)
def _fast_mode():
    """The policy is the fast-mode behaviour: validation mode rejects these inputs."""
    with specops.validation(False):
        yield


def special_at(n: int) -> list[int]:
    """The flat rows (of n) that ``hostile`` makes special, spread over the batch."""
    step = next(s for s in (5, 7, 11, 13) if math.gcd(s, n) == 1)
    return [(i * step) % n for i in range(min(6, n))]


def hostile(*shape, gen, special=True):
    """Random rows [..., V] with NaN, negative and +inf entries mixed in; with ``special`` the
    flat rows ``special_at(n)`` are: all NaN, all zero, NaN except one positive entry, all +inf,
    all negative, +inf and NaN except one positive entry."""
    p = random_probs(*shape, generator=gen, zero_frac=0.15)
    r = torch.rand(shape, generator=gen)
    p = torch.where(r < 0.12, NAN, p)
    p = torch.where((r >= 0.12) & (r < 0.2), -p - 0.05, p)
    p = torch.where((r >= 0.2) & (r < 0.26), INF, p)
    if special:
        flat = p.reshape(-1, shape[-1])
        n = flat.shape[0]
        rows = [
            torch.full((V,), NAN),
            torch.zeros(V),
            torch.tensor([NAN, NAN, NAN, 0.3, NAN, NAN, NAN]),
            torch.full((V,), INF),
            -torch.rand(V, generator=gen) - 0.1,
            torch.tensor([INF, NAN, -1.0, 0.0, INF, 0.7, NAN]),
        ]
        for i, row in zip(special_at(n), rows):
            flat[i] = row
    return p


def hostile_pq(b, n, gen, with_q):
    """Hostile target rows [b, n, V] and, ``with_q``, hostile draft rows of that shape (else
    None)."""
    p = hostile(b, n, V, gen=gen)
    return p, (hostile(b, n, V, gen=gen) if with_q else None)


def tokens_into(p, gen, hit=0.5):
    """Draft tokens [...] for rows p [..., V]: half of them at a NaN / negative / +inf entry of
    their row when it has one, the rest uniform."""
    v = p.shape[-1]
    bad = ~(mass(p) > 0) & (p != 0)
    score = torch.rand(p.shape, generator=gen) + 2.0 * bad.float()
    x = torch.where(
        torch.rand(p.shape[:-1], generator=gen) < hit,
        score.argmax(-1),
        torch.randint(0, v, p.shape[:-1], generator=gen),
    )
    return x


def eq(a, b):
    if a is None or b is None:
        assert a is None and b is None
        return
    assert torch.equal(a.cpu(), b.cpu()), f"\n{a}\n!=\n{b}"


def fields(r):
    return [getattr(r, f) for f in r._fields] if hasattr(r, "_fields") else list(r)


def check(call, backends, *args):
    """call(backend, *args) on every backend equals the reference's result, and the reference's
    result on the hostile args equals its result on the args passed through ``mass``."""
    want = fields(call("reference", *args))
    clean = [mass(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    for w, c in zip(want, fields(call("reference", *clean))):
        eq(w, c)
    for be in list(backends) + CUDA:
        for w, g in zip(want, fields(call(be, *[_to(a, _dev(be)) for a in args]))):
            eq(g, w)
    return want


# --------------------------------------------------------------------------------------------
# mass itself
# --------------------------------------------------------------------------------------------
def test_mass():
    from specops.reference.sampling import mass

    x = torch.tensor([NAN, -1.0, -0.0, 0.0, 0.25, INF, -INF, 2.0**127])
    assert mass(x).tolist() == [0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0, 2.0**127]


# --------------------------------------------------------------------------------------------
# sample / sample_without_replacement
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sample(seed):
    p = hostile(12, V, gen=_gen(seed))
    want = check(
        lambda be, p: (specops.sample(p, seed=seed, offset=5, backend=be),),
        ["cpu", "triton"],
        p,
    )[0]
    sp = special_at(12)
    assert [int(want[i]) for i in sp] == [0, 0, 3, 0, 0, 5]  # no mass: token 0
    rest = torch.ones(12, dtype=torch.bool)
    rest[sp] = False
    assert bool((mass(p).gather(-1, want[:, None].long())[:, 0] > 0)[rest].all())  # only mass


@pytest.mark.parametrize("be", ["reference", "cpu", "triton"] + CUDA)
def test_sample_single_positive_always_chosen(be):
    p = torch.tensor([[NAN, INF, -2.0, 0.0, 1e-30, NAN, -INF]]).expand(16, -1).contiguous()
    p = p.to(_dev(be))
    assert specops.sample(p, seed=7, backend=be).tolist() == [4] * 16


@pytest.mark.parametrize("k", [1, 3, 9])
def test_sample_without_replacement(k):
    p = hostile(12, V, gen=_gen(10 + k))
    want = check(
        lambda be, p: (specops.sample_without_replacement(p, k, seed=3, offset=1, backend=be),),
        ["cpu"],
        p,
    )[0]
    sp = special_at(12)
    for i in (sp[0], sp[1], sp[3], sp[4]):  # no mass: all -1
        assert (want[i] == -1).all()
    assert want[sp[2], 0] == 3 and (want[sp[2], 1:] == -1).all()
    ok = want >= 0
    assert bool((mass(p).gather(-1, want.clamp(min=0).long()) > 0)[ok].all())


# --------------------------------------------------------------------------------------------
# verify_chain
# --------------------------------------------------------------------------------------------
def _chain(be, p, x, q, relax=None, **kw):
    """verify_chain on backend be's device (inputs moved there)."""
    dev = _dev(be)
    p, x, q, relax = (_to(a, dev) for a in (p, x, q, relax))
    return specops.verify_chain(p, x, q, seed=4, offset=2, relax=relax, backend=be, **kw)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("with_q", [True, False])
def test_verify_chain(seed, with_q):
    gen = _gen(20 + seed)
    b, k = 8, 3
    p = hostile(b, k + 1, V, gen=gen)
    q = hostile(b, k, V, gen=gen) if with_q else None
    x = tokens_into(q if with_q else p[:, :k], gen)
    check(lambda be, p, x, q: _chain(be, p, x, q), ["cpu", "triton"], p, x, q)


@pytest.mark.parametrize("be", ["reference", "cpu", "triton"] + CUDA)
def test_verify_chain_explicit(be):
    """p(x) NaN / +inf / negative: always rejected; q(x) NaN / negative with p(x) > 0: always
    accepted; a residual over NaN entries never draws them."""
    g = torch.tensor([0.5, NAN, 0.5, INF, -1.0, 0.0, 0.0])
    p = torch.stack([g, g]).expand(16, -1, -1).contiguous()  # [16, 2, V], one draft
    for bad in (1, 3, 4):
        x = torch.full((16, 1), bad)
        r = _chain(be, p, x, None)
        assert (r.num_accepted == 0).all() and set(r.tokens[:, 0].tolist()) <= {0, 2}
    q = torch.tensor([NAN, 0.2, -0.5, 0.3, 0.0, NAN, 0.5]).expand(16, 1, -1).contiguous()
    r = _chain(be, p, torch.zeros(16, 1, dtype=torch.long), q)
    assert (r.num_accepted == 1).all()  # q(0) = NaN = 0 < p(0): accepted
    r = _chain(be, p, torch.full((16, 1), 2), q)
    assert (r.num_accepted == 1).all()  # q(2) < 0 counts as 0
    # bonus row NaN except one entry
    p2 = p.clone()
    p2[:, 1] = torch.tensor([NAN, NAN, -3.0, INF, 0.1, NAN, NAN])
    r = _chain(be, p2, torch.zeros(16, 1, dtype=torch.long), q)
    assert (r.tokens[:, 1] == 4).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_verify_chain_greedy(seed):
    gen = _gen(30 + seed)
    p = hostile(8, 4, V, gen=gen)
    x = torch.where(
        torch.rand(8, 3, generator=gen) < 0.6,
        mass(p[:, :3]).argmax(-1),
        tokens_into(p[:, :3], gen),
    )
    want = check(lambda be, p, x: _chain(be, p, x, None, greedy=True), ["cpu", "triton"], p, x)
    # the argmax of mass(p): never a NaN / +inf entry; a row without mass gives 0
    row = torch.tensor([[0.1, NAN, 0.2, INF, 0.15, -1.0, 0.0]])
    r = _chain("reference", row[None].expand(1, 2, -1), torch.tensor([[2]]), None, greedy=True)
    assert r.tokens.tolist() == [[2, 2]]
    del want


@pytest.mark.parametrize("with_q", [True, False])
def test_verify_chain_relaxed(with_q):
    gen = _gen(40)
    b, k = 8, 3
    p = hostile(b, k + 1, V, gen=gen, special=False)
    q = hostile(b, k, V, gen=gen, special=False) if with_q else None
    x = tokens_into(p[:, :k], gen, hit=0.2)
    nb = torch.stack([torch.randperm(V, generator=gen)[:4] for _ in range(V)]).int()
    relax = Relaxation(nb, 0.6)
    check(lambda be, p, x, q: _chain(be, p, x, q, relax=relax), ["cpu", "triton"], p, x, q)


def test_lantern_pool_skips_nan_neighbours():
    """pool(x) sums mass(p) of the neighbours: a NaN neighbour counts 0 and does not end the
    pool (with NaN cumulated, every later neighbour would drop out)."""
    p = torch.tensor([[[0.0, NAN, 0.3, 0.2, 0.5, 0.0, 0.0], [1 / 7] * 7]])
    nb = torch.tensor([[1, 2, 3, -1]] + [[-1, -1, -1, -1]] * (V - 1)).int()
    u = torch.full((1, 2), 0.45)
    for be in ["reference", "cpu", "triton"] + CUDA:
        d = _dev(be)
        r = specops.verify_chain(
            p.to(d),
            torch.tensor([[0]], device=d),
            None,
            relax=Relaxation(nb.to(d), 0.6),
            uniforms=u.to(d),
            backend=be,
        )
        assert r.num_accepted.tolist() == [1], be  # 0.45 < 0 + 0.3 + 0.2


# --------------------------------------------------------------------------------------------
# verify_tree
# --------------------------------------------------------------------------------------------
TREE = Tree.from_parents(torch.tensor([-1, 0, 0, 0, 1, 1, 2, 4]))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", ["q", "q_wor", "none", "greedy"])
def test_verify_tree(seed, mode):
    gen = _gen(50 + seed)
    b, n = 8, 8
    p = hostile(b, n, V, gen=gen)
    q = hostile(b, n, V, gen=gen) if mode in ("q", "q_wor") else None
    par = TREE.parents.reshape(-1).long().clamp(min=0)
    rows = (q if q is not None else p)[:, par]  # row of each node's parent: its draft dist
    x = tokens_into(rows, gen)
    if mode == "greedy":
        x = torch.where(torch.rand(b, n, generator=gen) < 0.6, mass(p[:, par]).argmax(-1), x)

    def call(be, p, x, q):
        return specops.verify_tree(
            p,
            TREE.to(p.device),
            x,
            q,
            without_replacement=mode == "q_wor",
            greedy=mode == "greedy",
            seed=6,
            backend=be,
        )

    check(call, ["cpu"], p, x, q)


# --------------------------------------------------------------------------------------------
# verify_jacobi
# --------------------------------------------------------------------------------------------
def _jacobi_grid(test):
    """The verify_jacobi tests' grid: seed x continue_after_reject x with_q."""
    for name in ("with_q", "cont"):
        test = pytest.mark.parametrize(name, [True, False])(test)
    return pytest.mark.parametrize("seed", [0, 1])(test)


@_jacobi_grid
def test_verify_jacobi_chain(seed, cont, with_q):
    gen = _gen(60 + seed)
    b, L = 6, 4
    p, q = hostile_pq(b, L, gen, with_q)
    x = tokens_into(q if with_q else p, gen)

    def call(be, p, x, q):
        return specops.verify_jacobi(
            p, x, q, continue_after_reject=cont, num_candidates=3, seed=8, backend=be
        )

    want = check(call, ["cpu"], p, x, q)
    cands = want[3]
    ok = cands >= 0
    assert bool((mass(p).gather(-1, cands.clamp(min=0).long()) > 0)[ok].all())


JTREE = Tree.kary_chain(2, 3, 9)


@_jacobi_grid
def test_verify_jacobi_tree(seed, cont, with_q):
    from specops.ops.jacobi import JACOBI

    gen = _gen(70 + seed)
    b, L = 5, 9
    p, q = hostile_pq(b, L, gen, with_q)
    par = JTREE.parents.reshape(-1).long().clamp(min=0)
    x = tokens_into((q if with_q else p)[:, par], gen)

    def call(be, p, x, q):
        return specops.verify_jacobi(
            p,
            x,
            q,
            tree=JTREE.to(p.device),
            continue_after_reject=cont,
            num_candidates=2,
            seed=9,
            backend=be,
        )

    want = check(call, ["cpu"], p, x, q)
    # the CUDA kernel's plan (speculative continuation per node), run by the CPU twin
    u = reference.verify.row_uniforms(9, 0, b, 2 * L + L * 2)  # 2 candidates
    got = JACOBI.launch(
        "cpu", p, x, q, JTREE.first_child, JTREE.next_sibling, cont, 2,
        (None, 0, None, 0), None, 0.0, *NO_GROUP, u, emulate_cuda=True,
    )  # fmt: skip
    for w, g in zip(want, got):
        if w is not None:
            eq(g, w)


# --------------------------------------------------------------------------------------------
# path_acceptance
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("with_q", [True, False])
def test_path_acceptance(with_q):
    gen = _gen(80)
    b, n = 8, 8
    p, q = hostile_pq(b, n, gen, with_q)
    par = TREE.parents.reshape(-1).long().clamp(min=0)
    x = tokens_into(p[:, par], gen)

    def call(be, p, q, x):
        return specops.path_acceptance(p, q, TREE.to(p.device), x, backend=be)

    kappa, exp_len = check(call, ["cpu"], p, q, x)
    assert bool(torch.isfinite(kappa).all() and torch.isfinite(exp_len).all())
    assert bool(((kappa >= 0) & (kappa <= 1)).all())


# --------------------------------------------------------------------------------------------
# probs_from_logits: NaN temperature / top_p / cfg_scale
# --------------------------------------------------------------------------------------------
def _probs(be, logits, **kw):
    """probs_from_logits on backend be's device; the result back on the CPU."""
    dev = _dev(be)
    kw = {k: _to(a, dev) for k, a in kw.items()}
    return specops.probs_from_logits(logits.to(dev), backend=be, **kw).cpu()


def _close(got, want):
    assert torch.equal(got > 0, want > 0), "kept sets differ"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("be", ["reference", "triton"])
def test_probs_nan_parameters_are_neutral(be):
    gen = _gen(90)
    b, v = 4, 16
    logits = torch.randn(b, 2, v, generator=gen) * 2
    uncond = torch.randn(b, 2, v, generator=gen) * 2
    t = torch.tensor([0.7, NAN, 1.3, NAN])
    tp = torch.tensor([NAN, 0.6, NAN, 0.9])
    s = torch.tensor([2.0, NAN, NAN, 1.5])
    got = _probs(be, logits, temperature=t, top_p=tp, cfg_scale=s, uncond_logits=uncond)
    for i in range(b):
        ti = 1.0 if math.isnan(t[i]) else float(t[i])
        pi = 1.0 if math.isnan(tp[i]) else float(tp[i])
        kw = dict(temperature=ti, top_p=pi)
        if not math.isnan(s[i]):
            kw.update(cfg_scale=float(s[i]), uncond_logits=uncond[i : i + 1])
        want = _probs("reference", logits[i : i + 1], **kw)
        _close(got[i : i + 1], want)
    assert bool(torch.isfinite(got).all())


@pytest.mark.parametrize("be", ["reference", "cpu", "triton", "auto"])
@pytest.mark.parametrize("name", ["temperature", "top_p", "cfg_scale"])
@pytest.mark.parametrize("value", [NAN, math.inf, -math.inf])
def test_probs_non_finite_numbers_raise_in_every_mode(be, name, value):
    """A Python number is checked for free: NaN and infinities are an error on every backend,
    validation mode or not (only tensor entries follow the NaN policy above)."""
    if be == "triton" and not _build.has_triton():
        pytest.skip("triton not installed")
    logits = torch.randn(2, 8)
    extra = {"uncond_logits": torch.randn(2, 8)} if name == "cfg_scale" else {}
    with specops.validation(False), pytest.raises(ValueError, match=name):
        _probs(be, logits, **{name: value}, **extra)


@pytest.mark.parametrize("name", ["temperature", "top_p", "cfg_scale"])
def test_probs_nan_parameters_raise_in_validation_mode(name):
    logits = torch.randn(2, 8)
    extra = {"uncond_logits": torch.randn(2, 8)} if name == "cfg_scale" else {}
    with specops.validation():
        for val in (NAN, torch.tensor([0.5, NAN])):
            with pytest.raises(ValueError, match=name):
                specops.probs_from_logits(logits, **{name: val}, **extra)


# --------------------------------------------------------------------------------------------
# attention: IEEE (NaN in, NaN out) on every backend
# --------------------------------------------------------------------------------------------
def _attention_with_nans():
    """Small tree attention inputs with NaN in q, in a visible K row, in a visible V row and in
    cache rows no query reads; returns (args, NaN pattern of out, NaN pattern of lse)."""
    gen = _gen(100)
    b, n, hq, hkv, d, cap = 2, 4, 2, 1, 16, 16
    tree = Tree.from_parents(torch.tensor([-1, 0, 0, 1]))
    L = torch.tensor([5, 3], dtype=torch.int32)
    q = torch.randn(b, n, hq, d, generator=gen)
    k = torch.randn(b, cap, hkv, d, generator=gen)
    v = torch.randn(b, cap, hkv, d, generator=gen)
    q[0, 1, 0, 3] = NAN  # query (0, 1), head 0 only
    k[1, int(L[1]) + 2, 0, 5] = NAN  # tree slot 2 of request 1: seen by node 2 only
    v[0, 2, 0, 0] = NAN  # prefix position 2 of request 0: every query of request 0, dim 0
    k[0, 12:, 0] = NAN  # rows past the prefix and the tree: never read
    v[1, 10:, 0] = NAN
    want = torch.zeros(b, n, hq, d, dtype=torch.bool)
    want[0, 1, 0, :] = True
    want[1, 2, :, :] = True
    want[0, :, :, 0] = True
    want_lse = torch.zeros(b, n, hq, dtype=torch.bool)  # NaN scores: NaN in q or in K
    want_lse[0, 1, 0] = True
    want_lse[1, 2, :] = True
    return (q, k, v, L, tree), want, want_lse


@pytest.mark.parametrize("be", ["reference", "triton", "cpu"])
def test_tree_attention_propagates_nan(be):
    """NaN in q, in a visible K row or in a visible V row gives NaN outputs exactly where IEEE
    arithmetic puts them (every query that reads it); NaN in cache rows that no query reads
    stays out.  The backends agree on every other value."""
    args, want, want_lse = _attention_with_nans()
    out, lse = specops.tree_attention(
        *[_to(a, _dev(be)) for a in args], return_lse=True, backend=be
    )
    out, lse = out.cpu(), lse.cpu()
    assert torch.equal(torch.isnan(out), want)
    ref, ref_lse = specops.tree_attention(*args, return_lse=True, backend="reference")
    torch.testing.assert_close(out, ref, equal_nan=True, atol=2e-6, rtol=1e-5)
    assert torch.equal(torch.isnan(ref_lse), want_lse)
    ok = ~want_lse
    torch.testing.assert_close(lse[ok], ref_lse[ok], atol=2e-6, rtol=1e-5)


def test_tree_attention_lse_nan_triton():
    args, _, want_lse = _attention_with_nans()
    _, lse = specops.tree_attention(
        *[_to(a, _dev("triton")) for a in args], return_lse=True, backend="triton"
    )
    lse = lse.cpu()
    assert torch.equal(torch.isnan(lse), want_lse)


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_non_finite_numbers_are_errors_in_every_mode(value):
    """tree_attention's sm_scale and LANTERN's delta given as Python numbers: NaN and infinities
    raise everywhere, validation mode or not."""
    g = _gen(5)
    tree = Tree.kary(2, 2)
    q, k = torch.randn(1, 3, 2, 4, generator=g), torch.randn(1, 8, 1, 4, generator=g)
    L = torch.tensor([2], dtype=torch.int32)
    p, x = random_probs(1, 3, 6, generator=g), torch.randint(0, 6, (1, 2), generator=g)
    nb = torch.randint(0, 6, (6, 2), generator=g)
    with specops.validation(False):
        for be in ("reference", "cpu", "auto"):
            with pytest.raises(ValueError, match="sm_scale"):
                specops.tree_attention(q, k, k, L, tree, sm_scale=value, backend=be)
            with pytest.raises(ValueError, match="relax.delta"):
                specops.verify_chain(p, x, relax=Relaxation(nb, value), backend=be)
