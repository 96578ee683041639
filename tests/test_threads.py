"""The C++ CPU twins give the same tokens for any thread count (specops.set_num_threads), and the
threaded results still equal the reference (cross-backend identity at N threads)."""

from __future__ import annotations

import pytest
import torch
from helpers import gen as _gen
from helpers import random_probs
from test_jacobi_kernels import chain_case, tree_case

import specops
from specops import Tree
from specops import reference as ref
from specops._build import has_cpp
from specops.reference import verify as rv

pytestmark = pytest.mark.skipif(not has_cpp(), reason="needs the compiled C++ module")
THREADS = (1, 2, 3)


@pytest.fixture(autouse=True)
def _restore_threads():
    n = specops.get_num_threads()
    yield
    specops.set_num_threads(max(n, 1))


def _fields(r):
    if isinstance(r, torch.Tensor):
        return (r,)
    return tuple(getattr(r, f) for f in r._fields if getattr(r, f) is not None)


def _same_for_every_count(fn, want=None):
    """fn() at 1, 2 and 3 threads: identical outputs; equal to ``want`` (the reference) if given."""
    outs = []
    for n in THREADS:
        specops.set_num_threads(n)
        outs.append(_fields(fn()))
    for o in outs[1:]:
        assert len(o) == len(outs[0])
        for a, b in zip(o, outs[0]):
            assert torch.equal(a, b)
    if want is not None:
        for a, b in zip(outs[-1], _fields(want)):
            assert torch.equal(a, b.to(a.dtype))


def test_set_num_threads_checks_and_reports():
    specops.set_num_threads(2)
    assert specops.get_num_threads() == 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="set_num_threads"):
            specops.set_num_threads(bad)


@pytest.mark.parametrize("cont", [True, False])
def test_verify_jacobi_chain(cont):
    p, x, q = chain_case(3, 24, 111, _gen(1), kind="mix")
    kw = dict(continue_after_reject=cont, num_candidates=3, seed=5)
    _same_for_every_count(
        lambda: specops.verify_jacobi(p, x, q, backend="cpu", **kw), rv.verify_jacobi(p, x, q, **kw)
    )


@pytest.mark.parametrize("kind", ["mix", "far"])
def test_verify_jacobi_tree(kind):
    t = Tree.kary_chain(3, 3, 40)
    p, x, q = tree_case(3, t, 97, _gen(2), kind=kind)
    kw = dict(tree=t, num_candidates=3, seed=7)
    _same_for_every_count(
        lambda: specops.verify_jacobi(p, x, q, backend="cpu", **kw), rv.verify_jacobi(p, x, q, **kw)
    )


def test_verify_jacobi_tree_forced_root_rejection():
    """Every child of the root rejected (p(x) = 0): the whole line is continuation work, spread
    over the threads."""
    t = Tree.kary_chain(3, 3, 64)
    p, x, q = tree_case(2, t, 501, _gen(3), kind="mix")
    kids = [c for c in range(64) if t.parents[0, c] == 0]
    for b in range(2):
        p[b, 0, x[b, kids]] = 0.0
    p[:, 0] /= p[:, 0].sum(-1, keepdim=True)
    kw = dict(tree=t, num_candidates=3, seed=11)
    want = rv.verify_jacobi(p, x, q, **kw)
    assert (want.first_reject == 0).all()
    _same_for_every_count(lambda: specops.verify_jacobi(p, x, q, backend="cpu", **kw), want)


def test_verify_chain_and_tree():
    g = _gen(4)
    b, k, v = 5, 6, 300
    p = random_probs(b, k + 1, v, generator=g)
    q = random_probs(b, k, v, generator=g)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k)
    _same_for_every_count(
        lambda: specops.verify_chain(p, x, q, seed=3, backend="cpu"),
        ref.verify_chain(p, x, q, seed=3),
    )
    t = Tree.kary(3, 2)
    pt, xt, qt = tree_case(4, t, v, g, kind="far")
    for wor in (True, False):
        _same_for_every_count(
            lambda wor=wor: specops.verify_tree(
                pt, t, xt, qt, without_replacement=wor, seed=9, backend="cpu"
            ),
            ref.verify_tree(pt, t, xt, qt, without_replacement=wor, seed=9),
        )


def test_sample_and_sample_without_replacement():
    g = _gen(5)
    p = random_probs(9, 1000, generator=g, zero_frac=0.3)
    _same_for_every_count(lambda: specops.sample(p, seed=2, backend="cpu"), ref.sample(p, seed=2))
    _same_for_every_count(
        lambda: specops.sample_without_replacement(p, 4, seed=2, backend="cpu"),
        ref.sample_without_replacement(p, 4, seed=2),
    )


def test_probs_from_logits():
    g = _gen(6)
    c = torch.randn(3, 4, 3000, generator=g) * 3
    u = torch.randn(3, 4, 3000, generator=g) * 3
    kw = dict(
        temperature=torch.tensor([0.7, 1.0, 1.3]),
        top_k=torch.tensor([50, 0, 700], dtype=torch.int32),
        top_p=torch.tensor([0.9, 0.5, 1.0]),
        cfg_scale=3.0,
        uncond_logits=u,
    )
    want = specops.probs_from_logits(c, backend="reference", **kw)
    outs = []
    for n in THREADS:
        specops.set_num_threads(n)
        outs.append(specops.probs_from_logits(c, backend="cpu", **kw))
    for o in outs[1:]:
        assert torch.equal(o, outs[0])
    assert torch.equal(outs[0] > 0, want > 0)
    torch.testing.assert_close(outs[0], want, rtol=1e-5, atol=1e-6)
