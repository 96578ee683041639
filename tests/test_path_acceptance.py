"""path_acceptance kernels (C++ CPU twin "cpu", CUDA "cuda") against the reference on fresh random
inputs: random, chain, k-ary and SJD-PAC trees, batched trees with different leaf counts,
deterministic drafts, -1 padding, out-of-range ids, zero-probability drafts, one-hot targets, and
raw parent arrays that no Tree would accept (the kernels must stay in bounds and follow the
reference's rule: a parent outside [0, n) is the root).

The CPU twin multiplies and sums in the reference's order, so it is bit-exact; the CUDA kernel
folds the paths by pointer jumping (another float64 association), so it agrees to one float32
rounding."""

from __future__ import annotations

import pytest
import torch
from helpers import CUDA_SIM, random_probs
from helpers import gen as _gen
from verify_stats import random_parents

import specops
from specops import Tree
from specops.reference import verify as rv

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu), CUDA_SIM]


def _check(be, target, draft, parents, tokens, num_paths):
    """The op on backend ``be`` (inputs moved to its device) against the CPU reference."""
    dev = "cuda" if be == "cuda" else "cpu"
    want = rv._path_acceptance(target, draft, parents, tokens, num_paths)
    got = torch.ops.specops.path_acceptance(
        target.to(dev),
        None if draft is None else draft.to(dev),
        parents.to(dev),
        num_paths,
        tokens.to(dev),
        be,
    )
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == torch.float32
        if be == "cpu":
            assert torch.equal(g, w)
        else:
            torch.testing.assert_close(g.cpu(), w, rtol=1e-6, atol=1e-30)


def _drafts(b, n, v, gen, *, pad_frac=0.1, oob_frac=0.05):
    """Tokens with some -1 padding and some ids outside [0, v)."""
    x = torch.randint(0, v, (b, n), generator=gen)
    r = torch.rand(b, n, generator=gen)
    x = torch.where(r < pad_frac, -1, x)
    x = torch.where((r >= pad_frac) & (r < pad_frac + oob_frac), v + 3, x)
    return x


def _mixed(p, gen, w=0.7):
    """A draft near p (so that many alphas are < 1 but not tiny), with some exact zeros."""
    q = w * p + (1 - w) * random_probs(*p.shape, generator=gen, zero_frac=0.2)
    return q / q.sum(-1, keepdim=True)


def _trees(n, b, gen):
    yield "random", Tree.from_parents(random_parents(b, n, gen))
    yield "shared", Tree.from_parents(random_parents(1, n, gen))
    yield "chain", Tree.chain(n)
    if n >= 7:
        yield "kary_chain", Tree.kary_chain(2, 3, n)
    yield "windowed", Tree.from_parents(random_parents(b, n, gen, window=2))


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize(
    "b,n,v",
    [(1, 1, 7), (3, 2, 7), (3, 5, 111), (17, 13, 111), (3, 64, 32000), (1, 40, 65536)],
)
def test_matches_reference(be, b, n, v):
    gen = _gen(1000 * b + 10 * n + v % 97)
    p = random_probs(b, n, v, generator=gen, sharpness=3.0, zero_frac=0.1)
    q = _mixed(p, gen)
    x = _drafts(b, n, v, gen)
    for _, tree in _trees(n, b, gen):
        for draft in (q, None):
            for tok in (x, x.int()):
                _check(be, p, draft, tree.parents, tok, rv._num_leaves(tree))


@pytest.mark.parametrize("be", BACKENDS)
def test_special_rows(be):
    """One-hot and near-one-hot targets, drafts with q(x) = 0 < p(x) (alpha = 1), drafts of
    p(x) = 0 (alpha = 0), and every child rejected."""
    gen = _gen(7)
    b, n, v = 4, 9, 111
    tree = Tree.from_parents(random_parents(b, n, gen))
    x = torch.randint(0, v, (b, n), generator=gen)
    onehot = torch.nn.functional.one_hot(x, v).float()
    near = 0.999 * onehot + 0.001 / v
    zero_q = random_probs(b, n, v, generator=gen)
    zero_q.scatter_(-1, x[..., None], 0.0)  # q(x) = 0 wherever p row n is read with token x
    for target in (onehot, near, 1.0 - onehot):
        for draft in (near, zero_q, None):
            _check(be, target, draft, tree.parents, x, rv._num_leaves(tree))


@pytest.mark.parametrize("be", BACKENDS)
def test_garbage_parents_stay_in_bounds(be):
    """Raw parent arrays with entries outside [0, n): such a parent counts as the root."""
    gen = _gen(11)
    b, n, v = 5, 33, 111
    p = random_probs(b, n, v, generator=gen)
    q = _mixed(p, gen)
    x = torch.randint(0, v, (b, n), generator=gen)
    for trial in range(6):
        par = torch.randint(-(2**31), 2**31 - 1, (b, n), generator=gen, dtype=torch.int64)
        if trial % 2:
            par = torch.randint(-3, n + 3, (b, n), generator=gen)  # near the bounds
        par = par.int()
        for num_paths in (1, n):
            _check(be, p, q, par, x, num_paths)


@pytest.mark.parametrize("be", BACKENDS)
def test_large_tree(be):
    """More nodes than the CUDA kernel keeps in shared memory (global workspace path)."""
    gen = _gen(5)
    b, n, v = 2, 1500, 7
    p = random_probs(b, n, v, generator=gen, sharpness=0.1)
    q = _mixed(p, gen, w=0.95)
    x = torch.randint(0, v, (b, n), generator=gen)
    for tree in (Tree.chain(n), Tree.from_parents(random_parents(b, n, gen, window=40))):
        _check(be, p, q, tree.parents, x, rv._num_leaves(tree))


def test_public_op_picks_the_twin_and_checks():
    gen = _gen(3)
    b, n, v = 3, 8, 50
    tree = Tree.kary_chain(2, 2, n)
    p = random_probs(b, n, v, generator=gen)
    q = _mixed(p, gen)
    x = torch.randint(0, v, (b, n), generator=gen)
    got = specops.path_acceptance(p, q, tree, x)
    ref = specops.path_acceptance(p, q, tree, x, backend="reference")
    cpu = specops.path_acceptance(p, q, tree, x, backend="cpu")
    for g, r, c in zip(got, ref, cpu):
        assert torch.equal(g, r) and torch.equal(c, r)
    with pytest.raises(RuntimeError, match="backend 'cuda' is not available for cpu tensors"):
        specops.path_acceptance(p, q, tree, x, backend="cuda")


@pytest.mark.parametrize("be", BACKENDS)
def test_opcheck_compiled_backends(be):
    dev = "cuda" if be == "cuda" else "cpu"
    gen = _gen(9)
    b, n, v = 3, 13, 111
    tree = Tree.from_parents(random_parents(b, n, gen))
    p = random_probs(b, n, v, generator=gen)
    q = _mixed(p, gen)
    x = torch.randint(0, v, (b, n), generator=gen)
    for draft in (q, None):
        torch.library.opcheck(
            torch.ops.specops.path_acceptance.default,
            (p.to(dev), None if draft is None else draft.to(dev), tree.parents.to(dev),
             rv._num_leaves(tree), x.to(dev), be),
            test_utils=("test_schema", "test_faketensor"),
        )  # fmt: skip


@pytest.mark.gpu
def test_cuda_graph_replay():
    """Captured once, replayed on new inputs written in place: the same results as eager."""
    gen = _gen(13)
    b, n, v = 4, 40, 32000
    tree = Tree.kary_chain(3, 3, n).to("cuda")
    p = random_probs(b, n, v, generator=gen).cuda()
    q = _mixed(p.cpu(), gen).cuda()
    x = torch.randint(0, v, (b, n), generator=gen).cuda()
    with specops.validation(False):
        specops.path_acceptance(p, q, tree, x, backend="cuda")  # warm-up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kappa, exp_len = specops.path_acceptance(p, q, tree, x, backend="cuda")
        for _ in range(3):
            p.copy_(random_probs(b, n, v, generator=gen).cuda())
            x.copy_(torch.randint(0, v, (b, n), generator=gen).cuda())
            graph.replay()
            want = specops.path_acceptance(p, q, tree, x, backend="cuda")
            assert torch.equal(kappa, want[0]) and torch.equal(exp_len, want[1])
