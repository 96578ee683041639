"""Public verification ops: results equal the reference, bad inputs raise clear errors naming the
argument, fast mode never indexes out of bounds, torch.library registration (opcheck, compile).
Fast backends (cpu/cuda/triton) will be compared against the reference here as they land."""

from __future__ import annotations

import os

import pytest
import torch
from helpers import NO_GROUP, random_probs
from helpers import gen as _gen

import specops
from specops import Relaxation, Tree
from specops.reference import verify as rv

TREE_PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4]


def chain_case(b=6, k=4, v=10, device="cpu", seed=0):
    g = _gen(seed)
    p = random_probs(b, k + 1, v, generator=g, zero_frac=0.2)
    q = random_probs(b, k, v, generator=g)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k)
    return p.to(device), x.to(device), q.to(device)


def tree_case(b=6, v=10, device="cpu", seed=0):
    g = _gen(seed)
    n = len(TREE_PARENTS)
    p = random_probs(b, n, v, generator=g, zero_frac=0.2)
    q = random_probs(b, n, v, generator=g)
    tok = torch.randint(0, v, (b, n), generator=g)
    return p.to(device), Tree.from_parents(TREE_PARENTS).to(device), tok.to(device), q.to(device)


# results ------------------------------------------------------------------------------------
def test_verify_chain_matches_reference(device):
    p, x, q = chain_case(device=device)
    b, v = p.shape[0], p.shape[-1]
    seeds = torch.arange(b, device=device) * 7
    nb = torch.randint(-1, v, (v, 3), generator=_gen(1)).to(torch.int32).to(device)
    nd = torch.tensor([0, 1, 2, 3, 4, 4], device=device)
    for kw in (
        dict(seed=3),
        dict(seed=seeds, offset=torch.tensor(5, device=device), num_draft=nd),
        dict(seed=2, relax=Relaxation(nb, 0.1)),
        dict(greedy=True),
    ):
        for dp in (q, None):
            got = specops.verify_chain(p, x, dp, **kw)
            want = rv.verify_chain(p, x, dp, **kw)
            assert isinstance(got, rv.ChainResult)
            assert got.tokens.dtype == torch.int32 and got.num_accepted.dtype == torch.int32
            assert torch.equal(got.tokens, want.tokens)
            assert torch.equal(got.num_accepted, want.num_accepted)
    u = torch.rand(b, 5, generator=_gen(2)).to(device)
    assert torch.equal(
        specops.verify_chain(p, x.int(), q.half(), uniforms=u).tokens,
        rv.verify_chain(p, x, q.half().float(), uniforms=u).tokens,
    )


def test_verify_tree_matches_reference(device):
    p, t, tok, q = tree_case(device=device)
    seeds = torch.arange(p.shape[0], device=device)
    for kw in (dict(seed=1), dict(seed=seeds, without_replacement=True), dict(greedy=True)):
        for dp in (q, None):
            got = specops.verify_tree(p, t, tok, dp, **kw)
            want = rv.verify_tree(p, t, tok, dp, **kw)
            assert isinstance(got, rv.TreeResult)
            assert got.path.shape == (p.shape[0], 4) and got.tokens.dtype == torch.int32
            for a, bb in zip(got, want):
                assert torch.equal(a, bb)


def test_verify_jacobi_matches_reference(device):
    g = _gen(3)
    b, L, v = 5, 9, 7
    p = random_probs(b, L, v, generator=g).to(device)
    q = random_probs(b, L, v, generator=g).to(device)
    x = torch.randint(0, v, (b, L), generator=g).to(device)
    for tree in (None, Tree.kary_chain(2, 3, L).to(device)):
        for kw in (dict(seed=4), dict(num_candidates=3, continue_after_reject=False, seed=5)):
            got = specops.verify_jacobi(p, x, q, tree=tree, **kw)
            want = rv.verify_jacobi(p, x, q, tree=tree, **kw)
            assert isinstance(got, rv.JacobiResult)
            assert (got.path is None) == (tree is None)
            assert (got.candidates is None) == ("num_candidates" not in kw)
            for a, bb in zip(got, want):
                assert (a is None and bb is None) or torch.equal(a, bb)
            assert got.next_window.dtype == torch.int32


def test_path_acceptance_matches_reference(device):
    p, t, tok, q = tree_case(device=device)
    for dp in (q, None):
        k, e = specops.path_acceptance(p, dp, t, tok)
        kr, er = rv.path_acceptance(p, dp, t, tok)
        assert k.shape == (p.shape[0], 4) and k.dtype == torch.float32
        assert torch.equal(k, kr) and torch.equal(e, er)


def test_fast_mode_out_of_range_ids_are_rejected():
    p, x, q = chain_case()
    v = p.shape[-1]
    x = x.clone()
    x[:, 0] = torch.tensor([v, v + 100, -5, 2**31 - 1, -(2**31), v])
    with specops.validation(False):
        for dp in (q, None):
            r = specops.verify_chain(p, x, dp, seed=1)
            assert (r.num_accepted == 0).all() and (r.tokens[:, 0] >= 0).all()
            assert (r.tokens[:, 0] < v).all()
        pt, t, tok, qt = tree_case()
        tok = tok.clone()
        tok[:, 1:4] = v + 3  # every child of the root is out of range
        r = specops.verify_tree(pt, t, tok, qt, seed=1)
        assert (r.num_accepted == 0).all() and ((r.tokens[:, 0] >= 0) & (r.tokens[:, 0] < v)).all()
        k, _ = specops.path_acceptance(pt, qt, t, tok)
        assert (k == 0).all()
        r = specops.verify_jacobi(pt, tok, qt, seed=1)
        assert ((r.next_window >= 0) & (r.next_window < v)).all()


# errors -------------------------------------------------------------------------------------
def test_verify_chain_errors():
    p, x, q = chain_case()
    f = specops.verify_chain
    with pytest.raises(TypeError, match="target_probs"):
        f(p.long(), x, q)
    with pytest.raises(ValueError, match="target_probs"):
        f(p[0], x, q)
    with pytest.raises(ValueError, match=r"draft_tokens must have shape \[6, 4\]"):
        f(p, torch.cat([x, x[:, :1]], 1), q)
    with pytest.raises(TypeError, match="draft_tokens"):
        f(p, x.float(), q)
    with pytest.raises(ValueError, match="draft_probs has vocab 9 but target_probs has vocab 10"):
        f(p, x, q[..., :9])
    with pytest.raises(ValueError, match="draft_probs"):
        f(p, x, q[:, :3])
    with pytest.raises(TypeError, match="draft_probs"):
        f(p, x, q.double())
    with pytest.raises(ValueError, match="num_draft"):
        f(p, x, q, num_draft=torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="num_draft"):
        f(p, x, q, num_draft=torch.ones(6))
    with pytest.raises(ValueError, match="num_draft"):
        f(p, x, q, num_draft=torch.full((6,), 5))  # > K, validation mode
    with pytest.raises(ValueError, match="uniforms"):
        f(p, x, q, uniforms=torch.rand(6, 4))
    with pytest.raises(TypeError, match="relax"):
        f(p, x, q, relax=(torch.zeros(10, 2, dtype=torch.int32), 0.1))
    with pytest.raises(ValueError, match="relax.neighbors"):
        f(p, x, q, relax=Relaxation(torch.zeros(9, 2, dtype=torch.int32), 0.1))
    with pytest.raises(ValueError, match="delta"):
        f(p, x, q, relax=Relaxation(torch.zeros(10, 2, dtype=torch.int32), -0.1))
    with pytest.raises(ValueError, match="relax.neighbors"):
        f(p, x, q, relax=Relaxation(torch.full((10, 2), 10, dtype=torch.int32), 0.1))
    with pytest.raises(ValueError, match="greedy"):
        f(p, x, q, greedy=True, relax=Relaxation(torch.zeros(10, 2, dtype=torch.int32), 0.1))
    with pytest.raises(TypeError, match="greedy"):
        f(p, x, q, greedy=1)
    with pytest.raises(ValueError, match="draft_tokens holds id 10"):
        f(p, torch.full_like(x, 10), q)
    with pytest.raises(ValueError, match="negative"):
        f(-p, x, q)
    with pytest.raises(ValueError, match="non-finite"):
        f(p, x, q * float("nan"))
    with pytest.raises(ValueError, match="seed"):
        f(p, x, q, seed=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="backend"):
        f(p, x, q, backend="metal")
    if os.environ.get("TRITON_INTERPRET") != "1":
        with pytest.raises(RuntimeError, match="not available"):
            f(p, x, q, backend="triton")  # Triton needs GPU tensors outside the interpreter
    with pytest.raises(RuntimeError, match="not available"):
        f(p, x, q, backend="cuda")  # CPU tensors
    with pytest.raises(ValueError, match="draft_tokens is a meta tensor"):
        f(p, x.to("meta"), q)


def test_verify_tree_errors():
    p, t, tok, q = tree_case()
    f = specops.verify_tree
    with pytest.raises(TypeError, match="tree"):
        f(p, TREE_PARENTS, tok, q)
    with pytest.raises(ValueError, match="tree has batch 3 but target_probs has batch 6"):
        f(p, Tree.from_parents(torch.tensor(TREE_PARENTS).expand(3, -1)), tok, q)
    with pytest.raises(ValueError, match="tree has 9 nodes"):
        f(p, Tree.chain(9), tok, q)
    with pytest.raises(ValueError, match="draft_tokens"):
        f(p, t, tok[:, :-1], q)
    with pytest.raises(ValueError, match="vocab"):
        f(p, t, tok, q[..., :-1])
    with pytest.raises(ValueError, match="uniforms"):
        f(p, t, tok, q, uniforms=torch.rand(6, 9))
    with pytest.raises(TypeError, match="without_replacement"):
        f(p, t, tok, q, without_replacement=None)
    with pytest.raises(ValueError, match="draft_tokens holds id -2"):
        f(p, t, torch.full_like(tok, -2), q)
    bad = tok.clone()
    bad[:, 0] = 12345  # entry 0 (the root) is ignored, also by the value checks
    assert torch.equal(f(p, t, bad, q, seed=1).tokens, f(p, t, tok, q, seed=1).tokens)


def test_verify_jacobi_errors():
    g = _gen(5)
    b, L, v = 3, 6, 5
    p = random_probs(b, L, v, generator=g)
    x = torch.randint(0, v, (b, L), generator=g)
    f = specops.verify_jacobi
    with pytest.raises(ValueError, match="window_tokens"):
        f(p, x[:, :-1], p)
    with pytest.raises(ValueError, match="draft_probs"):
        f(p, x, p[:, :-1])
    with pytest.raises(ValueError, match="num_candidates"):
        f(p, x, p, num_candidates=0)
    with pytest.raises(TypeError, match="num_candidates"):
        f(p, x, p, num_candidates=2.0)
    with pytest.raises(TypeError, match="continue_after_reject"):
        f(p, x, p, continue_after_reject="yes")
    with pytest.raises(ValueError, match=r"uniforms must have shape \[3, 24\]"):
        f(p, x, p, num_candidates=2, uniforms=torch.rand(b, 12))
    with pytest.raises(ValueError, match="tree has 7 nodes"):
        f(p, x, p, tree=Tree.kary_chain(2, 3, 7))
    with pytest.raises(ValueError, match="window_tokens holds id 5"):
        f(p, torch.full_like(x, 5), p)
    r = f(p, torch.full_like(x, -1), p, seed=0)  # -1: no draft, every slot sampled from p
    assert (r.num_accepted == 0).all() and (r.next_window >= 0).all()


def test_path_acceptance_errors():
    p, t, tok, q = tree_case()
    f = specops.path_acceptance
    with pytest.raises(ValueError, match="tree has batch"):
        f(p, q, Tree.from_parents(torch.tensor(TREE_PARENTS).expand(2, -1)), tok)
    with pytest.raises(ValueError, match="vocab"):
        f(p, q[..., :3], t, tok)
    with pytest.raises(TypeError, match="draft_tokens"):
        f(p, q, t, tok.float())


# registration -------------------------------------------------------------------------------
def test_opcheck():
    tu = ("test_schema", "test_faketensor")
    p, x, q = chain_case()
    nb = torch.randint(-1, 10, (10, 2), generator=_gen(6), dtype=torch.int64).int()
    torch.library.opcheck(
        torch.ops.specops.verify_chain.default,
        (p, x, q, None, None, 1, None, 0, nb, 0.1, *NO_GROUP, False, None, False, "reference"),
        test_utils=tu,
    )
    pt, t, tok, qt = tree_case()
    torch.library.opcheck(
        torch.ops.specops.verify_tree.default,
        (pt, t.first_child, t.next_sibling, 4, tok, qt, True, None, 3, None, 0, None, 0.0,
         *NO_GROUP, False, None, "reference"),
        test_utils=tu,
    )  # fmt: skip
    kc = Tree.kary_chain(2, 2, 8)
    torch.library.opcheck(
        torch.ops.specops.verify_jacobi.default,
        (pt, tok, qt, kc.first_child, kc.next_sibling, True, 3, None, 3, None, 0, None, 0.0,
         *NO_GROUP, None, "reference"),
        test_utils=tu,
    )  # fmt: skip
    torch.library.opcheck(
        torch.ops.specops.verify_jacobi.default,
        (
            pt,
            tok,
            None,
            None,
            None,
            False,
            1,
            None,
            3,
            None,
            0,
            None,
            0.0,
            *NO_GROUP,
            None,
            "reference",
        ),
        test_utils=tu,
    )
    torch.library.opcheck(
        torch.ops.specops.path_acceptance.default,
        (pt, qt, t.parents, 4, tok, "reference"),
        test_utils=tu,
    )


def test_compile_smoke():
    p, x, q = chain_case()
    pt, t, tok, qt = tree_case()
    kc = Tree.kary_chain(2, 2, 8)

    def step(p, x, q, pt, tok, qt):
        c = specops.verify_chain(p, x, q, seed=1)
        tr = specops.verify_tree(pt, t, tok, qt, seed=2)
        j = specops.verify_jacobi(pt, tok, qt, tree=kc, num_candidates=2, seed=3)
        kappa, exp_len = specops.path_acceptance(pt, qt, t, tok)
        return c.tokens, tr.tokens, j.next_window, j.candidates, kappa, exp_len

    with specops.validation(False):
        got = torch.compile(step, backend="aot_eager", fullgraph=True)(p, x, q, pt, tok, qt)
        want = step(p, x, q, pt, tok, qt)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
