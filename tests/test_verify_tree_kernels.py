"""verify_tree's walk where the CUDA kernel folds rejections in (sampling with replacement: the
residual row is never written, its entries are recomputed from the target row and the draft row,
csrc/include/specops/verify.h TreeWalk): many rejected siblings at one node, past the 16 the fold
holds (the row is then written out once and folding goes on from it), LANTERN relaxation reading
the folded row, and non-finite entries; every backend against the reference, token for token."""

from __future__ import annotations

import pytest
import torch
from helpers import gen
from test_verify_kernels import BACKENDS, run_tree

import specops
from specops import Relaxation

KINDS = ["det", "iid", "wor"]  # one-hot drafts; draft probabilities with / without replacement


def _star_of_stars(k: int, k2: int) -> specops.Tree:
    """Root with k children; its first child with k2 children of its own."""
    parents = [-1] + [0] * k + [1] * k2
    return specops.Tree.from_parents(torch.tensor([parents]))


def _drafts(kind, p, g):
    """(q or None, without_replacement)."""
    if kind == "det":
        return None, False
    q = torch.softmax(torch.log(p.clamp_min(1e-30)) + torch.randn(p.shape, generator=g), -1)
    return q, kind == "wor"


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [3, 16, 17, 40])
def test_many_rejected_siblings(be, kind, k):
    g = gen(k)
    tree = _star_of_stars(k, k)
    n, v = tree.num_nodes, 300
    p = torch.softmax(torch.randn(2, n, v, generator=g) * 2, -1)
    q, wor = _drafts(kind, p, g)
    tok = torch.randint(0, v, (2, n), generator=g)
    tok[:, 1 : k + 1] = torch.randperm(v, generator=g)[:k]  # distinct siblings (wor)
    tok[:, k + 1 :] = torch.randperm(v, generator=g)[:k]
    u = torch.rand(2, n, generator=g) * 0.2 + 0.8  # high uniforms: most siblings rejected
    # request 0: the first child of the root accepted, its children then tested one by one
    p[0, 0, tok[0, 1]] = 50.0
    u[0, 0] = 0.01
    with specops.validation(False):
        out = run_tree(be, p, tree, tok, q, uniforms=u, without_replacement=wor)
    assert out.path[0, 1] == 1  # request 0 went down to node 1


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_folded_row_with_relaxation_and_non_finite_entries(be, kind):
    g = gen(5)
    tree = _star_of_stars(20, 3)
    n, v = tree.num_nodes, 200
    p = torch.softmax(torch.randn(3, n, v, generator=g), -1)
    q, wor = _drafts(kind, p, g)
    p[:, :, ::17] = float("nan")
    p[:, :, 5::23] = -1.0
    p[:, :, 7] = float("inf")
    tok = torch.randint(0, v, (3, n), generator=g)
    nb = torch.randint(-1, v, (v, 4), generator=g).int()
    u = torch.rand(3, n, generator=g) * 0.5 + 0.5
    with specops.validation(False):
        for delta in (0.0, 0.01, 0.5):
            relax = Relaxation(nb, delta)
            run_tree(be, p, tree, tok, q, uniforms=u, relax=relax, without_replacement=wor)
        run_tree(be, p, tree, tok, q, seed=3, without_replacement=wor)


@pytest.mark.parametrize("be", BACKENDS)
def test_greedy_split_walk_matches_reference(be):
    """Greedy at small batch and a large vocabulary: CUDA splits every node row's argmax over
    blocks (verify_tree_greedy_split_kernel), then walks the chunk results.  Request 0 descends
    two levels through its last-tested children (the tie at its root row, copied into a later
    chunk, leaves the first maximal id the argmax), request 1 stops at the root; a padding node
    and a row without mass (argmax 0) on the way."""
    g = gen(21)
    tree = specops.Tree.kary(4, 3)  # N = 21: root 0, children 1..4, grandchildren 5..20
    b, n, v = 2, tree.num_nodes, 65536
    p = torch.softmax(torch.randn(b, n, v, generator=g) * 2, -1)
    top = p.argmax(-1)
    p[0, 0, v - 3] = p[0, 0, top[0, 0]]  # a later tie
    tok = (top[:, :1] + 1 + torch.randint(0, v - 2, (b, n), generator=g)) % v  # no matches
    tok[0, 4] = top[0, 0]  # root's last child matches root's argmax
    tok[0, 3] = -1  # a padding sibling before it
    p[0, 4].zero_()  # node 4 without mass: its argmax is 0
    kids4 = [c for c in range(n) if int(tree.parents[0, c]) == 4]
    tok[0, kids4[-1]] = 0
    with specops.validation(False):
        out = run_tree(be, p, tree, tok, None, greedy=True)
    assert out.num_accepted.tolist() == [2, 0]
    assert out.path[0, :3].tolist() == [0, 4, kids4[-1]]
