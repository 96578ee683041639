import pytest
import torch

from specops import Tree
from specops.tree import pack_bits, unpack_bits


def brute_ancestors(parents):
    n = len(parents)
    anc = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j != -1:
            anc[i, j] = True
            j = parents[j]
    return anc


def random_parents(n, gen):
    return [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]


@pytest.mark.parametrize("n", [1, 2, 5, 31, 32, 33, 64, 100])
def test_from_parents_derived_fields(n):
    gen = torch.Generator().manual_seed(n)
    rows = [random_parents(n, gen) for _ in range(3)]
    t = Tree.from_parents(torch.tensor(rows))
    assert t.mask_bits.shape == (3, n, (n + 31) // 32)
    assert t.mask_bits.dtype == torch.int32
    for b, par in enumerate(rows):
        anc = brute_ancestors(par)
        assert torch.equal(unpack_bits(t.mask_bits[b], n), anc)
        assert torch.equal(t.depth[b].long(), anc.sum(-1) - 1)
        for node in range(n):
            kids = [m for m in range(n) if par[m] == node]
            assert t.first_child[b, node] == (kids[0] if kids else -1)
            if node > 0:
                sibs = [m for m in range(node + 1, n) if par[m] == par[node]]
                assert t.next_sibling[b, node] == (sibs[0] if sibs else -1)
        paths = t.paths()[b]
        leaves = [m for m in range(n) if not any(par[k] == m for k in range(n))]
        for i, leaf in enumerate(leaves):
            path = [x for x in paths[i].tolist() if x >= 0]
            assert path[-1] == leaf and path[0] == 0
            assert all(par[path[k + 1]] == path[k] for k in range(len(path) - 1))


def test_chain_kary_kary_chain():
    assert Tree.chain(4).parents.tolist() == [[-1, 0, 1, 2]]
    t = Tree.kary(3, 3)
    assert t.num_nodes == 13 and t.depth.max() == 2
    assert Tree.kary(1, 5).parents.tolist() == Tree.chain(5).parents.tolist()
    t = Tree.kary_chain(3, 3, 20)
    assert t.num_nodes == 20
    par = t.parents[0].tolist()
    assert par[:13] == Tree.kary(3, 3).parents[0].tolist()
    # chain hangs off the first leaf (0 -> 1 -> 4) and continues one node per slot
    assert par[13] == 4 and par[14:] == list(range(13, 19))
    assert t.depth[0, -1] == 2 + 7
    assert Tree.kary_chain(2, 2, 3).parents.tolist() == [[-1, 0, 0]]
    with pytest.raises(ValueError, match="length"):
        Tree.kary_chain(3, 3, 12)


def test_batched_and_expand():
    t = Tree.chain(5).expand(4)
    assert t.parents.shape == (4, 5) and t.mask_bits.shape == (4, 5, 1)


def test_pack_unpack_roundtrip():
    gen = torch.Generator().manual_seed(0)
    m = torch.rand(3, 7, 70, generator=gen) < 0.5
    assert torch.equal(unpack_bits(pack_bits(m), 70), m)


@pytest.mark.parametrize(
    "parents,match",
    [
        ([0, 0, 1], "must be -1"),
        ([-1, 0, -1], "two roots"),
        ([-1, 0, 2], "out of range"),
        ([-1, 5, 0], "out of range"),
        ([-1, -2, 0], "out of range"),
        ([-1, 2**32, 1], "out of range"),  # int64: would wrap to parent 0 as int32
        ([2**32 - 1, 0], "must be -1"),  # would wrap to -1
    ],
)
def test_invalid_parents(parents, match):
    with pytest.raises(ValueError, match=match):
        Tree.from_parents(parents)


def test_invalid_types():
    with pytest.raises(TypeError, match="integer"):
        Tree.from_parents(torch.tensor([-1.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        Tree.from_parents(torch.zeros(1, 2, 3, dtype=torch.int32))
