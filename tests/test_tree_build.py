"""specops.build_dynamic_tree / select_frontier: the public ops, an EAGLE-2 drafting loop."""

import math

import pytest
import torch

import specops
from specops import Tree

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def eagle2_draft(b, depth, width, k, vocab, *, gen, device="cpu"):
    """The drafting loop of an EAGLE-2 user, with a random 'drafter' (log-softmax of noise)."""

    def drafter(shape):
        logits = torch.randn(*shape, vocab, generator=gen) * 2
        return torch.log_softmax(logits, -1).to(device).topk(k, -1)

    tokens = torch.zeros(b, depth, width, k, dtype=torch.int32, device=device)
    logps = torch.full((b, depth, width, k), math.nan, device=device)
    frontier = torch.zeros(b, depth - 1, width, dtype=torch.int32, device=device)
    frontiers = []
    lp, tk = drafter((b,))
    tokens[:, 0, 0], logps[:, 0, 0] = tk.int(), lp
    f = specops.select_frontier(lp[:, None], width, tokens=tk[:, None])
    for d in range(1, depth):
        frontiers.append(f)
        frontier[:, d - 1] = f.index
        lp, tk = drafter((b, width))
        tokens[:, d], logps[:, d] = tk.int(), lp
        f = specops.select_frontier(lp, width, parent_scores=f.scores, tokens=tk)
    root = torch.randint(0, vocab, (b,), generator=gen).to(device)
    return root, tokens, logps, frontier, frontiers


@pytest.mark.parametrize("device", DEVICES)
def test_eagle2_loop_builds_a_valid_tree(device):
    gen = torch.Generator().manual_seed(0)
    b, depth, width, k, n = 3, 5, 4, 4, 24
    root, tokens, logps, frontier, frontiers = eagle2_draft(
        b, depth, width, k, 500, gen=gen, device=device
    )
    t = specops.build_dynamic_tree(root, tokens, logps, frontier, n)
    assert isinstance(t.tree, Tree) and t.tree.num_nodes == n and t.tree.batch_size == b
    for x in (t.draft_tokens, t.candidate, t.expanded_row, t.num_valid, t.parents):
        assert x.dtype == torch.int32 and x.device.type == device
    assert t.scores.dtype == torch.float32
    Tree.from_parents(t.parents.cpu())  # host validation passes
    par = t.parents.long()
    assert (par[:, 1:] < torch.arange(1, n, device=device)).all()
    assert torch.equal(t.draft_tokens[:, 0], root.int())
    assert (t.num_valid == n).all()
    # node data agrees with the candidate it came from
    flat_tok = tokens.reshape(b, -1)
    c = t.candidate.long()[:, 1:]
    assert torch.equal(t.draft_tokens[:, 1:], flat_tok.gather(1, c))
    # depth = layer + 1; the root's children are layer 0
    layer = torch.div(c, width * k, rounding_mode="floor")
    assert torch.equal(t.tree.depth[:, 1:].long(), layer + 1)
    # a frontier node of layer d has expanded_row d * W + slot, and its score is the frontier's
    for d, f in enumerate(frontiers, start=1):
        if d == 1:
            cand = f.index.long()  # into layer 0 (slot 0)
        else:
            cand = (d - 1) * width * k + f.index.long()
        node_rows = t.candidate.long()[:, :, None] == cand[:, None, :]  # [B, N, W]
        hit = node_rows.any(1)
        slot = torch.arange(width, device=device).expand(b, -1)
        for r in range(b):
            nodes = node_rows[r].float().argmax(0)[hit[r]]
            assert torch.equal(t.expanded_row[r, nodes].long(), (d * width + slot[r])[hit[r]])
            assert torch.equal(t.scores[r, nodes], f.scores[r][hit[r]])
    # drafted children of a node (in the tree) sit in the drafter row expanded_row
    child_rows = t.expanded_row.long().gather(1, par.clamp_min(0))[:, 1:]
    want = torch.div(c, k, rounding_mode="floor")  # d * W + w of the candidate's own layer row
    assert torch.equal(child_rows, want)


def test_frontier_fields():
    lp = torch.log(torch.tensor([[[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]]))
    toks = torch.tensor([[[10, 11, 12], [20, 21, 22]]])
    f = specops.select_frontier(lp, 3, parent_scores=torch.log(torch.tensor([[0.5, 0.5]])),
                                tokens=toks)  # fmt: skip
    assert f.index.tolist() == [[3, 0, 1]] and f.index.dtype == torch.int32
    assert f.parent_slot.tolist() == [[1, 0, 0]]
    assert f.tokens.tolist() == [[20, 10, 11]]
    torch.testing.assert_close(f.scores.exp(), torch.tensor([[0.3, 0.25, 0.15]]))
    assert specops.select_frontier(lp, 2).tokens is None


def test_padding_when_few_candidates_are_present():
    gen = torch.Generator().manual_seed(2)
    root, tokens, logps, frontier, _ = eagle2_draft(2, 3, 2, 2, 50, gen=gen)
    logps[1, :, :, 1] = -math.inf  # request 1 drafts one child per node
    frontier[1] = 0
    t = specops.build_dynamic_tree(root, tokens, logps, frontier, 10)
    assert t.num_valid.tolist() == [10, 1 + 1 + 2 + 2]  # root, 1 child, 2 slots x 1, 2 slots x 1
    assert (t.draft_tokens[1, 6:] == -1).all() and (t.draft_tokens[1, :6] >= 0).all()
    assert (t.scores[1, 6:] == -math.inf).all()
    Tree.from_parents(t.parents)


def test_bad_inputs():
    gen = torch.Generator().manual_seed(3)
    root, tokens, logps, frontier, _ = eagle2_draft(2, 3, 2, 2, 50, gen=gen)
    f = specops.build_dynamic_tree
    with pytest.raises(ValueError, match="num_nodes"):
        f(root, tokens, logps, frontier, 1 + 2 + 2 * 4 + 1)
    with pytest.raises(ValueError, match="num_nodes"):
        f(root, tokens, logps, frontier, 0)
    with pytest.raises(ValueError, match="frontier"):
        f(root, tokens, logps, frontier[:, :1], 5)
    with pytest.raises(TypeError, match="frontier"):
        f(root, tokens, logps, frontier.float(), 5)
    with pytest.raises(ValueError, match="logprobs"):
        f(root, tokens, logps[..., :1], frontier, 5)
    with pytest.raises(TypeError, match="tokens"):
        f(root, tokens.float(), logps, frontier, 5)
    with pytest.raises(ValueError, match="root_tokens"):
        f(root[:1], tokens, logps, frontier, 5)
    bad = frontier.clone()
    bad[0, 0, 1] = 2  # layer 0 has K = 2 candidates
    with pytest.raises(ValueError, match=r"frontier\[0, 0, 1\] = 2"):
        f(root, tokens, logps, bad, 5)
    with specops.validation(False):  # fast mode: clamped, still a valid tree
        Tree.from_parents(f(root, tokens, logps, bad, 5).parents)
    with pytest.raises(RuntimeError, match="backends"):
        f(root, tokens, logps, frontier, 5, backend="triton")
    with pytest.raises(ValueError, match="width"):
        specops.select_frontier(logps[:, 1], 5)
    with pytest.raises(ValueError, match="parent_scores"):
        specops.select_frontier(logps[:, 1], 2, parent_scores=torch.zeros(2, 3))


def test_opcheck_and_compile():
    gen = torch.Generator().manual_seed(4)
    root, tokens, logps, frontier, _ = eagle2_draft(2, 3, 2, 3, 60, gen=gen)
    torch.library.opcheck(
        torch.ops.specops.build_dynamic_tree.default,
        (root, tokens, logps, frontier, 7, "auto"),
        test_utils=("test_schema", "test_faketensor"),
    )
    torch.library.opcheck(
        torch.ops.specops.select_frontier.default,
        (logps[:, 1], 2, None, tokens[:, 1], "auto"),
        test_utils=("test_schema", "test_faketensor"),
    )
    op = torch.ops.specops.build_dynamic_tree
    g = torch.compile(lambda *a: op(*a, 7, "auto"), fullgraph=True)
    for x, y in zip(g(root, tokens, logps, frontier), op(root, tokens, logps, frontier, 7, "auto")):
        assert torch.equal(x, y)
