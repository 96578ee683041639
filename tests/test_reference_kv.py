"""The commit_kv reference against its contract: a plain Python loop over requests and moves."""

import pytest
import torch

from specops import reference


def _oracle(caches, cs, slots, block_table=None):
    """Per request: the valid prefix (module docstring of specops.reference.kv), moved from a
    snapshot; returns (new caches, new seqlens)."""
    caches = caches.clone()
    old = caches.clone()
    cs = cs.clone()
    layers, _, lead, width = caches.shape[:4]
    capacity = width if block_table is None else block_table.shape[1] * width
    for b in range(cs.shape[0]):
        c = int(cs[b])
        row = [int(x) for x in slots[b]]
        m = 0
        for i, s in enumerate(row):
            if s < 0 or c < 0 or (i > 0 and s <= row[i - 1]) or c + s >= capacity:
                break
            if block_table is not None:
                pages = [int(block_table[b, (c + x) // width]) for x in (s, i)]
                if any(p < 0 or p >= lead for p in pages):
                    break
            m += 1
        for i in range(m):
            src, dst = c + row[i], c + i
            if block_table is None:
                caches[:, :, b, dst] = old[:, :, b, src]
            else:
                sp, so = int(block_table[b, src // width]), src % width
                dp, do = int(block_table[b, dst // width]), dst % width
                caches[:, :, dp, do] = old[:, :, sp, so]
        cs[b] = c + m
    return caches, cs


def test_overlapping_moves_and_in_place_prefix():
    g = torch.Generator().manual_seed(0)
    caches = torch.randn(2, 2, 2, 12, 1, 3, generator=g)
    cs = torch.tensor([1, 4], dtype=torch.int32)
    # request 0: slot 2 -> 1 while slot 5 -> 2 (a tree path 0 -> 2 -> 5); request 1: in place
    slots = torch.tensor([[0, 2, 5, -1], [0, 1, 2, 3]], dtype=torch.int32)
    got, got_cs = caches.clone(), cs.clone()
    reference.commit_kv(got, got_cs, slots)
    want = caches.clone()
    want[:, :, 0, 2] = caches[:, :, 0, 3]
    want[:, :, 0, 3] = caches[:, :, 0, 6]
    assert torch.equal(got, want)
    assert got_cs.tolist() == [4, 8]


@pytest.mark.parametrize("paged", [False, True])
def test_matches_loop_oracle_on_random_paths(paged):
    g = torch.Generator().manual_seed(1)
    layers, b, hkv, d, page = 3, 4, 2, 4, 4
    width_pages = 6
    for trial in range(20):
        if paged:
            num_pages = b * width_pages + 3
            caches = torch.randn(layers, 2, num_pages, page, hkv, d, generator=g)
            bt = torch.randperm(num_pages, generator=g)[: b * width_pages].view(b, width_pages)
            bt = bt.to(torch.int32)
            capacity = width_pages * page
        else:
            capacity = 20
            caches = torch.randn(layers, 2, b, capacity, hkv, d, generator=g)
            bt = None
        cs = torch.randint(0, capacity - 8, (b,), generator=g, dtype=torch.int32)
        m_max = 7
        slots = torch.full((b, m_max), -1, dtype=torch.int32)
        for r in range(b):
            m = int(torch.randint(0, m_max + 1, (1,), generator=g))
            chosen = torch.randperm(8, generator=g)[:m].sort().values
            slots[r, :m] = chosen.to(torch.int32)
        if trial % 5 == 4:  # malformed rows: fast-mode semantics cut at the first bad entry
            slots[0, 1] = -1
            slots[1, 2] = slots[1, 1]
            slots[2, 0] = capacity + 3
        want, want_cs = _oracle(caches, cs, slots, bt)
        got, got_cs = caches.clone(), cs.clone()
        reference.commit_kv(got, got_cs, slots, block_table=bt)
        assert torch.equal(got_cs, want_cs)
        assert torch.equal(got, want)
        assert torch.equal(
            reference.commit_count(cs, slots, capacity, bt, caches.shape[2]), want_cs - cs
        )


def test_list_form_equals_stacked():
    g = torch.Generator().manual_seed(2)
    caches = torch.randn(3, 2, 2, 10, 2, 2, generator=g)
    cs = torch.tensor([2, 0], dtype=torch.int32)
    slots = torch.tensor([[1, 3, -1], [0, 4, 7]], dtype=torch.int32)
    pairs = [(caches[i, 0].clone(), caches[i, 1].clone()) for i in range(3)]
    cs_a, cs_b = cs.clone(), cs.clone()
    reference.commit_kv(caches, cs_a, slots)
    reference.commit_kv(pairs, cs_b, slots)
    assert torch.equal(torch.stack([torch.stack(p) for p in pairs]), caches)
    assert torch.equal(cs_a, cs_b)


def test_nothing_accepted_is_a_no_op():
    caches = torch.randn(1, 2, 2, 5, 1, 2)
    before = caches.clone()
    cs = torch.tensor([5, 2], dtype=torch.int32)  # request 0 full
    reference.commit_kv(caches, cs, torch.full((2, 3), -1, dtype=torch.int32))
    assert torch.equal(caches, before) and cs.tolist() == [5, 2]
    reference.commit_kv(caches, cs, torch.empty(2, 0, dtype=torch.int32))
    assert torch.equal(caches, before) and cs.tolist() == [5, 2]
