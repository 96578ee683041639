"""Preallocated outputs (``out=``): every backend writes the caller's buffers in place with the
results it would return, the derived ``<op>_out`` torch.library ops pass opcheck, and buffers of
the wrong shape, dtype or layout are rejected with an error naming them."""

from __future__ import annotations

import pytest
import torch
from helpers import NO_GROUP, gen, random_probs

import specops
from specops import Tree, _build
from specops.ops._backends import usable_backends

CPU = torch.device("cpu")


def _backends(have):
    sim = ["cuda_sim"] if "cuda" in have and _build.has_cuda_sim() else []
    return [b for b in usable_backends(CPU, have) if b != "cascade"] + sim


def _empty_like_result(res):
    """Buffers of the result's shapes and dtypes, filled with garbage."""
    return tuple(
        None if r is None else torch.full_like(r, -7 if r.dtype == torch.int32 else float("nan"))
        for r in res
    )


def _same(a, b):
    for x, y in zip(a, b):
        assert (x is None) == (y is None)
        if x is not None:
            assert torch.equal(x, y), (x, y)


def _chain():
    g = gen(0)
    b, k, v = 3, 4, 12
    t, d = random_probs(b, k + 1, v, generator=g), random_probs(b, k, v, generator=g)
    tok = torch.multinomial(d.reshape(-1, v), 1, generator=g).reshape(b, k)
    return (t, tok, d), {"seed": 5}


def _tree():
    g = gen(1)
    tree = Tree.kary(2, 3)
    b, n, v = 2, tree.num_nodes, 10
    t, d = random_probs(b, n, v, generator=g), random_probs(b, n, v, generator=g)
    tok = torch.multinomial(d.reshape(-1, v), 1, generator=g).reshape(b, n)
    return (t, tree, tok, d), {"seed": 6}


def _jacobi(tree, k):
    g = gen(2)
    b, L, v = 2, 7, 9
    t, d = random_probs(b, L, v, generator=g), random_probs(b, L, v, generator=g)
    win = torch.multinomial(d.reshape(-1, v), 1, generator=g).reshape(b, L)
    return (t, win, d), {"seed": 7, "tree": tree, "num_candidates": k}


def _path_args(tree_args):
    t, tree, tok, d = tree_args
    return (t, d, tree, tok), {}


def _wor():
    p = random_probs(2, 3, 11, generator=gen(3))
    return (p, 4), {"seed": 8}


def _attention():
    g = gen(4)
    tree = Tree.kary(2, 3)
    b, n, hq, hkv, d, s = 2, tree.num_nodes, 4, 2, 8, 24
    q = torch.randn(b, n, hq, d, generator=g)
    kc, vc = torch.randn(b, s, hkv, d, generator=g), torch.randn(b, s, hkv, d, generator=g)
    cs = torch.tensor([3, 11], dtype=torch.int32)
    return (q, kc, vc, cs, tree), {"return_lse": True}


def _attention_with_out(*args, out=None, **kw):
    """tree_attention's out= / lse_out= in the (out, lse) form of the other ops."""
    o, lse = (None, None) if out is None else out
    return specops.tree_attention(*args, **kw, out=o, lse_out=lse)


def _single(fn):
    """A one-output op in the tuple form of the others."""

    def call(*a, out=None, **kw):
        return (fn(*a, **kw, out=None if out is None else out[0]),)

    return call


def _gather():
    g = gen(5)
    return (torch.randn(2, 6, 5, generator=g), torch.tensor([[0, 5, -1], [2, 2, 1]])), {}


def _drafter():
    g = gen(6)
    emb, feats = torch.randn(9, 4, generator=g), torch.randn(2, 3, 5, generator=g)
    return (emb, torch.tensor([[0, 8, -1], [3, 3, 1]]), feats, torch.randn(2, generator=g)), {}


def _paths():
    g = gen(7)
    return (torch.randint(0, 9, (2, 3, 4), generator=g), torch.randn(9, 5, generator=g)), {}


CASES = {
    "verify_chain": (specops.verify_chain, _chain, ("cuda", "triton", "cpu", "reference")),
    "verify_tree": (specops.verify_tree, _tree, ("cuda", "cpu", "reference")),
    "verify_jacobi chain": (
        specops.verify_jacobi,
        lambda: _jacobi(None, 1),
        ("cuda", "cpu", "reference"),
    ),
    "verify_jacobi tree + candidates": (
        specops.verify_jacobi,
        lambda: _jacobi(Tree.kary_chain(2, 2, 7), 3),
        ("cuda", "cpu", "reference"),
    ),
    "sample_without_replacement": (
        _single(specops.sample_without_replacement),
        _wor,
        ("cuda", "cpu", "reference"),
    ),
    "gather_rows": (_single(specops.gather_rows), _gather, ("triton", "cpu", "reference")),
    "drafter_inputs": (_single(specops.drafter_inputs), _drafter, ("triton", "cpu", "reference")),
    "path_similarity": (_single(specops.path_similarity), _paths, ("triton", "cpu", "reference")),
    "tree_attention": (_attention_with_out, _attention, ("triton", "cpu", "reference")),
    "path_acceptance": (
        specops.path_acceptance,
        lambda: _path_args(_tree()[0]),
        ("cuda", "cpu", "reference"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_out_is_written_in_place_on_every_backend(case):
    fn, make, have = CASES[case]
    args, kw = make()
    for be in _backends(have):
        want = tuple(fn(*args, **kw, backend=be))
        out = _empty_like_result(want)
        got = fn(*args, **kw, backend=be, out=out)
        _same(tuple(got), want)
        _same(out, want)
        for o, r in zip(out, got):
            assert o is None or o is r  # the very buffers come back


@pytest.mark.parametrize("case", list(CASES))
def test_out_is_checked(case):
    fn, make, _ = CASES[case]
    args, kw = make()
    want = tuple(fn(*args, **kw, backend="reference"))
    out = [o for o in _empty_like_result(want) if o is not None]  # unused fields: left out
    # the right shape and dtype with gaps between entries: not contiguous
    strided = torch.empty(*out[-1].shape, 2, dtype=out[-1].dtype)[..., 0]
    bad_cases = [
        ([out[0].double(), *out[1:]], "must have dtype"),
        ([out[0][:1], *out[1:]], "must have shape"),
        ([*out[:-1], strided], "out(.[a-z_]+)? must be contiguous"),
    ]
    if len(out) > 1 and case != "tree_attention":  # its out= / lse_out= are two tensors
        bad_cases.append((out[:1], "out must be a tuple of"))
    for bad, words in bad_cases:
        with pytest.raises((ValueError, TypeError), match=words):
            fn(*args, **kw, out=tuple(bad))


def test_out_ops_pass_opcheck():
    (t, tok, d), _ = _chain()
    b, k1 = t.shape[:2]
    outs = (torch.empty(b, k1, dtype=torch.int32), torch.empty(b, dtype=torch.int32))
    args = (t, tok, d, None, None, 5, None, 0, None, 0.0, *NO_GROUP, False, None, False, "cpu",
            *outs)  # fmt: skip
    torch.library.opcheck(torch.ops.specops.verify_chain_out.default, args)
    (t, tree, tok, d), _ = _tree()
    i32 = torch.int32
    outs = (torch.empty(2, 3, dtype=i32), torch.empty(2, 3, dtype=i32), torch.empty(2, dtype=i32))
    args = (t, tree.first_child, tree.next_sibling, 3, tok, d, False, None, 6, None, 0, None,
            0.0, *NO_GROUP, False, None, "cpu", *outs)  # fmt: skip
    torch.library.opcheck(torch.ops.specops.verify_tree_out.default, args)


def test_out_under_torch_compile():
    (t, tok, d), _ = _chain()
    b, k1 = t.shape[:2]
    out = (torch.empty(b, k1, dtype=torch.int32), torch.empty(b, dtype=torch.int32))

    def step(t, tok, d, o0, o1):
        specops.verify_chain(t, tok, d, seed=5, backend="cpu", out=(o0, o1))

    want = specops.verify_chain(t, tok, d, seed=5, backend="cpu")
    with specops.validation(False):
        torch.compile(step, backend="aot_eager", fullgraph=True)(t, tok, d, *out)
    _same(out, want)
