"""The Python-to-Triton boundary (issue #14), commit_kv: strided block tables and slots, no
block-table read past the moves, the list form's offsets cache keyed on the element size, and
edge sizes that advance cache_seqlens like the reference on every backend."""

from __future__ import annotations

import pytest
import torch
from triton_bounds import _strided, check_bounds

import specops
from specops import reference


@pytest.fixture
def bounds(monkeypatch):
    yield from check_bounds(monkeypatch)


def _paged_case(g, b=3, page=4, width=4, hkv=2, d=8, layers=2, dtype=torch.float32):
    num_pages = b * width + 1
    caches = torch.randn(layers, 2, num_pages, page, hkv, d, generator=g).to(dtype)
    bt = torch.randperm(num_pages, generator=g)[: b * width].view(b, width).to(torch.int32)
    return caches, bt


def test_commit_kv_paged_reads_no_block_table_entry_past_the_moves(bounds):
    """Full caches (cs + m = capacity) and rows with m < M: the lanes past the moves would read
    block-table entries past the row (past the table for the last request).  The table is a view
    of a bigger buffer whose other entries are garbage page ids."""
    g = torch.Generator().manual_seed(4)
    caches, bt = _paged_case(g)
    cap = bt.shape[1] * caches.shape[3]
    big = torch.full((bt.shape[0] + 2, 2 * bt.shape[1]), 10**6, dtype=torch.int32)
    big[1 : 1 + bt.shape[0], : bt.shape[1]] = bt
    bt_view = big[1 : 1 + bt.shape[0], : bt.shape[1]]
    cs = torch.tensor([2, cap - 1, cap - 3], dtype=torch.int32)
    slots = torch.tensor([[1, 4, 6, 9], [0, -1, -1, -1], [0, 1, 2, -1]], dtype=torch.int32)
    want_c, want_cs = caches.clone(), cs.clone()
    reference.commit_kv(want_c, want_cs, slots, block_table=bt)
    got_c, got_cs = caches.clone(), cs.clone()
    specops.commit_kv(got_c, got_cs, slots, block_table=bt_view, backend="triton")
    assert torch.equal(got_cs, want_cs) and torch.equal(got_c, want_c)
    assert got_cs.tolist() == [6, cap, cap]


def test_commit_kv_strided_block_table_and_slots(bounds):
    g = torch.Generator().manual_seed(5)
    caches, bt = _paged_case(g)
    cs = torch.tensor([1, 0, 5], dtype=torch.int32)
    slots = torch.tensor([[0, 2, 3], [1, -1, -1], [0, 1, 2]])
    want_c, want_cs = caches.clone(), cs.clone()
    reference.commit_kv(want_c, want_cs, slots, block_table=bt)
    for table in (_strided(bt), bt.t().contiguous().t()):
        got_c, got_cs = caches.clone(), cs.clone()
        specops.commit_kv(got_c, got_cs, _strided(slots), block_table=table, backend="triton")
        assert torch.equal(got_cs, want_cs) and torch.equal(got_c, want_c)
    with pytest.raises(ValueError, match="cache_seqlens must be contiguous"):
        specops.commit_kv(caches, _strided(cs), slots, block_table=bt, backend="triton")


def test_commit_kv_list_offsets_cache_is_keyed_on_the_element_size(bounds):
    """The same slab addresses seen first as float32 then as float16: the per-layer offsets (in
    elements) must not be reused across element sizes."""
    g = torch.Generator().manual_seed(6)
    layers, b, s, hkv, d = 2, 2, 12, 2, 4
    store = torch.randn(2 * layers + 1, b, s, hkv, d, generator=g)
    cs = torch.tensor([1, 3], dtype=torch.int32)
    slots = torch.tensor([[0, 2, 4], [1, 3, -1]], dtype=torch.int32)
    for dtype in (torch.float32, torch.float16):
        view = store.view(dtype)  # float16: last dim 2 d, same addresses
        pairs = [(view[2 * i + 1], view[2 * i + 2]) for i in range(layers)]
        bounds.allow(*[t for p in pairs for t in p])
        want_pairs = [(k.clone(), v.clone()) for k, v in pairs]
        want_cs = cs.clone()
        reference.commit_kv(want_pairs, want_cs, slots)
        before = store.clone()
        got_cs = cs.clone()
        specops.commit_kv(pairs, got_cs, slots, backend="triton")
        assert torch.equal(got_cs, want_cs)
        bits = torch.int16 if dtype == torch.float16 else torch.int32  # float16 bits hold NaNs
        for (k, v), (wk, wv) in zip(pairs, want_pairs):
            assert torch.equal(k.view(bits), wk.view(bits))
            assert torch.equal(v.view(bits), wv.view(bits))
        assert torch.equal(store[0], before[0])  # the slab before the first is untouched
        store.copy_(before)


@pytest.mark.parametrize("backend", ["reference", "cpu", "triton"])
@pytest.mark.parametrize(
    "case", ["hkv0", "d0", "s0", "b0", "m0", "layers0", "p0", "page0", "cols0"]
)
def test_commit_kv_edge_sizes_advance_like_the_reference(backend, case):
    """Caches without elements move nothing, but cache_seqlens advances exactly as the reference
    counts m; no layer or no slot: nothing advances."""
    size = dict(layers=2, b=2, s=8, hkv=2, d=4, m=3)
    if case[:-1] in size:  # "hkv0" ... "layers0": that size is 0
        size[case[:-1]] = 0
    layers, b, s, hkv, d, m = size.values()
    bt = None
    shape = [layers, 2, b, s, hkv, d]
    if case in ("p0", "page0", "cols0"):
        pages, page, cols = {"p0": (0, 4, 2), "page0": (3, 0, 2), "cols0": (3, 4, 0)}[case]
        shape = [layers, 2, pages, page, hkv, d]
        bt = torch.zeros(b, cols, dtype=torch.int32)
    caches = torch.zeros(shape)
    cs = torch.tensor([1, 2][:b], dtype=torch.int32)
    slots = torch.tensor([[0, 2, 3], [1, -1, -1]], dtype=torch.int32)[:b, :m]
    want = cs.clone()
    if layers:
        with specops.validation(False):
            specops.commit_kv(caches.clone(), want, slots, block_table=bt, backend="reference")
    expect = {"hkv0": [4, 3], "d0": [4, 3], "b0": [], "m0": [1, 2], "layers0": [1, 2]}
    assert want.tolist() == expect.get(case, [1, 2])
    with specops.validation(False):
        got = cs.clone()
        if layers:
            specops.commit_kv(caches, got, slots, block_table=bt, backend=backend)
            assert torch.equal(got, want)
        if caches.shape[0]:
            got = cs.clone()
            pairs = [(caches[i, 0], caches[i, 1]) for i in range(layers)]
            specops.commit_kv(pairs, got, slots, block_table=bt, backend=backend)
            assert torch.equal(got, want)
