"""The Python-to-Triton boundary (issue #14), tree_attention and append_kv: strided lengths,
block tables, masks and caches give the results of their contiguous copies, no access outside
the tensor arguments (tests/triton_bounds.py), and edge sizes (B, N, Hkv, D, S, P, page = 0)
agree with the reference."""

from __future__ import annotations

import pytest
import torch
from triton_bounds import _strided, check_bounds

import specops


@pytest.fixture
def bounds(monkeypatch):
    yield from check_bounds(monkeypatch)


def _attn_case(g, b=3, n=5, hq=4, hkv=2, d=16, page=4, width=6, paged=True):
    from specops import Tree

    q = torch.randn(b, n, hq, d, generator=g)
    if paged:
        num_pages = b * width + 1
        kc = torch.randn(num_pages, page, hkv, d, generator=g)
        bt = torch.randperm(num_pages, generator=g)[: b * width].view(b, width).to(torch.int32)
        cap = width * page
    else:
        cap = page * width
        kc = torch.randn(b, cap, hkv, d, generator=g)
        bt = None
    vc = torch.randn(kc.shape, generator=g)
    cs = torch.randint(0, cap - n + 1, (b,), generator=g, dtype=torch.int32)
    parents = torch.tensor([-1, 0, 0, 1, 2][:n])
    tree = Tree.from_parents(parents)
    return q, kc, vc, cs, tree, bt


@pytest.mark.parametrize("paged", [True, False])
def test_tree_attention_strided_lengths_table_mask_and_caches(bounds, paged):
    g = torch.Generator().manual_seed(7)
    q, kc, vc, cs, tree, bt = _attn_case(g, paged=paged)
    mask = tree.mask_bits
    want = specops.tree_attention(
        q, kc, vc, cs, mask, block_table=bt, return_lse=True, backend="reference"
    )
    got = specops.tree_attention(
        _strided(q), _strided(kc), _strided(vc), _strided(cs), mask.expand(q.shape[0], -1, -1),
        block_table=None if bt is None else bt.t().contiguous().t(),
        return_lse=True, backend="triton",
    )  # fmt: skip
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    # one length for every request, as a stride-0 view
    one = cs[:1].clone()
    want = specops.tree_attention(q, kc, vc, one.repeat(3), mask, block_table=bt,
                                  backend="reference")  # fmt: skip
    got = specops.tree_attention(q, kc, vc, one.expand(3), mask, block_table=bt, backend="triton")
    torch.testing.assert_close(got, want)


def test_tree_attention_block_table_inside_a_bigger_buffer(bounds):
    """Trailing entries of each table row (past the capacity the kernel uses) are garbage."""
    g = torch.Generator().manual_seed(8)
    q, kc, vc, cs, tree, bt = _attn_case(g)
    big = torch.full((bt.shape[0], bt.shape[1] + 3), 10**6, dtype=torch.int32)
    big[:, : bt.shape[1]] = bt
    want = specops.tree_attention(q, kc, vc, cs, tree, block_table=bt, backend="reference")
    got = specops.tree_attention(
        q, kc, vc, cs, tree, block_table=big[:, : bt.shape[1]], backend="triton"
    )
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("paged", [True, False])
def test_append_kv_strided_lengths_table_and_caches(bounds, paged):
    g = torch.Generator().manual_seed(9)
    q, kc, vc, cs, tree, bt = _attn_case(g, paged=paged)
    k = torch.randn(q.shape[0], q.shape[1], kc.shape[2], kc.shape[3], generator=g)
    v = torch.randn(k.shape, generator=g)
    want_k, want_v = kc.clone(), vc.clone()
    specops.append_kv(want_k, want_v, k, v, cs, block_table=bt, backend="reference")
    got_k, got_v = _strided(kc), _strided(vc)
    specops.append_kv(
        got_k, got_v, _strided(k), v.transpose(0, 1).contiguous().transpose(0, 1),
        _strided(cs), block_table=None if bt is None else _strided(bt), backend="triton",
    )  # fmt: skip
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


def test_append_kv_rows_outside_the_cache_read_no_block_table(bounds):
    """Rows past the capacity are dropped without reading the block table for them."""
    g = torch.Generator().manual_seed(10)
    q, kc, vc, cs, tree, bt = _attn_case(g)
    cap = bt.shape[1] * kc.shape[1]
    cs = torch.tensor([cap - 2, cap, cap + 7], dtype=torch.int32)
    k = torch.randn(q.shape[0], q.shape[1], kc.shape[2], kc.shape[3], generator=g)
    want_k, want_v = kc.clone(), vc.clone()
    with specops.validation(False):
        specops.append_kv(want_k, want_v, k, k, cs, block_table=bt, backend="reference")
        got_k, got_v = kc.clone(), vc.clone()
        specops.append_kv(got_k, got_v, k, k, cs, block_table=bt, backend="triton")
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


_ATTN_EDGES = {
    "b0": dict(b=0),
    "n0": dict(n=0),
    "d0": dict(d=0),
    "hkv0": dict(hq=0, hkv=0),
    "s0": dict(s=0),
    "p0": dict(paged=(0, 4, 2)),
    "page0": dict(paged=(2, 0, 2)),
    "cols0": dict(paged=(2, 4, 0)),
}


def _edge_inputs(b=2, n=3, hq=2, hkv=2, d=4, s=8, paged=None):
    g = torch.Generator().manual_seed(11)
    q = torch.randn(b, n, hq, d, generator=g)
    if paged is None:
        kc, bt = torch.randn(b, s, hkv, d, generator=g), None
    else:
        pages, page, cols = paged
        kc = torch.randn(pages, page, hkv, d, generator=g)
        bt = torch.zeros(b, cols, dtype=torch.int32)
    vc = torch.randn(kc.shape, generator=g)
    k = torch.randn(b, n, hkv, d, generator=g)
    mask = torch.full((1, n, max(1, (n + 31) // 32)), -1, dtype=torch.int32)
    return q, kc, vc, torch.zeros(b, dtype=torch.int32), mask, bt, k


def _outcome(fn, backend):
    try:
        return fn(backend)
    except ValueError as e:
        return ("ValueError", str(e))


@pytest.mark.parametrize("case", sorted(_ATTN_EDGES))
def test_attention_edge_sizes_agree_with_the_reference(case, bounds):
    def attn(backend):
        q, kc, vc, cs, mask, bt, _ = _edge_inputs(**_ATTN_EDGES[case])
        with specops.validation(False):
            return specops.tree_attention(
                q, kc, vc, cs, mask, block_table=bt, return_lse=True, backend=backend
            )

    def append(backend):
        q, kc, vc, cs, mask, bt, k = _edge_inputs(**_ATTN_EDGES[case])
        with specops.validation(False):
            specops.append_kv(kc, vc, k, -k, cs, block_table=bt, backend=backend)
        return kc, vc

    for fn in (attn, append):
        want, got = _outcome(fn, "reference"), _outcome(fn, "triton")
        if isinstance(want, tuple) and want[0] == "ValueError":
            assert got == want
        else:
            for w, o in zip(want, got):
                assert w.shape == o.shape
                torch.testing.assert_close(o, w)
