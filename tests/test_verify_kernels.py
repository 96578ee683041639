"""The compiled verification kernels (C++ CPU twin "cpu", CUDA "cuda") against the reference,
token for token, on fresh random inputs; and statistical losslessness of the CPU twin.

Identity is exact: the kernels replicate the reference's float32 acceptance tests, its float64
normalisation rounded to float32 per entry and its float64 inverse-CDF sums; summation order only
differs at the 1e-16 level, which random inputs never hit.  The reference always runs on the CPU
(the ground truth); CUDA cases are marked ``gpu`` and run wherever a GPU exists."""

from __future__ import annotations

import pytest
import torch
from helpers import KERNEL_BACKENDS, NO_GROUP, one_torch_thread_fixture, random_probs
from helpers import gen as _gen
from helpers import to_device as _to
from verify_stats import (
    PASS,
    TREE_PARENTS,
    chain_inputs,
    joint_pvalue,
    random_parents,
    tree_inputs,
)

import specops
from specops import Relaxation, Tree
from specops.reference.philox import row_uniforms

BACKENDS = KERNEL_BACKENDS

_one_torch_thread = one_torch_thread_fixture()


def _dev(be):
    """Where backend ``be`` runs: cuda on the GPU, triton on the GPU when there is one (else in
    the interpreter on the CPU), cpu and reference on the CPU."""
    gpu = be == "cuda" or (be == "triton" and torch.cuda.is_available())
    return "cuda" if gpu else "cpu"


def case_rng(seed, b):
    """A token-identity case's generator and its per-request seeds [b] (any 62-bit value)."""
    gen = _gen(seed)
    return gen, torch.randint(0, 2**62, (b,), generator=gen)


def _mix(p, gen, w=0.6):
    """A draft close to p (so that prefixes get accepted): w * p + (1 - w) * random."""
    r = random_probs(*p.shape, generator=gen, sharpness=2.0)
    return (w * p + (1 - w) * r) / (w * p + (1 - w) * r).sum(-1, keepdim=True)


def _draw_rows(q, gen):
    """One draw per row of q [..., V] (torch's sampler)."""
    v = q.shape[-1]
    return torch.multinomial(q.reshape(-1, v).double(), 1, generator=gen).reshape(q.shape[:-1])


# --------------------------------------------------------------------------------------------
# chain
# --------------------------------------------------------------------------------------------
def make_chain(b, k, v, gen, kind):
    """target [B, K+1, V], drafts [B, K], draft probs [B, K, V] for one scenario."""
    sharp = {"one_hot": 1.0, "near_one_hot": 12.0}.get(kind, 2.0)
    p = random_probs(b, k + 1, v, generator=gen, sharpness=sharp, zero_frac=0.25 if v > 2 else 0)
    if kind == "one_hot":
        p = torch.nn.functional.one_hot(p.argmax(-1), v).float()
    q = _mix(p[:, :k], gen) if k else p[:, :0]
    x = _draw_rows(q, gen) if k else torch.zeros(b, 0, dtype=torch.long)
    if kind in ("one_hot", "near_one_hot") and k:
        am = p[:, :k].argmax(-1)
        x = torch.where(torch.rand(b, k, generator=gen) < 0.7, am, x)
    if kind == "zero_q" and k:
        # drafts of draft probability 0: accepted iff p(x) > 0 (u * 0 < p(x))
        z = torch.rand(b, k, generator=gen) < 0.4
        q = torch.where(z[..., None] & (torch.arange(v) == x[..., None]), 0.0, q)
        q = q / q.sum(-1, keepdim=True).clamp_min(1e-30)
    if kind == "all_rejected" and k:
        # p(x_i) = 0 for every draft: every row rejects its first draft
        hit = torch.arange(v) == x[..., None]
        pk = torch.where(hit, 0.0, p[:, :k])
        p = torch.cat([pk / pk.sum(-1, keepdim=True).clamp_min(1e-30), p[:, k:]], 1)
    return p.float(), x, q.float()


def run_chain(be, p, x, q, **kw):
    dev = _dev(be)
    got = specops.verify_chain(
        _to(p, dev), _to(x, dev), _to(q, dev), backend=be, **{k: _to(v, dev) for k, v in kw.items()}
    )
    want = specops.verify_chain(p, x, q, backend="reference", **kw)
    assert got.tokens.dtype == torch.int32 and got.num_accepted.dtype == torch.int32
    assert got.tokens.shape == want.tokens.shape
    assert torch.equal(got.tokens.cpu(), want.tokens), (got.tokens, want.tokens)
    assert torch.equal(got.num_accepted.cpu(), want.num_accepted)
    return want


def opcheck_chain(be, dev, gen):
    """torch.library.opcheck (schema, fake tensors) of verify_chain's op on backend ``be``: a
    relaxed chain of 3 requests, K = 4, V = 111 drawn from ``gen``, on ``dev``."""
    p, x, q = make_chain(3, 4, 111, gen, "mixed")
    nb = torch.randint(-1, 111, (111, 2), generator=gen).int()
    p, x, q, nb = p.to(dev), x.to(dev), q.to(dev), nb.to(dev)
    torch.library.opcheck(
        torch.ops.specops.verify_chain.default,
        (p, x, q, None, None, 1, None, 0, nb, 0.1, *NO_GROUP, False, None, False, be),
        test_utils=("test_schema", "test_faketensor"),
    )


# The chain kernels' token-identity tests (cpu, triton, cuda) are in test_verify_chain_kernels.py.


# --------------------------------------------------------------------------------------------
# tree
# --------------------------------------------------------------------------------------------
def _sibling_rank(par):
    """rank of each node among its siblings (index order), [B, N]."""
    n = par.shape[1]
    same = par[:, :, None] == par[:, None, :]
    earlier = torch.arange(n)[None, :] < torch.arange(n)[:, None]  # [c, c']: c' < c
    return (same & earlier[None]).sum(-1)


def make_tree(b, n, v, gen, *, kind, shape, pad=0.0):
    """(target, Tree, tokens, draft) with children drawn from their parent's draft row:
    kind 'iid', 'wor' (siblings without replacement), 'det' (argmax-ish fixed tokens)."""
    if shape == "random":
        par = random_parents(b, n, gen)
    elif shape == "random1":
        par = random_parents(1, n, gen).expand(b, -1)
    elif shape == "chain":
        par = torch.arange(-1, n - 1)[None].expand(b, -1)
    else:  # "kary:k:d"
        _, kk, d = shape.split(":")
        par = Tree.kary(int(kk), int(d)).parents.long().expand(b, -1)
        assert par.shape[1] == n
    tree = Tree.from_parents(par if shape in ("random",) else par[:1])
    p = random_probs(b, n, v, generator=gen, sharpness=2.0, zero_frac=0.25 if v > 2 else 0)
    q = _mix(p, gen, 0.5)
    pc = par.clamp(min=0)
    rows = torch.arange(b)[:, None]
    if kind == "wor":
        g = -torch.log(-torch.log(torch.rand(b, n, v, generator=gen)))
        perm = torch.sort(torch.log(q) + g, -1, descending=True).indices  # [B, N, V]
        rank = _sibling_rank(par)
        tok = perm[rows, pc, rank.clamp(max=v - 1)]
        tok = torch.where(rank < v, tok, -1)
    else:
        tok = _draw_rows(q[rows, pc], gen)
        if kind == "det":
            am = p[rows, pc].argmax(-1)
            tok = torch.where(torch.rand(b, n, generator=gen) < 0.5, am, tok)
    if pad:
        tok = torch.where(torch.rand(b, n, generator=gen) < pad, -1, tok)
    tok[:, 0] = -7  # ignored
    return p.float(), tree, tok, (None if kind == "det" else q.float())


def run_tree(be, p, tree, tok, q, **kw):
    dev = _dev(be)
    got = specops.verify_tree(
        _to(p, dev),
        _to(tree, dev),
        _to(tok, dev),
        _to(q, dev),
        backend=be,
        **{k: _to(v, dev) for k, v in kw.items()},
    )
    want = specops.verify_tree(p, tree, tok, q, backend="reference", **kw)
    for name, g, w in zip(("path", "tokens", "num_accepted"), got, want):
        assert g.dtype == torch.int32 and g.shape == w.shape, name
        assert torch.equal(g.cpu(), w), (name, g, w)
    return want


TREE_CASES = [
    (1, 1, 7, "chain"),
    (3, 8, 111, "random"),
    (17, 64, 7, "random"),
    (3, 64, 111, "random1"),
    (17, 13, 111, "kary:3:3"),
    (3, 63, 7, "kary:2:6"),
    (3, 16, 32000, "random"),
    (1, 12, 65536, "random"),
    (3, 21, 111, "kary:4:3"),
    (3, 32, 111, "chain"),
]


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("b,n,v,shape", TREE_CASES)
def test_tree_matches_reference(be, b, n, v, shape):
    gen, seeds = case_rng(b * 7919 + n * 31 + v, b)
    big = v >= 32000
    for kind in ("iid", "wor", "det"):
        p, tree, tok, q = make_tree(b, n, v, gen, kind=kind, shape=shape, pad=0.1)
        for wor in (False, True):
            if big and wor != (kind == "wor") and kind != "det":
                continue
            run_tree(be, p, tree, tok, q, without_replacement=wor, seed=int(seeds[0] % 2**31))
            if not big:
                run_tree(be, p, tree, tok, q, without_replacement=wor, seed=seeds, offset=11)
        run_tree(be, p, tree, tok, q, greedy=True)


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_rejections_are_exercised(be):
    # many rejected siblings in a row (wide root, drafts of low target mass): the workspace path
    gen = _gen(20)
    b, n, v = 17, 40, 111
    par = torch.zeros(b, n, dtype=torch.long)
    par[:, 0] = -1
    par[:, 30:] = torch.arange(29, n - 1)  # a chain below node 29
    tree = Tree.from_parents(par[:1])
    p = random_probs(b, n, v, generator=gen, sharpness=3.0, zero_frac=0.5)
    q = random_probs(b, n, v, generator=gen, sharpness=3.0)
    tok = _draw_rows(q[:, :1].expand(-1, n, -1), gen)
    for wor in (False, True):
        for dp in (q, None):
            r = run_tree(be, p, tree, tok, dp, without_replacement=wor, seed=5)
    assert (r.num_accepted == 0).any() and (r.num_accepted > 0).any()


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_one_hot_and_zero_mass_targets(be):
    gen = _gen(21)
    b, v = 17, 9
    n = len(TREE_PARENTS)
    tree = Tree.from_parents(TREE_PARENTS)
    hot = torch.randint(0, v, (b, n), generator=gen)
    p = torch.nn.functional.one_hot(hot, v).float()
    par = torch.tensor(TREE_PARENTS).clamp(min=0)
    tok = torch.where(
        torch.rand(b, n, generator=gen) < 0.6,
        hot[:, par],
        torch.randint(0, v, (b, n), generator=gen),
    )
    q = random_probs(b, n, v, generator=gen, zero_frac=0.3)
    for dp in (q, None):
        for wor in (False, True):
            run_tree(be, p, tree, tok, dp, without_replacement=wor, seed=3)
    # near-one-hot targets, and rows whose draft mass is all on rejected children
    p = random_probs(b, n, v, generator=gen, sharpness=15.0)
    q1 = torch.nn.functional.one_hot(tok[:, 1:4], v).float().sum(1, keepdim=True)
    q1 = (q1 / q1.sum(-1, keepdim=True)).expand(-1, n, -1).contiguous()
    for dp in (q, q1, None):
        for wor in (False, True):
            run_tree(be, p, tree, tok, dp, without_replacement=wor, seed=4)
    with specops.validation(False):
        run_tree(be, torch.zeros(b, n, v), tree, tok, q, seed=1)  # no mass anywhere: token 0


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_relax_uniforms_seeds(be):
    gen = _gen(22)
    b, n, v = 17, 24, 111
    p, tree, tok, q = make_tree(b, n, v, gen, kind="iid", shape="random", pad=0.1)
    nb = torch.randint(-1, v, (v, 4), generator=gen).int()
    for delta in (0.0, 0.1, 1.5):
        for dp in (q, None):
            run_tree(be, p, tree, tok, dp, relax=Relaxation(nb, delta), seed=7)
            run_tree(
                be, p, tree, tok, dp, relax=Relaxation(nb, delta), without_replacement=True, seed=8
            )
    u = torch.rand(b, n, generator=gen)
    for dp in (q, None):
        run_tree(be, p, tree, tok, dp, uniforms=u)
    run_tree(be, p, tree, tok.int(), q, seed=torch.tensor(5), offset=torch.tensor(6))
    run_tree(be, p, tree, tok, q, seed=torch.arange(b) * 3, offset=2**35)
    # the same uniforms given explicitly
    seeds = torch.arange(b) + 100
    a = run_tree(be, p, tree, tok, q, seed=seeds, offset=3)
    bb = run_tree(be, p, tree, tok, q, uniforms=row_uniforms(seeds, 3, b, n))
    assert torch.equal(a.tokens, bb.tokens)


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tree_half_inputs(be, dtype):
    gen = _gen(23)
    p, tree, tok, q = make_tree(2, 12, 4099, gen, kind="iid", shape="random")
    for wor in (False, True):
        run_tree(be, p.to(dtype), tree, tok, q.to(dtype), without_replacement=wor, seed=1)
    run_tree(be, p.to(dtype), tree, tok, None, seed=1)


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_fast_mode_out_of_range_ids(be):
    gen = _gen(24)
    b, n, v = 6, 12, 111
    p, tree, tok, q = make_tree(b, n, v, gen, kind="iid", shape="random")
    tok = tok.clone()
    tok[:, 1:4] = torch.tensor([v, v + 5, -2, 2**31 - 1, -(2**31), 10**12])[:, None]
    nb = torch.randint(-3, v + 3, (v, 3), generator=gen).int()
    with specops.validation(False):
        for dp in (q, None):
            for wor in (False, True):
                run_tree(be, p, tree, tok, dp, without_replacement=wor, seed=1)
                run_tree(be, p, tree, tok, dp, without_replacement=wor, relax=Relaxation(nb, 1))
            run_tree(be, p, tree, tok, dp, greedy=True)


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_garbage_links_stay_in_bounds(be):
    # first_child / next_sibling arrays that no Tree would produce (cycles, out-of-range ids,
    # links to the root) through the raw op: the walk ignores links outside [1, N), looks at
    # most N children and terminates; every output is -1 or a valid node / token id.
    dev = _dev(be)
    gen = _gen(27)
    b, n, v = 5, 9, 50
    p = random_probs(b, n, v, generator=gen).to(dev)
    q = random_probs(b, n, v, generator=gen).to(dev)
    tok = torch.randint(-1, v, (b, n), generator=gen).to(dev)
    for trial in range(20):
        fc = torch.randint(-3, 2 * n, (b, n), generator=gen).int().to(dev)
        ns = torch.randint(-3, 2 * n, (b, n), generator=gen).int().to(dev)
        if trial % 2:
            ns = torch.arange(n, device=dev).int().expand(b, -1).contiguous()  # self loops
        for dp, wor, greedy in ((q, True, False), (None, False, False), (None, False, True)):
            path, out, num = torch.ops.specops.verify_tree.default(
                p,
                fc,
                ns,
                4,
                tok,
                dp,
                wor,
                None,
                trial,
                None,
                0,
                None,
                0.0,
                *NO_GROUP,
                greedy,
                None,
                be,
            )
            assert ((path >= -1) & (path < n)).all() and ((out >= -1) & (out < v)).all()
            assert ((num >= 0) & (num <= n)).all()


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_on_a_chain_equals_chain_kernel(be):
    gen = _gen(25)
    b, k, v = 17, 6, 111
    p, x, q = make_chain(b, k, v, gen, "mixed")
    tok = torch.cat([torch.full((b, 1), 77), x], 1)
    qt = torch.cat([q, torch.rand(b, 1, v, generator=gen)], 1)
    dev = _dev(be)
    for dp, dpt in ((q, qt), (None, None)):
        c = specops.verify_chain(_to(p, dev), _to(x, dev), _to(dp, dev), seed=3, backend=be)
        t = specops.verify_tree(
            _to(p, dev), Tree.chain(k + 1, device=dev), _to(tok, dev), _to(dpt, dev), seed=3,
            backend=be,
        )  # fmt: skip
        assert torch.equal(c.tokens, t.tokens) and torch.equal(c.num_accepted, t.num_accepted)


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_root_only_and_empty_batch(be):
    dev = _dev(be)
    gen = _gen(26)
    p = random_probs(7, 1, 5, generator=gen)
    run_tree(be, p, Tree.chain(1), torch.zeros(7, 1, dtype=torch.long), None, seed=1)
    run_tree(be, p, Tree.chain(1), torch.zeros(7, 1, dtype=torch.long), p, seed=1)
    r = specops.verify_tree(
        torch.rand(0, 3, 5, device=dev),
        Tree.chain(3, device=dev),
        torch.zeros(0, 3, dtype=torch.long, device=dev),
        None,
        backend=be,
    )
    assert r.path.shape == (0, 3)


# --------------------------------------------------------------------------------------------
# fuzz: many small random configurations (every option mixed), token for token
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", BACKENDS)
def test_fuzz_chain(be):
    gen = _gen(40)
    for _trial in range(300):
        r = torch.randint(0, 10**9, (8,), generator=gen).tolist()
        b, k, v = 1 + r[0] % 17, r[1] % 65, (7, 16, 111, 1000)[r[2] % 4]
        kind = ("mixed", "one_hot", "near_one_hot", "zero_q", "all_rejected")[r[3] % 5]
        p, x, q = make_chain(b, k, v, gen, kind)
        kw = {}
        if r[4] % 2:
            kw["num_draft"] = torch.randint(0, k + 1, (b,), generator=gen)
        if r[4] % 3 == 0 and k:
            x = torch.where(torch.rand(b, k, generator=gen) < 0.15, -1, x)
        if r[5] % 4 == 0:
            kw["greedy"] = True
        elif r[5] % 4 == 1:
            nb = torch.randint(-1, v, (v, 1 + r[6] % 6), generator=gen).int()
            kw["relax"] = Relaxation(nb, (0.0, 0.01, 0.2, 3.0)[r[6] % 4])
        if r[7] % 3 == 0:
            kw["seed"] = torch.randint(0, 2**62, (b,), generator=gen)
        elif r[7] % 3 == 1:
            kw["uniforms"] = torch.rand(b, k + 1, generator=gen)
        else:
            kw["seed"] = r[7]
        run_chain(be, p, x, q if r[6] % 3 else None, **kw)


@pytest.mark.parametrize("be", BACKENDS)
def test_fuzz_tree(be):
    gen = _gen(41)
    shapes = ("random", "random1", "chain", "kary:2:3", "kary:3:3", "kary:2:5")
    sizes = {"kary:2:3": 7, "kary:3:3": 13, "kary:2:5": 31}
    for _trial in range(300):
        r = torch.randint(0, 10**9, (8,), generator=gen).tolist()
        shape = shapes[r[0] % len(shapes)]
        n = sizes.get(shape, 1 + r[1] % 64)
        b, v = 1 + r[2] % 17, (7, 16, 111, 1000)[r[3] % 4]
        kind = ("iid", "wor", "det")[r[4] % 3]
        pad = (0, 0.1, 0.3)[r[5] % 3]
        p, tree, tok, q = make_tree(b, n, v, gen, kind=kind, shape=shape, pad=pad)
        kw = dict(without_replacement=bool(r[6] % 2))
        if r[5] % 5 == 0:
            kw = dict(greedy=True)
        elif r[5] % 5 == 1:
            nb = torch.randint(-1, v, (v, 1 + r[6] % 6), generator=gen).int()
            kw["relax"] = Relaxation(nb, (0.0, 0.01, 0.2, 3.0)[r[6] % 4])
        if r[7] % 3 == 0:
            kw["seed"] = torch.randint(0, 2**62, (b,), generator=gen)
        elif r[7] % 3 == 1 and not kw.get("greedy"):
            kw["uniforms"] = torch.rand(b, n, generator=gen)
        else:
            kw["seed"] = r[7]
        run_tree(be, p, tree, tok, q, **kw)


# --------------------------------------------------------------------------------------------
# statistical losslessness of the C++ twin (identity with the reference is tested above; these
# check the kernel's output law directly, same construction as test_reference_verify_*.py)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("ragged", [False, True])
def test_cpu_chain_is_lossless(deterministic, ragged):
    gen = _gen(300 + 2 * deterministic + ragged)
    b = 20000
    m, tp, x, dp = chain_inputs(b, gen, deterministic=deterministic)
    nd = torch.randint(0, 3, (b,), generator=gen) if ragged else None
    r = specops.verify_chain(tp, x, dp, num_draft=nd, seed=17, offset=1, backend="cpu")
    seqs = m.complete(r.tokens, r.num_accepted.long() + 1, 3, gen)
    assert joint_pvalue(seqs, m) > PASS


@pytest.mark.parametrize("mode,wor", [("iid", False), ("wor", True), ("det", False), ("det", True)])
def test_cpu_tree_is_lossless(mode, wor):
    gen = _gen(400 + len(mode) + wor)
    b = 20000
    m, t, tp, tok, dp = tree_inputs(b, gen, TREE_PARENTS, mode=mode)
    r = specops.verify_tree(tp, t, tok, dp, without_replacement=wor, seed=23, backend="cpu")
    seqs = m.complete(r.tokens, r.num_accepted.long() + 1, 3, gen)
    assert joint_pvalue(seqs, m) > PASS


def test_cpu_tree_negative_control_wor_verified_as_iid():
    # the same statistic has power on the kernel's output: siblings drawn without replacement
    # but verified as i.i.d. draws are biased
    gen = _gen(400)
    m, t, tp, tok, dp = tree_inputs(20000, gen, TREE_PARENTS, mode="wor")
    r = specops.verify_tree(tp, t, tok, dp, without_replacement=False, seed=23, backend="cpu")
    seqs = m.complete(r.tokens, r.num_accepted.long() + 1, 3, gen)
    assert joint_pvalue(seqs, m) < PASS


# --------------------------------------------------------------------------------------------
# registration with the compiled backends; CUDA graphs
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", BACKENDS)
def test_opcheck_compiled_backends(be):
    dev = _dev(be)
    tu = ("test_schema", "test_faketensor")
    gen = _gen(30)
    opcheck_chain(be, dev, gen)
    pt, t, tok, qt = make_tree(3, 13, 111, gen, kind="iid", shape="kary:3:3")
    pt, t, tok, qt = pt.to(dev), t.to(dev), tok.to(dev), qt.to(dev)
    for wor in (False, True):
        torch.library.opcheck(
            torch.ops.specops.verify_tree.default,
            (pt, t.first_child, t.next_sibling, 3, tok, qt, wor, None, 3, None, 0, None, 0.0,
             *NO_GROUP, False, None, be),
            test_utils=tu,
        )  # fmt: skip


@pytest.mark.gpu
def test_cuda_graph_replay_with_device_seed_and_offset():
    gen = _gen(31)
    p, x, q = make_chain(8, 6, 32000, gen, "mixed")
    p, x, q = p.cuda(), x.cuda(), q.cuda()
    pt, t, tok, qt = make_tree(8, 13, 32000, gen, kind="wor", shape="kary:3:3")
    pt, t, tok, qt = pt.cuda(), t.to("cuda"), tok.cuda(), qt.cuda()
    seed = torch.arange(8, device="cuda") + 3
    offset = torch.tensor(0, device="cuda")

    def step():
        c = specops.verify_chain(p, x, q, seed=seed, offset=offset, backend="cuda")
        r = specops.verify_tree(pt, t, tok, qt, without_replacement=True, seed=seed,
                                offset=offset, backend="cuda")  # fmt: skip
        return c.tokens, r.tokens

    with specops.validation(False):
        step()  # warm-up (allocator)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            outs = step()
        for off in (0, 5, 9):
            offset.fill_(off)
            g.replay()
            torch.cuda.synchronize()
            want_c = specops.verify_chain(
                p.cpu(), x.cpu(), q.cpu(), seed=seed.cpu(), offset=off, backend="reference"
            )
            want_t = specops.verify_tree(
                pt.cpu(), t.to("cpu"), tok.cpu(), qt.cpu(), without_replacement=True,
                seed=seed.cpu(), offset=off, backend="reference",
            )  # fmt: skip
            assert torch.equal(outs[0].cpu(), want_c.tokens)
            assert torch.equal(outs[1].cpu(), want_t.tokens)
