"""specops.reference.build_dynamic_tree / select_frontier against a brute-force per-request loop."""

import math

import numpy as np
import pytest
import torch

from specops.reference import build_dynamic_tree, select_frontier
from specops.tree import Tree


def brute(root, tokens, logprobs, frontier, n):
    """Per request: list every candidate with its path score, sort, keep N - 1, link parents."""
    b, d, w, k = tokens.shape
    outs = []
    for r in range(b):
        cands = []  # (g, candidate index, score, parent g or -1, token)

        def edge(dd, ww, kk, r=r):
            lp = np.float32(logprobs[r, dd, ww, kk].item())
            if math.isnan(lp) or tokens[r, dd, ww, kk] < 0:
                return np.float32(-np.inf)
            return min(lp, np.float32(0.0))

        prev = []  # g of layer d - 1's candidates, by flat index
        for kk in range(k):
            g = len(cands)
            cands.append((g, kk, edge(0, 0, kk), -1, int(tokens[r, 0, 0, kk])))
            prev.append(g)
        expanded = {}
        for dd in range(1, d):
            cur = []
            for ww in range(w):
                f = int(frontier[r, dd - 1, ww])
                pg = prev[f]
                expanded.setdefault(pg, dd * w + ww)
                for kk in range(k):
                    g = len(cands)
                    score = np.float32(cands[pg][2] + edge(dd, ww, kk))
                    tok = int(tokens[r, dd, ww, kk])
                    cands.append((g, dd * w * k + ww * k + kk, score, pg, tok))
                    cur.append(g)
            prev = cur
        ranked = sorted(cands, key=lambda cnd: (-float(cnd[2]), cnd[0]))
        # present candidates in g order, then the absent ones (padding) in g order
        chosen = sorted(ranked[: n - 1], key=lambda cnd: (cnd[2] == -np.inf, cnd[0]))
        node_of = {cnd[0]: i + 1 for i, cnd in enumerate(chosen)}
        parents = [-1] + [0 if cnd[3] < 0 else node_of[cnd[3]] for cnd in chosen]
        present = [cnd[2] > -np.inf for cnd in chosen]
        toks = [int(root[r])] + [cnd[4] if p else -1 for cnd, p in zip(chosen, present)]
        scores = [0.0] + [float(cnd[2]) for cnd in chosen]
        cand = [-1] + [cnd[1] for cnd in chosen]
        exp_row = [0] + [expanded.get(cnd[0], -1) for cnd in chosen]
        outs.append((parents, toks, scores, cand, exp_row, 1 + sum(present)))
    return [torch.tensor([o[i] for o in outs]) for i in range(6)]


def random_draft(b, d, w, k, *, gen, quantize=None, vocab=1000):
    """Drafter-like inputs: per layer the top-K of a random log-softmax, frontier = best W."""
    tokens = torch.randint(0, vocab, (b, d, w, k), generator=gen, dtype=torch.int32)
    logprobs = torch.log_softmax(torch.randn(b, d, w, 4 * k, generator=gen) * 2, -1)
    logprobs = logprobs.topk(k, -1).values
    if quantize:
        logprobs = (logprobs * quantize).round() / quantize  # many exact ties
    frontier = torch.empty(b, max(d - 1, 0), w, dtype=torch.int32)
    if d > 1:
        f_idx, f_sc = select_frontier(logprobs[:, 0, :1], w)
        for i in range(1, d):
            frontier[:, i - 1] = f_idx
            f_idx, f_sc = select_frontier(logprobs[:, i], w, parent_scores=f_sc)
    return torch.randint(0, vocab, (b,), generator=gen), tokens, logprobs, frontier


def check(root, tokens, logprobs, frontier, n):
    got = build_dynamic_tree(root, tokens, logprobs, frontier, n)
    want = brute(root, tokens, logprobs, frontier, n)
    names = ("parents", "draft_tokens", "scores", "candidate", "expanded_row", "num_valid")
    for name, g, wt in zip(names, got, want):
        if name == "scores":
            assert torch.equal(g, wt.float()), name
        else:
            assert torch.equal(g.long(), wt.long()), name
    Tree.from_parents(got[0])  # host validation: one root, parents[n] < n
    return got


@pytest.mark.parametrize(
    "b,d,w,k,n",
    [(1, 1, 1, 1, 1), (1, 1, 3, 4, 5), (3, 4, 3, 3, 10), (2, 5, 8, 8, 60), (4, 3, 2, 5, 26)],
)
def test_matches_brute_force(b, d, w, k, n):
    gen = torch.Generator().manual_seed(b * 100 + d * 10 + n)
    check(*random_draft(b, d, w, k, gen=gen), n)


def test_ties_are_broken_by_layer_then_index():
    gen = torch.Generator().manual_seed(3)
    for quantize in (1, 2):
        root, tokens, logprobs, frontier = random_draft(3, 5, 4, 4, gen=gen, quantize=quantize)
        logprobs[:, :, :, 0] = 0.0  # probability-1 children: score equal to the parent's
        for n in (2, 9, 30, 1 + 4 + 4 * 16):
            parents = check(root, tokens, logprobs, frontier, n)[0]
            assert (parents[:, 1:] < torch.arange(1, n)).all()


def test_chosen_set_is_the_top_scores_and_depth_is_the_layer():
    gen = torch.Generator().manual_seed(8)
    root, tokens, logprobs, frontier = random_draft(2, 4, 3, 5, gen=gen)
    n = 20
    parents, draft, scores, cand, _, _ = build_dynamic_tree(root, tokens, logprobs, frontier, n)
    w, k = 3, 5
    layer = torch.where(cand >= 0, torch.div(cand, w * k, rounding_mode="floor") + 1, 0)
    tree = Tree.from_parents(parents)
    assert torch.equal(tree.depth.long(), layer)
    # the chosen scores are the N - 1 largest of all candidate scores
    for r in range(2):
        _, _, all_scores, _, _, _ = build_dynamic_tree(
            root[r : r + 1], tokens[r : r + 1], logprobs[r : r + 1], frontier[r : r + 1],
            1 + k + 3 * w * k,
        )  # fmt: skip
        top = all_scores[0, 1:].sort(descending=True).values[: n - 1]
        assert torch.equal(scores[r, 1:].sort(descending=True).values, top)
    # scores decrease along every edge
    assert (scores.gather(1, parents.clamp_min(0).long())[:, 1:] >= scores[:, 1:]).all()


def test_absent_candidates_fill_last_with_token_minus_one():
    gen = torch.Generator().manual_seed(4)
    root, tokens, logprobs, frontier = random_draft(2, 3, 2, 3, gen=gen)
    logprobs[0, :, :, 1:] = -math.inf  # request 0: a single chain is present
    logprobs[1, 1] = math.nan  # request 1: layer 1 absent, so layer 2 too
    tokens[1, 0, 0, 2] = -1  # and one root child
    frontier[0] = 0  # request 0: every frontier slot is the present child: 1 + 1 + 2 + 2
    n = 12
    _, draft, scores, _, _, num_valid = check(root, tokens, logprobs, frontier, n)
    assert num_valid.tolist() == [1 + 1 + 2 + 2, 1 + 2]
    for r, nv in enumerate(num_valid.tolist()):
        assert (draft[r, nv:] == -1).all() and (scores[r, nv:] == -math.inf).all()
        assert (draft[r, :nv] >= 0).all() and (scores[r, :nv] > -math.inf).all()


def test_positive_logprobs_are_clamped_so_the_tree_stays_valid():
    gen = torch.Generator().manual_seed(5)
    root, tokens, logprobs, frontier = random_draft(2, 4, 3, 3, gen=gen)
    logprobs = logprobs + 3.0  # not log-probabilities: children would outscore parents
    check(root, tokens, logprobs, frontier, 15)


def test_select_frontier_order_and_scores():
    lp = torch.tensor([[[-1.0, -2.0], [-0.5, -1.0]]])
    idx, sc = select_frontier(lp, 3, parent_scores=torch.tensor([[0.0, -1.0]]))
    # children: (0,0) -1, (0,1) -2, (1,0) -1.5, (1,1) -2 -> -1, -1.5, then the tie at -2: index 1
    assert idx.tolist() == [[0, 2, 1]] and sc.tolist() == [[-1.0, -1.5, -2.0]]
    idx, sc = select_frontier(lp, 2, tokens=torch.tensor([[[5, 6], [-1, 7]]]))
    assert idx.tolist() == [[0, 3]]  # (1,0) is absent (token -1)
    idx, sc = select_frontier(torch.tensor([[[0.5, math.nan]]]), 2)
    assert idx.tolist() == [[0, 1]] and sc.tolist() == [[0.0, -math.inf]]
