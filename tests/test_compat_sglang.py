"""specops.compat.sglang.verify_tree_greedy: sgl_kernel's own test vector (tests/speculative/
test_eagle_utils.py, the 2-request, 6-node trees) and random trees against a plain Python walk
of the same contract."""

from __future__ import annotations

import pytest
import torch

from specops.compat.sglang import verify_tree_greedy


def test_sgl_kernel_vector():
    candidates = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    retrieve_index = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]])
    retrieve_next_token = torch.tensor([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]])
    retrieve_next_sibling = torch.tensor([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]])
    logits = torch.full((2, 6, 20), 1.0)
    logits[0, 0, 3] = logits[0, 3, 4] = logits[0, 4, 5] = 10
    logits[1, 0, 11] = logits[1, 4, 12] = 10
    for i in range(2):
        for j in range(6):
            if logits[i, j].max() < 10:
                logits[i, j, 18] = 10
    predicts = torch.full((12,), -1, dtype=torch.int32)
    accept_index = torch.full((2, 4), -1, dtype=torch.int32)
    accept_token_num = torch.zeros(2, dtype=torch.int32)
    verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrieve_index,
                       retrieve_next_token, retrieve_next_sibling, logits.argmax(-1))  # fmt: skip
    assert predicts.tolist() == [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18]
    assert accept_index.tolist() == [[0, 3, 4, 5], [6, 10, 11, -1]]
    assert accept_token_num.tolist() == [3, 2]


def _walk(predicts, accept_index, candidates, slot, nxt, sib, target):
    """The contract as a plain loop, one request at a time."""
    bs, n = candidates.shape
    nums = []
    for b in range(bs):
        last, num = 0, 0
        accept_index[b, 0] = slot[b, 0]
        for _ in range(1, accept_index.shape[1]):
            cur, hit = nxt[b, last], -1
            while cur != -1:
                if candidates[b, cur] == target[b, last]:
                    hit = cur
                    break
                cur = sib[b, cur]
            if hit < 0:
                break
            predicts[slot[b, last]] = candidates[b, hit]
            num += 1
            accept_index[b, num] = slot[b, hit]
            last = hit
        predicts[slot[b, last]] = target[b, last]
        nums.append(num)
    return nums


def _random_tree(g, n):
    """A random tree of n nodes (node 0 the root, parents before children) as SGLang's lists."""
    parent = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    nxt, sib = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):  # children in increasing id order
        sib[i], nxt[parent[i]] = nxt[parent[i]], i
    return nxt, sib


@pytest.mark.parametrize("seed", range(6))
def test_random_trees_match_the_walk(seed):
    g = torch.Generator().manual_seed(seed)
    bs, n, steps, v = 5, 9, 5, 3  # a small vocabulary: many matches, deep paths
    trees = [_random_tree(g, n) for _ in range(bs)]
    nxt = torch.tensor([t[0] for t in trees])
    sib = torch.tensor([t[1] for t in trees])
    candidates = torch.randint(0, v, (bs, n), generator=g)
    target = torch.randint(0, v, (bs, n), generator=g)
    slot = torch.randperm(bs * n, generator=g).view(bs, n)
    want_p = torch.full((bs * n,), -7, dtype=torch.int32)
    want_a = torch.full((bs, steps), -1, dtype=torch.int32)
    nums = _walk(want_p, want_a, candidates, slot, nxt, sib, target)
    got_p = torch.full((bs * n,), -7, dtype=torch.int32)
    got_a = torch.full((bs, steps), -1, dtype=torch.int32)
    got_n = torch.zeros(bs, dtype=torch.int32)
    verify_tree_greedy(got_p, got_a, got_n, candidates, slot, nxt, sib, target)
    assert torch.equal(got_p, want_p) and torch.equal(got_a, want_a)
    assert got_n.tolist() == nums
