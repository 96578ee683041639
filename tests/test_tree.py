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


def deep_parents(n, gen):
    """Mostly a chain (deep trees cross many 32-node words), with random branches."""
    par = [-1]
    for i in range(1, n):
        jump = int(torch.randint(0, 3, (1,), generator=gen)) if i % 7 else i - 1
        par.append(max(0, i - 1 - jump))
    return par


@pytest.mark.parametrize("n,kind", [(257, "random"), (257, "deep"), (700, "deep")])
def test_derived_fields_large(n, kind):
    """Trees spanning many 32-bit words agree with a brute-force walk (rows differ)."""
    gen = torch.Generator().manual_seed(n)
    make = random_parents if kind == "random" else deep_parents
    rows = [make(n, gen) for _ in range(2)]
    t = Tree.from_parents(torch.tensor(rows))
    assert t.mask_bits.shape == (2, n, (n + 31) // 32)
    for b, par in enumerate(rows):
        anc = brute_ancestors(par)
        assert torch.equal(t.ancestors[b], anc)
        assert torch.equal(t.depth[b].long(), anc.sum(-1) - 1)
        kids = {}
        for m in range(1, n):
            kids.setdefault(par[m], []).append(m)
        assert t.first_child[b].tolist() == [kids[q][0] if q in kids else -1 for q in range(n)]
        nxt = [-1] * n
        for sib in kids.values():
            for x, y in zip(sib, sib[1:]):
                nxt[x] = y
        assert t.next_sibling[b].tolist() == nxt
        leaves = [q for q in range(n) if q not in kids]
        paths = t.paths()[b]
        assert paths.shape[1] == int(t.depth.max()) + 1
        for i, leaf in enumerate(leaves):
            want = anc[leaf].nonzero().flatten().tolist()
            assert paths[i].tolist() == want + [-1] * (paths.shape[1] - len(want))
        assert (paths[len(leaves) :] == -1).all()


def test_unvalidated_out_of_range_parents_count_as_roots():
    # validate=False trusts the caller; entries outside [0, n) must still not read out of
    # bounds or loop: node n then has no parent (1 -> 5 is forward, 4 -> -7 negative)
    t = Tree.from_parents(torch.tensor([-1, 5, 0, 2, -7, 1]), validate=False)
    assert t.depth.tolist() == [[0, 0, 1, 2, 0, 1]]
    assert unpack_bits(t.mask_bits[0], 6)[3].nonzero().flatten().tolist() == [0, 2, 3]
    assert t.first_child.tolist() == [[2, 5, 3, -1, -1, -1]]
    assert t.next_sibling.tolist() == [[-1] * 6]


def test_factories_match_from_parents():
    for t in (
        Tree.chain(40, batch=3),
        Tree.kary(3, 4, batch=3),
        Tree.kary_chain(2, 3, 70, batch=3),
    ):
        ref = Tree.from_parents(t.parents)
        for name in ("parents", "depth", "mask_bits", "first_child", "next_sibling", "is_leaf"):
            got = getattr(t, name)
            assert got.is_contiguous() and torch.equal(got, getattr(ref, name)), name
        assert (t._path_width, t._num_leaves) == (ref._path_width, ref._num_leaves)


def test_size_guard_raises_before_allocating():
    assert Tree.MAX_NODES == 16384
    # (2^16 - 1) nodes: the old [B, N, N] derivation ran out of memory here
    with pytest.raises(ValueError, match=r"specops\.Tree\.kary: depth must .* 65535 nodes"):
        Tree.kary(2, 16)
    with pytest.raises(ValueError, match="depth must"):
        Tree.kary(10**30, 10**6)  # no k^depth computed
    with pytest.raises(ValueError, match="n must"):
        Tree.chain(Tree.MAX_NODES + 1)
    with pytest.raises(ValueError, match="length must"):
        Tree.kary_chain(2, 3, Tree.MAX_NODES + 1)
    with pytest.raises(ValueError, match="MAX_NODES"):
        Tree.from_parents(torch.arange(-1, Tree.MAX_NODES, dtype=torch.int32))
    with pytest.raises(ValueError, match="batch must"):  # B * N * N/32 words past int32
        Tree.chain(Tree.MAX_NODES, batch=256)


def test_documented_max_builds():
    """Tree.MAX_NODES nodes build in O(N * N/32) memory (32 MiB of mask_bits; an [N, N] float
    intermediate would take 1 GiB and minutes), with every field right."""
    n = Tree.MAX_NODES
    t = Tree.chain(n)
    assert t.mask_bits.shape == (1, n, n // 32)
    assert torch.equal(t.depth[0], torch.arange(n, dtype=torch.int32))
    for row in (0, 31, 32, 1000, n - 1):  # row r: bits 0..r
        assert torch.equal(unpack_bits(t.mask_bits[0, row], n), torch.arange(n) <= row)
    assert t.paths().tolist() == [[list(range(n))]]
    t = Tree.kary(2, 14)  # 16383 nodes, 8192 leaves
    par = t.parents[0].tolist()
    for node in (0, 1, 2, 100, 5000, 16382):
        want, j = set(), node
        while j != -1:
            want.add(j)
            j = par[j]
        got = unpack_bits(t.mask_bits[0, node], t.num_nodes).nonzero().flatten().tolist()
        assert set(got) == want and t.depth[0, node] == len(want) - 1
    paths = t.paths()
    assert paths.shape == (1, 8192, 14) and (paths[0, :, -1] == torch.arange(8191, 16383)).all()
    assert t._path_width == 14 and t._num_leaves == 8192


def test_empty_batch():
    for t in (
        Tree.from_parents(torch.zeros(0, 5, dtype=torch.int32)),
        Tree.chain(5, batch=0),
        Tree.kary(4, 2, batch=0).expand(0),
        Tree.kary_chain(2, 2, 5, batch=0),
        Tree.chain(5).expand(0),
    ):
        assert t.batch_size == 0 and t.num_nodes == 5
        assert t.mask_bits.shape == (0, 5, 1) and t.depth.shape == (0, 5)
        assert t.first_child.shape == t.next_sibling.shape == t.is_leaf.shape == (0, 5)
        assert t.paths().shape[:2] == (0, 0) and t.max_depth() == 0


def test_empty_batch_through_the_verify_ops():
    import specops

    v = 6
    tree = Tree.kary(2, 3, batch=0)
    tok = torch.zeros(0, 7, dtype=torch.int32)
    for backend in ("auto", "reference"):
        r = specops.verify_tree(
            torch.rand(0, 7, v), tree, tok, torch.rand(0, 7, v), backend=backend
        )
        assert r.path.shape == r.tokens.shape == (0, 3) and r.num_accepted.shape == (0,)
        kappa, exp_len = specops.path_acceptance(
            torch.rand(0, 7, v), torch.rand(0, 7, v), tree, tok, backend=backend
        )
        assert kappa.shape == exp_len.shape == (0, 4)
        r = specops.verify_jacobi(
            torch.rand(0, 7, v), tok, torch.rand(0, 7, v), tree=Tree.kary_chain(2, 2, 7, batch=0),
            backend=backend,
        )  # fmt: skip
        assert r.next_window.shape == (0, 7) and r.num_accepted.shape == (0,)
    t = specops.build_dynamic_tree(
        torch.zeros(0, dtype=torch.int32), torch.zeros(0, 3, 2, 2, dtype=torch.int32),
        torch.zeros(0, 3, 2, 2), torch.zeros(0, 2, 2, dtype=torch.int32), 5,
    )  # fmt: skip
    assert t.tree.batch_size == 0 and t.draft_tokens.shape == (0, 5)


def test_static_sizes_are_read_only_properties():
    """path_width (max depth + 1) and num_leaves (most leaves of a row): static for the
    classmethods, read once and kept for a tree whose sizes were not known; not writable;
    with_path_width states the width on a copy that shares the tensors."""
    t = Tree.kary_chain(2, 3, 10, batch=2)
    assert (t.path_width, t.num_leaves) == (3 + 10 - 7, 4)
    with pytest.raises(AttributeError):
        t.path_width = 3
    lazy = Tree._of(t._tensors())  # sizes unknown, as a tree built on the device
    assert (lazy._path_width, lazy._num_leaves) == (None, None)
    assert (lazy.path_width, lazy.num_leaves) == (t.path_width, t.num_leaves)
    assert (lazy._path_width, lazy._num_leaves) == (t.path_width, t.num_leaves)  # kept
    wide = t.with_path_width(12)
    assert wide.path_width == 12 and t.path_width == 6 and wide.num_leaves == 4
    assert wide.parents is t.parents and wide.mask_bits is t.mask_bits
    with pytest.raises(ValueError, match="width"):
        t.with_path_width(0)
    with pytest.raises(TypeError, match="width"):
        t.with_path_width(2.0)
    empty = Tree.from_parents(torch.zeros(0, 5, dtype=torch.int32))
    assert (empty.path_width, empty.num_leaves) == (1, 0)
