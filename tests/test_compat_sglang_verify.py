"""specops.compat.sglang_verify: sgl_kernel's / SGLang's own test vectors (test_eagle_utils.py and
test_speculative_sampling.py: the 2-request, 6-node trees, greedy and with thresholds, and the
CDF-boundary cases of SGLang 0.5.23), random trees against a plain Python walk of each contract,
the law of the emitted token (chi-square), and malformed trees."""

from __future__ import annotations

import pytest
import torch

import specops
from specops.compat.sglang_verify import tree_speculative_sampling_target_only, verify_tree_greedy


def test_sgl_kernel_vector():
    candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, probs = (
        _sgl_vector_inputs()
    )
    predicts = torch.full((12,), -1, dtype=torch.int32)
    accept_index = torch.full((2, 4), -1, dtype=torch.int32)
    accept_token_num = torch.zeros(2, dtype=torch.int32)
    verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrieve_index,
                       retrieve_next_token, retrieve_next_sibling, probs.argmax(-1))  # fmt: skip
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
                if candidates[b, cur] == target.view(-1)[slot[b, last]]:
                    hit = cur
                    break
                cur = sib[b, cur]
            if hit < 0:
                break
            predicts[slot[b, last]] = candidates[b, hit]
            num += 1
            accept_index[b, num] = slot[b, hit]
            last = hit
        predicts[slot[b, last]] = target.view(-1)[slot[b, last]]
        nums.append(num)
    return nums


def _random_tree(g, n):
    """A random tree of n nodes (node 0 the root, parents before children) as SGLang's lists."""
    parent = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    nxt, sib = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):  # children in increasing id order
        sib[i], nxt[parent[i]] = nxt[parent[i]], i
    return nxt, sib


def _random_trees(g, bs, n):
    """bs random trees of n nodes: retrieve_next_token and retrieve_next_sibling [bs, n]."""
    trees = [_random_tree(g, n) for _ in range(bs)]
    return torch.tensor([t[0] for t in trees]), torch.tensor([t[1] for t in trees])


def _outputs(bs, n, steps):
    """predicts [bs * n] (-7: never written) and accept_index [bs, steps] (-1) before a call."""
    predicts = torch.full((bs * n,), -7, dtype=torch.int32)
    return predicts, torch.full((bs, steps), -1, dtype=torch.int32)


@pytest.mark.parametrize("seed", range(6))
def test_random_trees_match_the_walk(seed):
    g = torch.Generator().manual_seed(seed)
    bs, n, steps, v = 5, 9, 5, 3  # a small vocabulary: many matches, deep paths
    nxt, sib = _random_trees(g, bs, n)
    candidates = torch.randint(0, v, (bs, n), generator=g)
    target = torch.randint(0, v, (bs, n), generator=g)
    slot = torch.randperm(bs * n, generator=g).view(bs, n)
    want_p, want_a = _outputs(bs, n, steps)
    nums = _walk(want_p, want_a, candidates, slot, nxt, sib, target)
    got_p, got_a = _outputs(bs, n, steps)
    got_n = torch.zeros(bs, dtype=torch.int32)
    verify_tree_greedy(got_p, got_a, got_n, candidates, slot, nxt, sib, target)
    assert torch.equal(got_p, want_p) and torch.equal(got_a, want_a)
    assert got_n.tolist() == nums


# tree_speculative_sampling_target_only ------------------------------------------------------
def _sgl_vector_inputs():
    candidates = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    retrive_index = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]])
    retrive_next_token = torch.tensor([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]])
    retrive_next_sibling = torch.tensor([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]])
    logits = torch.full((2, 6, 20), 1.0)
    logits[0, 0, 3] = logits[0, 3, 4] = logits[0, 4, 5] = 10
    logits[1, 0, 11] = logits[1, 4, 12] = 10
    for i in range(2):
        for j in range(6):
            if logits[i, j].max() < 10:
                logits[i, j, 18] = 10
    probs = torch.softmax(logits / 0.01, -1)  # one-hot in float32: the coins do not matter
    return candidates, retrive_index, retrive_next_token, retrive_next_sibling, probs


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.0, 0.0)])
def test_target_only_sglang_vector(thresholds):
    """SGLang 0.5.23's test_speculative_sampling.py (its JIT kernel's rule: a token without
    target mass is never accepted, so thresholds 0 give the same result as 1)."""
    cand, ri, nt, ns, probs = _sgl_vector_inputs()
    g = torch.Generator().manual_seed(0)
    predicts = torch.full((12,), -1, dtype=torch.int32)
    accept_index = torch.full((2, 4), -1, dtype=torch.int32)
    num = torch.zeros(2, dtype=torch.int32)
    tree_speculative_sampling_target_only(
        predicts, accept_index, num, cand, ri, nt, ns, torch.rand(2, 6, generator=g),
        torch.rand(2, generator=g), probs, torch.zeros_like(probs), *thresholds,
    )  # fmt: skip
    assert predicts.tolist() == [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18]
    assert accept_index.tolist() == [[0, 3, 4, 5], [6, 10, 11, -1]]
    assert num.tolist() == [3, 2]


@pytest.mark.parametrize(
    "cands,target,coin,ts,want_token,want_num",
    [
        ([2], [0.0, 1.0, 0.0], 0.0, 0.0, 1, 0),  # zero mass is never accepted, even at ts = 0
        ([2], [0.0, 1.0, 0.0], 0.0, 1.0, 1, 0),
        ([1, 2, 3], [0.0, 0.25, 0.0, 0.75], 0.25, 1.0, 3, 1),  # coin on a boundary: strict <
        ([1], [0.0, 0.25, 0.75], 0.0, 1.0, 1, 1),
        ([1], [0.0, 1.0], 1.0 - 2**-24, 1.0, 1, 1),
    ],
)
def test_target_only_cdf_boundaries(cands, target, coin, ts, want_token, want_num):
    """SGLang 0.5.23's test_target_only_sampling_cdf_boundaries, verbatim."""
    candidates = torch.tensor([[0, *cands]])
    n = candidates.shape[1]
    ri = torch.arange(n).unsqueeze(0)
    nt = torch.full_like(ri, -1)
    nt[0, 0] = 1
    ns = torch.full_like(ri, -1)
    if len(cands) > 1:
        ns[0, 1 : len(cands)] = torch.arange(2, len(cands) + 1)
    probs = torch.zeros(1, n, len(target))
    probs[0, 0] = torch.tensor(target)
    probs[0, 1:, 0] = 1.0
    predicts = torch.full((n,), -1, dtype=torch.int32)
    accept_index = torch.full((1, 2), -1, dtype=torch.int32)
    num = torch.zeros(1, dtype=torch.int32)
    coins = torch.zeros(1, n)
    coins[0, 0] = coin
    tree_speculative_sampling_target_only(
        predicts, accept_index, num, candidates, ri, nt, ns, coins, torch.zeros(1), probs,
        torch.zeros_like(probs), threshold_single=ts, threshold_acc=1.0,
    )  # fmt: skip
    assert predicts[0].item() == want_token
    assert num.item() == want_num


def _walk_target_only(predicts, accept_index, cand, slot, nxt, sib, coins, final, p, q, ts, ta):
    """SGLang 0.5.23's kernel as a plain loop (float32 scalars), one request at a time."""
    bs, n = cand.shape
    steps, vocab = accept_index.shape[1], p.shape[2]
    ta = max(ta, 1e-9)
    nums = []
    for b in range(bs):
        row, num, cur = 0, 0, 0
        coin = coins[b, 0]
        last = int(slot[b, 0])
        accept_index[b, 0] = last
        for _ in range(1, steps):
            cur = int(nxt[b, cur])
            acc = torch.zeros((), dtype=torch.float32)
            while cur != -1:
                tok = int(cand[b, cur])
                pt = p[b, row, tok]
                acc = acc + pt
                if pt > 0 and (coin < acc / torch.tensor(ta) or pt >= ts):
                    row, coin = cur, coins[b, cur]
                    predicts[last] = tok
                    num += 1
                    accept_index[b, num] = int(slot[b, cur])
                    last = int(slot[b, cur])
                    break
                q[b, row, tok] = pt
                cur = int(sib[b, cur])
            if cur == -1:
                break
        r = torch.fmax(p[b, row] - (0 if num == steps - 1 else q[b, row]), torch.tensor(0.0))
        u = final[b] * r.sum()
        cdf = r.cumsum(0)
        ids = [k for k in range(vocab) if r[k] > 0 and cdf[k] > u]
        pos = [k for k in range(vocab) if r[k] > 0]
        predicts[last] = ids[0] if ids else (pos[-1] if pos else vocab - 1)
        nums.append(num)
    return nums


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.3, 0.7)])
def test_target_only_random_trees_match_the_walk(seed, thresholds):
    g = torch.Generator().manual_seed(seed)
    bs, n, steps, v = 6, 9, 5, 4  # a small vocabulary: many acceptances, deep paths
    nxt, sib = _random_trees(g, bs, n)
    cand = torch.randint(0, v, (bs, n), generator=g)
    slot = torch.randperm(bs * n, generator=g).view(bs, n)
    p = torch.softmax(torch.randn(bs, n, v, generator=g) * 2, -1)
    p[0, :, 1] = 0.0  # tokens without mass
    p = p / p.sum(-1, keepdim=True)
    coins, final = torch.rand(bs, n, generator=g), torch.rand(bs, generator=g)
    want_p, want_a = _outputs(bs, n, steps)
    want_q = torch.zeros_like(p)
    nums = _walk_target_only(want_p, want_a, cand, slot, nxt, sib, coins, final, p, want_q,
                             *thresholds)  # fmt: skip
    got_p, got_a = _outputs(bs, n, steps)
    got_n = torch.zeros(bs, dtype=torch.int32)
    got_q = torch.zeros_like(p)
    tree_speculative_sampling_target_only(got_p, got_a, got_n, cand, slot, nxt, sib, coins, final,
                                          p, got_q, *thresholds)  # fmt: skip
    assert got_n.tolist() == nums
    assert torch.equal(got_a, want_a)
    assert torch.equal(got_p, want_p)
    assert torch.equal(got_q, want_q)  # the rejected siblings' mass, copied as SGLang does


def test_target_only_emits_the_target_law():
    """With thresholds 1 the token after the root follows the target exactly (lossless): it is a
    sibling accepted by inverse CDF over the siblings, or a draw from the target without them.
    4000 requests share one tree and one target row; fresh coins each."""
    from helpers import chi2_pvalue

    g = torch.Generator().manual_seed(11)
    bs, v = 4000, 6
    # root with children 1, 2, 3 (tokens 0, 2, 5); node 1 has a child 4 (token 1)
    cand = torch.tensor([[0, 0, 2, 5, 1]]).expand(bs, 5)
    nxt = torch.tensor([[1, 4, -1, -1, -1]]).expand(bs, 5)
    sib = torch.tensor([[-1, 2, 3, -1, -1]]).expand(bs, 5)
    slot = torch.arange(bs * 5).view(bs, 5)
    target = torch.tensor([0.30, 0.05, 0.10, 0.25, 0.15, 0.15])
    p = target.expand(bs, 5, v).contiguous()
    predicts = torch.full((bs * 5,), -1, dtype=torch.int32)
    accept_index = torch.full((bs, 3), -1, dtype=torch.int32)
    num = torch.zeros(bs, dtype=torch.int32)
    tree_speculative_sampling_target_only(
        predicts, accept_index, num, cand, slot, nxt, sib, torch.rand(bs, 5, generator=g),
        torch.rand(bs, generator=g), p, torch.zeros_like(p),
    )  # fmt: skip
    first = predicts.view(bs, 5)[:, 0].long()
    counts = torch.bincount(first, minlength=v)
    assert chi2_pvalue(counts, target) > 1e-3
    # and the acceptance rate of the root's children is their target mass: 0.3 + 0.1 + 0.15
    rate = (num > 0).float().mean().item()
    assert abs(rate - 0.55) < 0.03


def _bad_tree_inputs():
    cand, ri, nt, ns, probs = _sgl_vector_inputs()
    return [cand, ri, nt.clone(), ns.clone(), probs]


@pytest.mark.parametrize(
    "what,edit,match",
    [
        ("child past N", lambda t: t[2].__setitem__((0, 1), 6), "retrive_next_token"),
        ("sibling below -1", lambda t: t[3].__setitem__((1, 4), -3), "retrive_next_sibling"),
        ("sibling cycle", lambda t: t[3].__setitem__((0, 3), 1), "reached twice"),
        ("two parents", lambda t: t[2].__setitem__((0, 2), 4), "reached twice"),
        ("slot past predicts", lambda t: t[1].__setitem__((1, 2), 12), "retrive_index"),
    ],
)
def test_malformed_trees(what, edit, match):
    """Validation mode names the problem; fast mode stays inside every tensor (clamped indices,
    bounded walks) and finishes."""
    t = _bad_tree_inputs()
    edit(t)
    cand, ri, nt, ns, probs = t

    def run(fn):
        predicts = torch.full((12,), -1, dtype=torch.int32)
        accept_index = torch.full((2, 4), -1, dtype=torch.int32)
        num = torch.zeros(2, dtype=torch.int32)
        if fn is verify_tree_greedy:
            fn(predicts, accept_index, num, cand, ri, nt, ns, probs.argmax(-1))
        else:
            fn(predicts, accept_index, num, cand, ri, nt, ns, torch.rand(2, 6), torch.rand(2),
               probs, torch.zeros_like(probs))  # fmt: skip
        return num

    for fn in (verify_tree_greedy, tree_speculative_sampling_target_only):
        with specops.validation(True), pytest.raises(ValueError, match=match):
            run(fn)
        with specops.validation(False):
            assert int(run(fn).max()) <= 3


# tree_speculative_sampling (lossless with the draft distribution) ----------------------------
def _kary(bs, v, wor, seed, spread=2.0, err=0.5):
    from specops.bench.sglang_acceptance import synthetic

    g = torch.Generator().manual_seed(seed)
    return synthetic(bs, v, 2, 2, spread, err, wor, g), g  # 1 + 2 + 4 = 7 nodes


def _run_tree(fn, data, g, steps=3, **kw):
    cand, nt, ns, target, draft = data
    bs, n = cand.shape
    predicts, accept_index = _outputs(bs, n, steps)
    num = torch.zeros(bs, dtype=torch.int32)
    slot = torch.arange(bs * n).view(bs, n)
    coins, final = torch.rand(bs, n, generator=g), torch.rand(bs, generator=g)
    fn(predicts, accept_index, num, cand, slot, nt, ns, coins, final, target, draft, **kw)
    return predicts.view(bs, n), accept_index, num, coins, final


@pytest.mark.parametrize("wor", [False, True])
def test_tree_with_draft_probs_is_verify_tree(wor):
    """Outputs are specops.verify_tree's on the same tree, drafts and draws, laid out as SGLang's
    (accept_index = slots of the path, predicts at each path node = the token after it)."""
    from specops.compat.sglang_verify import tree_speculative_sampling

    data, g = _kary(64, 12, wor, 3)
    predicts, accept_index, num, coins, final = _run_tree(tree_speculative_sampling, data, g,
                                                          without_replacement=wor)  # fmt: skip
    cand, nt, ns, target, draft = data
    tree = specops.Tree.from_parents([-1, 0, 0, 1, 1, 2, 2])
    u = torch.cat([coins[:, 1:], final[:, None]], 1)
    r = specops.verify_tree(target, tree, cand, draft, uniforms=u, without_replacement=wor)
    assert torch.equal(num, r.num_accepted)
    for b in range(64):
        a = int(num[b])
        path = r.path[b, : a + 1].tolist()
        assert accept_index[b, : a + 1].tolist() == [b * 7 + i for i in path]
        assert predicts[b, path].tolist() == r.tokens[b, : a + 1].tolist()


@pytest.mark.parametrize("wor", [False, True])
def test_tree_with_draft_probs_is_lossless_and_accepts_more(wor):
    """The token after the root follows the target (chi-square over 6000 requests sharing one
    target row), and on the same trees it accepts more than target-only verification."""
    from helpers import chi2_pvalue

    from specops.compat.sglang_verify import (
        tree_speculative_sampling,
        tree_speculative_sampling_target_only,
    )

    data, g = _kary(6000, 6, wor, 4, spread=1.0, err=0.7)
    cand, nt, ns, target, draft = data
    target[:, 0] = target[0, 0]  # one root row for all: its law is checkable
    draft[:, 0] = draft[0, 0]
    cand[:, 1:3] = torch.multinomial(draft[0, 0], 2 * 6000, replacement=True, generator=g).view(
        6000, 2) if not wor else torch.stack([torch.multinomial(draft[0, 0], 2, generator=g)
                                              for _ in range(6000)])  # fmt: skip
    predicts, _, num, _, _ = _run_tree(tree_speculative_sampling, data, g, without_replacement=wor)
    counts = torch.bincount(predicts[:, 0].long(), minlength=6)
    assert chi2_pvalue(counts, target[0, 0]) > 1e-3
    _, _, num_t, _, _ = _run_tree(tree_speculative_sampling_target_only, (cand, nt, ns, target,
                                  draft.clone()), g)  # fmt: skip
    assert num.double().mean() > num_t.double().mean() + 0.2


def test_linked_lists_to_parents():
    from specops.compat.sglang_verify import linked_tree_parents

    cand, ri, nt, ns, _ = _sgl_vector_inputs()
    parents, reached = linked_tree_parents(nt, ns)
    # request 0: 0 -> 1 -> 2, 0 -> 3 -> 4 -> 5; request 1: 0 -> 4 -> 5, 4's sibling 1 -> 2 -> 3
    assert parents.tolist() == [[-1, 0, 1, 0, 3, 4], [-1, 0, 1, 2, 0, 4]]
    assert reached.all()


# chain_speculative_sampling_triton (SGLang's rejection-sampling chain, token-wise and block) -
from test_verify_block import _P1, _P2, _Q1, _Q2  # noqa: E402  (the context example)


@pytest.mark.parametrize(
    "xs,coins,final,want_predicts,want_accept",
    [  # SGLang 0.5.23's kernel (Triton interpreter) on these coins, block_verification=True
        ((0, 1), (0.5, 0.5), 0.5, [0, 1, 1], [0, 1, 2]),
        ((0, 1), (0.1, 0.9), 0.0, [0, 1, 0], [0, 1, 2]),
        ((1, 2), (0.3, 0.2), 0.7, [1, 2, 2], [0, 1, 2]),
        ((2, 2), (0.0, 0.99), 0.99, [2, 1, -7], [0, 1, -1]),
    ],
)
def test_chain_block_verification_sglang_vectors(xs, coins, final, want_predicts, want_accept):
    from specops.compat.sglang_verify import chain_speculative_sampling_triton

    x1, x2 = xs
    p3 = torch.full((3,), 0.25).scatter(0, torch.tensor([x2]), 0.5)
    target = torch.stack([torch.tensor(_P1), torch.tensor(_P2[x1]), p3])[None]
    draft = torch.stack([torch.tensor(_Q1), torch.tensor(_Q2[x1])])[None]
    predicts = torch.full((3,), -7, dtype=torch.int32)
    accept_index = torch.full((1, 3), -1, dtype=torch.int32)
    num = torch.zeros(1, dtype=torch.int32)
    chain_speculative_sampling_triton(
        predicts, accept_index, num, torch.tensor([[5, x1, x2]]), torch.arange(3)[None],
        torch.full((1, 3), -1), torch.full((1, 3), -1), torch.tensor([[*coins, 0.3]]),
        torch.tensor([final]), target, draft, block_verification=True,
    )  # fmt: skip
    assert predicts.tolist() == want_predicts
    assert accept_index.tolist() == [want_accept]
    assert num.tolist() == [sum(a >= 0 for a in want_accept) - 1]


def test_chain_token_wise_and_block_lengths():
    """The paper's toy through SGLang's signature: 10/9 token-wise, 11/9 with block
    verification (K = 2), outputs laid out by retrive_index (a shuffled slot map)."""
    from specops.compat.sglang_verify import chain_speculative_sampling_triton

    g = torch.Generator().manual_seed(2)
    bs, k = 30000, 2
    target = torch.tensor([1 / 3, 2 / 3]).expand(bs, k + 1, 2).contiguous()
    draft = torch.tensor([2 / 3, 1 / 3]).expand(bs, k, 2).contiguous()
    x = torch.multinomial(draft.reshape(-1, 2), 1, generator=g).reshape(bs, k)
    cand = torch.cat([torch.zeros(bs, 1, dtype=torch.long), x], 1)
    slot = torch.randperm(bs * 3, generator=g).view(bs, 3)
    coins, final = torch.rand(bs, 3, generator=g), torch.rand(bs, generator=g)
    means = []
    for blk in (False, True):
        predicts = torch.full((bs * 3,), -7, dtype=torch.int32)
        accept_index = torch.full((bs, 3), -1, dtype=torch.int32)
        num = torch.zeros(bs, dtype=torch.int32)
        none = torch.full((bs, 3), -1)
        chain_speculative_sampling_triton(
            predicts, accept_index, num, cand, slot, none, none, coins, final, target, draft,
            block_verification=blk,
        )  # fmt: skip
        means.append(num.double().mean().item())
        # accepted drafts sit at the slots of the nodes before them
        b = torch.nonzero(num == 2)[0, 0]
        assert predicts[slot[b, 0]] == x[b, 0] and predicts[slot[b, 1]] == x[b, 1]
        assert accept_index[b].tolist() == slot[b].tolist()
        # a row that stops at 0: only the root's slot written, with the drawn token
        r0 = torch.nonzero(num == 0)[0, 0]
        assert accept_index[r0].tolist() == [int(slot[r0, 0]), -1, -1]
        assert predicts[slot[r0, 0]] in (0, 1)
        assert predicts[slot[r0, 1]] == -7 and predicts[slot[r0, 2]] == -7
    assert abs(means[0] - 10 / 9) < 0.025 and abs(means[1] - 11 / 9) < 0.025
