"""verify_jacobi's compiled kernels (C++ CPU twin "cpu", CUDA "cuda") against the reference, token
for token, and statistical checks of the CPU twin.

Identity is exact: the kernels replicate the reference's float32 tests, its float64 normalisation
rounded to float32 per entry (also the tree walk's recursive residuals and renormalised drafts),
its float64 inverse-CDF sums (the candidates' draws included); summation order only differs at the
1e-16 level, which random inputs never hit.  The reference always runs on the CPU (the ground
truth); CUDA cases are marked ``gpu`` and run wherever a GPU exists."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import (
    CUDA_SIM,
    KERNEL_BACKENDS,
    NO_GROUP,
    chi2_pvalue,
    one_torch_thread_fixture,
    random_probs,
)
from helpers import gen as _gen
from helpers import to_device as _to
from verify_stats import (
    PASS,
    grouped_pvalue,
    jacobi_chain_pvalue,
    jacobi_stale_rows,
    jacobi_tree_inputs,
    joint_pvalue,
)

import specops
from specops import Relaxation, Tree
from specops.reference import verify as rv

BACKENDS = KERNEL_BACKENDS
FIELDS = ("num_accepted", "next_window", "first_reject", "candidates", "path")

_one_torch_thread = one_torch_thread_fixture()


def _dev(be):
    return "cuda" if be == "cuda" else "cpu"


def _mix(p, gen, w=0.7):
    """A draft close to p (prefixes get accepted, later slots both pass and fail)."""
    r = random_probs(*p.shape, generator=gen, sharpness=2.0)
    m = w * p + (1 - w) * r
    return m / m.sum(-1, keepdim=True)


def check(be, p, x, q, **kw):
    """The backend's result equals the reference's, field by field; returns the reference's."""
    dev = _dev(be)
    want = rv.verify_jacobi(p, x, q, **kw)
    kd = {k: _to(v, dev) for k, v in kw.items()}
    got = specops.verify_jacobi(_to(p, dev), _to(x, dev), _to(q, dev), backend=be, **kd)
    for name in FIELDS:
        g, w = getattr(got, name), getattr(want, name)
        if w is None:
            assert g is None, name
            continue
        assert g.dtype == torch.int32 and g.shape == w.shape, name
        assert torch.equal(g.cpu(), w), (name, g.cpu(), w)
    return want


def chain_case(b, L, v, gen, *, kind="mix", sharp=2.0):
    """Targets, window tokens and drafts of a chain window.  kind: 'mix' (drafts near p),
    'far' (independent drafts: most slots rejected), 'onehot' / 'near' (one-hot / near one-hot
    targets), 'zero' (tokens where p = 0: everything rejected)."""
    p = random_probs(b, L, v, generator=gen, sharpness=sharp, zero_frac=0.2 if v > 2 else 0.0)
    if kind == "onehot":
        p = torch.nn.functional.one_hot(torch.randint(0, v, (b, L), generator=gen), v).float()
    elif kind == "near":
        hot = torch.nn.functional.one_hot(torch.randint(0, v, (b, L), generator=gen), v).float()
        p = 0.999 * hot + 0.001 * random_probs(b, L, v, generator=gen)
    q = _mix(p, gen) if kind in ("mix", "near") else random_probs(b, L, v, generator=gen)
    x = torch.multinomial(q.reshape(-1, v).double(), 1, generator=gen).reshape(b, L)
    if kind == "onehot":  # half the slots draft the hot token
        keep = torch.rand(b, L, generator=gen) < 0.5
        x = torch.where(keep, p.argmax(-1), x)
    if kind == "zero":
        x = (p == 0).float().argmax(-1)  # a zero-probability token where the row has one
    return p, x, q


def tree_case(b, tree: Tree, v, gen, *, kind="mix"):
    """Window of a tree: node n's children drawn without replacement from draft row n."""
    parents = tree.parents[0].tolist()
    n = len(parents)
    p = random_probs(b, n, v, generator=gen, sharpness=2.0, zero_frac=0.1)
    q = _mix(p, gen, w=0.8) if kind == "mix" else random_probs(b, n, v, generator=gen)
    x = torch.zeros(b, n, dtype=torch.long)
    for node in range(n):
        kids = [c for c in range(n) if parents[c] == node]
        if kids:
            d = torch.multinomial(q[:, node].double(), len(kids), replacement=False, generator=gen)
            x[:, kids] = d
    return p, x, q


# --------------------------------------------------------------------------------------------
# chain mode
# --------------------------------------------------------------------------------------------
CHAIN_CASES = [  # (B, L, V, kind)
    (1, 1, 7, "mix"),
    (3, 5, 7, "far"),
    (3, 64, 7, "mix"),
    (3, 24, 111, "mix"),
    (1, 64, 111, "far"),
    (3, 9, 111, "onehot"),
    (3, 9, 111, "near"),
    (3, 6, 111, "zero"),
    (3, 16, 32000, "mix"),
]


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("cont", [True, False])
def test_chain_matches_reference(be, cont):
    gen = _gen(1)
    for bb, L, v, kind in CHAIN_CASES:
        p, x, q = chain_case(bb, L, v, gen, kind=kind)
        for dq in (q, None):
            r = check(be, p, x, dq, continue_after_reject=cont, seed=11, offset=3)
            if kind == "zero":
                assert (r.num_accepted == 0).all()


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_candidates_match_reference(be):
    gen = _gen(2)
    for bb, L, v, kind, k in [
        (3, 12, 7, "far", 2),
        (3, 10, 111, "mix", 3),
        (1, 6, 5, "far", 7),  # k > V: padded with -1
        (3, 8, 111, "onehot", 3),  # one positive entry: [id, -1, -1]
        (2, 4, 32000, "far", 3),
    ]:
        p, x, q = chain_case(bb, L, v, gen, kind=kind)
        for cont in (True, False):
            check(be, p, x, q, continue_after_reject=cont, num_candidates=k, seed=5, offset=1)


@pytest.mark.parametrize("be", BACKENDS)
def test_big_vocab(be):
    gen = _gen(3)
    p, x, q = chain_case(1, 8, 65536, gen, kind="far")
    check(be, p, x, q, seed=2)
    check(be, p, x, q, continue_after_reject=False, num_candidates=3, seed=2)
    t = Tree.kary_chain(3, 2, 8)
    p, x, q = tree_case(1, t, 65536, gen, kind="far")
    check(be, p, x, q, tree=t, num_candidates=3, seed=2)


@pytest.mark.parametrize("be", BACKENDS)
def test_chain_all_accepted_and_no_draft_slots(be):
    gen = _gen(4)
    p = random_probs(3, 6, 9, generator=gen)
    x = torch.multinomial(p.reshape(-1, 9).double(), 1, generator=gen).reshape(3, 6)
    r = check(be, p, x, p.clone(), num_candidates=2, seed=1)  # q = p: every slot passes
    assert (r.num_accepted == 6).all() and (r.first_reject == -1).all()
    assert (r.candidates == -1).all()
    x[0, 2] = -1  # "no draft": rejected, resampled from p
    x[1, 0] = -1
    for cont in (True, False):
        r = check(be, p, x, p, continue_after_reject=cont, num_candidates=3, seed=1)
        assert r.num_accepted.tolist() == [2, 0, 6]


# --------------------------------------------------------------------------------------------
# tree mode (SJD-PAC window)
# --------------------------------------------------------------------------------------------
TREE_CASES = [  # (B, kary_chain(K, D, L), V, kind)
    (3, (2, 3, 9), 7, "mix"),
    (3, (3, 2, 16), 7, "far"),
    (3, (3, 3, 20), 111, "mix"),
    (1, (1, 1, 5), 111, "mix"),  # a plain chain of nodes
    (3, (4, 2, 5), 111, "far"),  # only the K-ary part
    (2, (3, 3, 64), 111, "mix"),
    (1, (3, 3, 64), 32000, "mix"),
]


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("cont", [True, False])
def test_tree_matches_reference(be, cont):
    gen = _gen(5)
    for bb, shape, v, kind in TREE_CASES:
        t = Tree.kary_chain(*shape)
        p, x, q = tree_case(bb, t, v, gen, kind=kind)
        for dq in (q, None):
            check(be, p, x, dq, tree=t, continue_after_reject=cont, seed=7, offset=2)


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_sparse_rows_match_reference(be):
    """Top-k filtered rows (what SJD-PAC samples from) with p and q on different supports, the
    root's children rejected for sure: the walk's passes over the joint support of p and q and
    the line's passes over p's support (the CPU twin's compacted lists) give the reference's
    tokens and candidates, draft entries outside p's support included."""
    gen = _gen(41)
    t = Tree.kary_chain(3, 2, 12)
    b, n, v = 8, 12, 300
    kids = [c for c in range(n) if t.parents[0, c].item() == 0]

    def top_k(logits, k):
        kth = logits.topk(k, -1).values[..., -1:]
        return torch.softmax(logits.masked_fill(logits < kth, float("-inf")), -1)

    for k in (4, 40):
        lq = torch.randn(b, n, v, generator=gen) * 3.0
        p, q = top_k(lq + torch.randn(b, n, v, generator=gen), k), top_k(lq, k)
        _, x, _ = tree_case(b, t, v, gen)
        x[:, kids] = torch.multinomial(q[:, 0], len(kids), generator=gen)
        for bb in range(b):  # p(x) = 0 for every child of the root
            p[bb, 0, x[bb, kids]] = 0.0
            p[bb, 0] /= p[bb, 0].sum()
        for seed in range(3):
            r = check(be, p, x, q, tree=t, num_candidates=3, seed=seed)
            assert (r.num_accepted == 0).all() and (r.first_reject == 0).all()


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_candidates_match_reference(be):
    gen = _gen(6)
    for bb, shape, v, kind, k in [
        (3, (2, 3, 9), 7, "far", 2),
        (3, (3, 3, 24), 111, "mix", 3),
        (3, (3, 2, 12), 111, "far", 3),
        (1, (3, 2, 6), 32000, "far", 3),
    ]:
        t = Tree.kary_chain(*shape)
        p, x, q = tree_case(bb, t, v, gen, kind=kind)
        for cont in (True, False):
            check(be, p, x, q, tree=t, continue_after_reject=cont, num_candidates=k, seed=9)


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_special_rows(be):
    gen = _gen(7)
    t = Tree.kary_chain(3, 2, 10)
    b, n, v = 3, 10, 13
    p, x, q = tree_case(b, t, v, gen, kind="far")
    # one-hot / near-one-hot targets; padding nodes; zero-probability children; per-request seeds
    p[0] = torch.nn.functional.one_hot(torch.randint(0, v, (n,), generator=gen), v).float()
    p[1, 0] = 0.999 * torch.nn.functional.one_hot(x[1, 3], v).float() + 0.001 / v
    x[2, 2] = -1  # padding sibling
    x[1, 6] = -1  # padding on the chain: continuation stops there
    seeds = torch.tensor([3, 4, 5])
    for dq in (q, None):
        for cont in (True, False):
            kw = dict(tree=t, continue_after_reject=cont, num_candidates=2)
            check(be, p, x, dq, seed=seeds, offset=torch.tensor(6), **kw)
    # everything rejected: children drafted where p = 0
    pz = random_probs(b, n, v, generator=gen)
    pz[:, :, :3] = 0.0
    pz = pz / pz.sum(-1, keepdim=True)
    xz = torch.where(x >= 0, x % 3, x)
    r = check(be, pz, xz, q, tree=t, num_candidates=3, seed=1)
    assert (r.num_accepted == 0).all() and (r.first_reject == 0).all()


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_walk_recursive_residuals(be, monkeypatch):
    """Peaked drafts, several rejected siblings per node: the walk's p_j / q_j recursion (residual
    of a residual, renormalised drafts without replacement) decides tokens here.  Self-check: the
    reference with drafts verified as i.i.d. (no renormalisation) differs on these inputs."""
    gen = _gen(14)
    t = Tree.kary_chain(3, 3, 16)
    parents = t.parents[0].tolist()
    cases = []
    for _ in range(8):
        p = random_probs(3, 16, 6, generator=gen, sharpness=3.0)
        q = random_probs(3, 16, 6, generator=gen, sharpness=3.0)
        x = torch.zeros(3, 16, dtype=torch.long)
        for node in range(16):
            kids = [c for c in range(16) if parents[c] == node]
            if kids:
                d = torch.multinomial(q[:, node].double(), len(kids), generator=gen)
                x[:, kids] = d
        cases.append((p, x, q))
    for i, (p, x, q) in enumerate(cases):
        check(be, p, x, q, tree=t, num_candidates=2, seed=i)
        check(be, p, x, None, tree=t, continue_after_reject=False, seed=i)
    want = [
        rv.verify_jacobi(p, x, q, tree=t, seed=i).next_window for i, (p, x, q) in enumerate(cases)
    ]
    monkeypatch.setattr(rv, "_drop_and_renormalise", lambda q, x: q)
    iid = [
        rv.verify_jacobi(p, x, q, tree=t, seed=i).next_window for i, (p, x, q) in enumerate(cases)
    ]
    assert any(not torch.equal(a, b) for a, b in zip(want, iid))


def test_tree_cuda_orchestration_emulated_on_cpu():
    """The CUDA kernel's tree-mode plan, run by the CPU twin: continuation tokens and candidates
    for every node that could be on the line (draws of its depth), computed before the walk's
    result is known, then the last block's assembly.  Must equal the reference too."""
    from specops.ops.jacobi import JACOBI

    gen = _gen(15)
    cases = [
        (3, (3, 3, 24), 111, "far", 3),
        (3, (2, 3, 9), 7, "mix", 2),
        (2, (3, 2, 12), 9, "far", 1),
    ]
    for bb, shape, v, kind, k in cases:
        t = Tree.kary_chain(*shape)
        p, x, q = tree_case(bb, t, v, gen, kind=kind)
        x[0, 5] = -1  # a padding node
        for dq in (q, None):
            for cont in (True, False):
                want = rv.verify_jacobi(
                    p, x, dq, tree=t, continue_after_reject=cont, num_candidates=k, seed=3
                )
                got = JACOBI.launch(
                    "cpu",
                    p,
                    x,
                    dq,
                    t.first_child,
                    t.next_sibling,
                    cont,
                    k,
                    (None, 3, None, 0),
                    None,
                    0.0,
                    *NO_GROUP,
                    None,
                    emulate_cuda=True,
                )
                assert torch.equal(got[0], want.num_accepted)
                assert torch.equal(got[1], want.next_window)
                assert torch.equal(got[2], want.first_reject)
                if k > 1:
                    assert torch.equal(got[3], want.candidates)
                assert torch.equal(got[4], want.path)


@pytest.mark.parametrize("be", BACKENDS)
def test_tree_batched_trees(be):
    gen = _gen(8)
    t = Tree.kary_chain(2, 3, 11).expand(3)
    p, x, q = tree_case(3, Tree.kary_chain(2, 3, 11), 17, gen, kind="mix")
    check(be, p, x, q, tree=t, num_candidates=2, seed=4)


@pytest.mark.parametrize("be", [pytest.param("cuda", marks=pytest.mark.gpu), CUDA_SIM])
def test_batch_beyond_a_grid_dimension(be):
    # the CUDA grid is 1-D (block b * L + i): B = 65537 (> a grid y/z limit) runs as cpu does
    gen = _gen(12)
    p, x, q = chain_case(65537, 1, 4, gen, kind="far")
    check(be, p, x, q, seed=3)


# --------------------------------------------------------------------------------------------
# randomness, relaxation, dtypes, fast mode
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", BACKENDS)
def test_seeds_offsets_and_explicit_uniforms(be):
    gen = _gen(9)
    b, L, v = 3, 7, 11
    p, x, q = chain_case(b, L, v, gen, kind="far")
    t = Tree.kary_chain(2, 2, L)
    pt, xt, qt = tree_case(b, t, v, gen, kind="far")
    for k in (1, 3):
        draws = 2 * L + (L * k if k > 1 else 0)
        u = torch.rand(b, draws, generator=gen).clamp(1e-6, 1 - 1e-6)
        check(be, p, x, q, num_candidates=k, uniforms=u)
        check(be, pt, xt, qt, tree=t, num_candidates=k, uniforms=u)
        seeds = torch.tensor([1, 2**40 + 3, 7])
        off = torch.tensor(2**33 + 5)
        check(be, p, x, q, num_candidates=k, seed=seeds, offset=off)
        check(be, pt, xt, qt, tree=t, num_candidates=k, seed=seeds, offset=off)
    # per-request seeds are honoured: request 1 alone with seed 2 gives request 1's result
    r3 = specops.verify_jacobi(p, x, q, seed=torch.tensor([1, 2, 3]), backend="cpu")
    r1 = specops.verify_jacobi(p, x, q, seed=2, backend="cpu")
    assert torch.equal(r3.next_window[1], r1.next_window[1])


@pytest.mark.parametrize("be", BACKENDS)
def test_relaxed_acceptance(be):
    gen = _gen(10)
    v = 23
    nb = torch.randint(-1, v, (v, 4), generator=gen, dtype=torch.int32)
    for delta in (0.0, 0.05, 0.3):
        relax = Relaxation(nb, delta)
        p, x, q = chain_case(3, 12, v, gen, kind="far")
        check(be, p, x, q, relax=relax, num_candidates=2, seed=3)
        check(be, p, x, None, relax=relax, continue_after_reject=False, seed=3)
        t = Tree.kary_chain(3, 2, 12)
        pt, xt, qt = tree_case(3, t, v, gen, kind="far")
        check(be, pt, xt, qt, tree=t, relax=relax, seed=3)
        check(be, pt, xt, None, tree=t, relax=relax, seed=3)


@pytest.mark.parametrize("be", BACKENDS)
def test_dtypes_and_strides(be):
    gen = _gen(11)
    p, x, q = chain_case(3, 10, 33, gen, kind="mix")
    check(be, p.half(), x.int(), q.bfloat16(), num_candidates=2, seed=1)
    wide = torch.zeros(3, 10, 40)
    wide[..., :33] = p
    pv = wide[..., :33]  # non-contiguous rows
    xs = torch.stack([x, x], -1)[..., 0]  # strided ids
    check(be, pv, xs, q, seed=2)
    t = Tree.kary_chain(2, 2, 10)
    pt, xt, qt = tree_case(3, t, 33, gen)
    check(be, pt.half(), xt.int(), qt, tree=t, num_candidates=3, seed=1)


@pytest.mark.parametrize("be", BACKENDS)
def test_fast_mode_out_of_range_tokens(be):
    gen = _gen(12)
    v = 9
    p, x, q = chain_case(3, 8, v, gen, kind="mix")
    x[0, 0], x[1, 3], x[2, 5] = v + 4, -7, 2**31 - 1
    t = Tree.kary_chain(2, 2, 8)
    pt, xt, qt = tree_case(3, t, v, gen, kind="mix")
    xt[0, 1], xt[1, 4], xt[2, 7] = v, -3, 10**6
    with specops.validation(False):
        for cont in (True, False):
            r = check(be, p, x, q, continue_after_reject=cont, num_candidates=2, seed=1)
            assert r.num_accepted[0] == 0
            check(be, p, x, None, continue_after_reject=cont, seed=1)
            check(be, pt, xt, qt, tree=t, continue_after_reject=cont, num_candidates=2, seed=1)
            check(be, pt, xt, None, tree=t, continue_after_reject=cont, seed=1)
        # rows without mass fall back to token 0, never outside the vocabulary
        pz = p.clone()
        pz[1] = 0.0
        r = check(be, pz, x, q, num_candidates=2, seed=1)
        assert ((r.next_window >= 0) & (r.next_window < v)).all()


def test_cpu_is_auto_on_cpu_and_opcheck():
    gen = _gen(13)
    p, x, q = chain_case(2, 5, 7, gen)
    a = specops.verify_jacobi(p, x, q, seed=3)
    b = specops.verify_jacobi(p, x, q, seed=3, backend="cpu")
    assert torch.equal(a.next_window, b.next_window)
    t = Tree.kary_chain(2, 2, 5)
    args = (p, x, q, t.first_child, t.next_sibling, True, 2, None, 3, None, 0, None, 0.0,
            *NO_GROUP, None)  # fmt: skip
    torch.library.opcheck(torch.ops.specops.verify_jacobi.default, (*args, "cpu"))
    chain_args = (p, x, q, None, None, False, 3, None, 3, None, 0, None, 0.0, *NO_GROUP, None,
                  "cpu")  # fmt: skip
    torch.library.opcheck(torch.ops.specops.verify_jacobi.default, chain_args)


# --------------------------------------------------------------------------------------------
# statistics of the CPU twin (identity with the reference is tested above; these check the
# contract directly, on a sample the reference would be slow to produce)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cont", [True, False])
def test_cpu_chain_every_slot_is_a_sample_of_its_p(cont):
    kw = dict(continue_after_reject=cont, seed=3, backend="cpu")
    assert jacobi_chain_pvalue(specops.verify_jacobi, b=6000, **kw) > PASS


@pytest.mark.parametrize(
    "be", ["reference", "cpu", pytest.param("cuda", marks=pytest.mark.gpu), CUDA_SIM]
)
def test_candidates_follow_sampling_without_replacement(be):
    """All k candidates, jointly: P(c0, c1, c2) = p0 p1 / (1 - p0) p2 / (1 - p0 - p1) (Plackett-
    Luce: sequential sampling without replacement), -1 where the positive entries run out.  A
    kernel that drew later candidates with replacement, from the full row, or in id order fails."""
    b, L = 3000, 5
    row = torch.tensor([0.4, 0.25, 0.0, 0.2, 0.15, 0.0])  # 4 positive entries
    p = row.expand(b, L, 6).contiguous()
    x = torch.full((b, L), 2)  # p(x) = 0: slot 0 is rejected, slots 1..L-1 get candidates
    dev = _dev(be)
    r = specops.verify_jacobi(_to(p, dev), _to(x, dev), None, num_candidates=5, seed=11, backend=be)
    c = r.candidates.cpu()[:, 1:].reshape(-1, 5).long()
    assert (c[:, 4] == -1).all() and (c[:, :4] >= 0).all()
    pos = [0, 1, 3, 4]
    idx = {(i, j, k): n for n, (i, j, k) in enumerate(itertools.permutations(pos, 3))}
    want = torch.zeros(len(idx), dtype=torch.float64)
    for (i, j, k), n in idx.items():
        pi, pj, pk = row[i].item(), row[j].item(), row[k].item()
        want[n] = pi * pj / (1 - pi) * pk / (1 - pi - pj)
    got = torch.zeros(len(idx))
    for t in c[:, :3].tolist():
        got[idx[tuple(t)]] += 1
    assert chi2_pvalue(got.numpy(), want.numpy()) > PASS


def test_cpu_tree_is_lossless_and_continuation_samples_p():
    gen = _gen(400)
    b = 8000
    m, t, tp, tok, dp = jacobi_tree_inputs(b, gen)
    L, v = tp.shape[1], tp.shape[2]
    r = specops.verify_jacobi(tp, tok, dp, tree=t, num_candidates=2, seed=6, backend="cpu")
    a = r.num_accepted.long()
    seqs = m.complete(r.next_window, a + 1, 3, gen)
    assert joint_pvalue(seqs, m) > PASS
    _, rows_p, grp = jacobi_stale_rows(t, r, tp, tok)
    sel = ((r.next_window >= 0) & (torch.arange(L) > a[:, None])).flatten()
    assert grouped_pvalue(grp[sel], r.next_window.flatten()[sel], rows_p[sel], L * v) > PASS
    c0 = r.candidates[..., 0].flatten()
    csel = c0 >= 0
    assert grouped_pvalue(grp[csel], c0[csel], rows_p[csel], L * v) > PASS


@pytest.mark.gpu
def test_cuda_graph_replay_and_counter_reset():
    """Tree mode's completion counters are reset by the kernel: repeated launches and CUDA graph
    replays (seed/offset as device tensors) keep matching the reference."""
    gen = _gen(16)
    t = Tree.kary_chain(3, 3, 20)
    p, x, q = tree_case(2, t, 300, gen, kind="far")
    tc, pc, xc, qc = t.to("cuda"), p.cuda(), x.cuda(), q.cuda()
    seed = torch.tensor([5, 6], device="cuda")
    off = torch.tensor(0, device="cuda")

    def step():
        return specops.verify_jacobi(
            pc, xc, qc, tree=tc, num_candidates=3, seed=seed, offset=off, backend="cuda"
        )

    with specops.validation(False):  # value checks read the data: not inside a capture
        for _ in range(3):
            step()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = step()
    for o in range(3):
        off.fill_(o)
        g.replay()
        torch.cuda.synchronize()
        want = rv.verify_jacobi(p, x, q, tree=t, num_candidates=3, seed=seed.cpu(), offset=o)
        assert torch.equal(out.next_window.cpu(), want.next_window)
        assert torch.equal(out.candidates.cpu(), want.candidates)
        assert torch.equal(out.num_accepted.cpu(), want.num_accepted)
