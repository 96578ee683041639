"""Reference tree_build ops: EAGLE-2 dynamic draft trees, built on the device.

EAGLE-2 grows a draft tree in two phases: expansion, depth by depth (every frontier node's K
most likely children, scored by the cumulative log-probability of their path; the W best over
the layer form the next frontier, ``select_frontier``), then rerank (the N - 1 best-scoring of
all drafted children become the tree, ``build_dynamic_tree``).  Candidate (d, w, k) has index
``d * W * K + w * K + k``; candidates rank by (score descending, index ascending), edge
log-probs are clamped to <= 0, so every chosen set contains its members' ancestors.  NaN or
-inf log-probs and negative tokens are absent (score -inf, ranked last; padding nodes with
token -1).

The two phases, ranking, ties and absent candidates in full: docs/reference_semantics.md,
"EAGLE-2 dynamic trees".
"""

from __future__ import annotations

import torch

__all__ = ["select_frontier", "build_dynamic_tree"]


def _edge_logprobs(logprobs: torch.Tensor, tokens: torch.Tensor | None) -> torch.Tensor:
    """float32 log-probs clamped to <= 0; NaN, and negative tokens, -> -inf (absent)."""
    lp = logprobs.float().clamp_max(0.0)
    bad = torch.isnan(lp)
    if tokens is not None:
        bad |= tokens < 0
    return torch.where(bad, float("-inf"), lp)


def _rank(scores: torch.Tensor) -> torch.Tensor:
    """Column order of each row by (score descending, column ascending)."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices


def select_frontier(
    logprobs: torch.Tensor,
    width: int,
    *,
    parent_scores: torch.Tensor | None = None,
    tokens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The next frontier: the ``width`` best of the W * K children of the current frontier.

    ``logprobs`` [B, W, K]: log q(child k | path to frontier node w) (the drafter's top-K);
    ``parent_scores`` [B, W]: the frontier nodes' cumulative scores (None: 0, the root's);
    ``tokens`` [B, W, K] (optional): negative tokens mark absent children.

    Returns ``index`` [B, width] int32, the flat child indices ``w * K + k`` best first, and
    ``scores`` [B, width] float32, their cumulative scores ``parent_score + min(log q, 0)``."""
    b, w, k = logprobs.shape
    lp = _edge_logprobs(logprobs, tokens)
    if parent_scores is not None:
        lp = parent_scores.float()[:, :, None] + lp
    cum = lp.reshape(b, w * k)
    index = _rank(cum)[:, :width]
    return index.to(torch.int32), cum.gather(1, index)


def build_dynamic_tree(
    root_tokens: torch.Tensor,
    tokens: torch.Tensor,
    logprobs: torch.Tensor,
    frontier: torch.Tensor,
    num_nodes: int,
) -> tuple[torch.Tensor, ...]:
    """The EAGLE-2 rerank: the tree of the root and the ``num_nodes - 1`` best candidates.

    ``root_tokens`` [B]: the last committed token (node 0).  ``tokens`` [B, D, W, K] and
    ``logprobs`` [B, D, W, K]: the drafted children of every layer (layer 0: slot 0 only, the
    root's children; its slots 1.. are ignored) and their edge log-probs.  ``frontier``
    [B, D - 1, W]: ``frontier[:, d - 1, w]`` is the flat index (``w' * K + k'``) into layer d - 1
    of the candidate that is frontier slot w of layer d, the node ``tokens[:, d, w]`` hangs from
    (as returned by ``select_frontier``; < K for layer 0).  Out-of-range entries are clamped.

    Returns, all on the inputs' device, N = ``num_nodes``:

    - ``parents`` [B, N] int32: -1 at 0, ``0 <= parents[n] < n``;
    - ``draft_tokens`` [B, N] int32: entry 0 = ``root_tokens``, -1 for absent candidates;
    - ``scores`` [B, N] float32: cumulative log-probs (root 0);
    - ``candidate`` [B, N] int32: each node's candidate index ``d * W * K + w * K + k`` (-1 for
      the root), to gather per-candidate data (hidden states, draft probabilities);
    - ``expanded_row`` [B, N] int32: ``d * W + w`` when the node is frontier slot w of layer d
      (the drafter row whose output gave its children; 0 for the root), -1 for nodes that were
      never expanded (leaves of the expansion);
    - ``num_valid`` [B] int32: nodes that are not absent, root included.

    Nodes are in candidate order: by layer (depth), then frontier slot, then child rank, so
    node n's parent precedes it and siblings come best first; absent nodes (padding) follow all
    present ones, so nodes ``[0, num_valid)`` are the real tree."""
    b, d, w, k = tokens.shape
    n_rest = num_nodes - 1
    dev = tokens.device
    lp = _edge_logprobs(logprobs, tokens)  # [B, D, W, K]

    # Flat candidate list: layer 0's K children of the root, then layers 1.. (W * K each).
    # g(0, 0, k) = k;  g(d, w, k) = K + (d - 1) W K + w K + k.
    offsets = [0] + [k + i * w * k for i in range(d - 1)]  # first g of each layer
    layer = lp[:, 0, 0, :]  # cumulative scores of layer 0: 0 + log q
    scores = [layer]
    parent_g = [torch.full((b, k), -1, dtype=torch.int64, device=dev)]
    cand = [torch.arange(k, device=dev).expand(b, k)]
    toks = [tokens[:, 0, 0, :]]
    exp_rows = []
    for i in range(1, d):
        f = frontier[:, i - 1].long().clamp(0, layer.shape[1] - 1)  # [B, W] into layer i - 1
        # score(child) = score(frontier node) + log q(child)
        layer = (layer.gather(1, f)[:, :, None] + lp[:, i]).reshape(b, w * k)
        scores.append(layer)
        parent_g.append((offsets[i - 1] + f).repeat_interleave(k, dim=1))
        cand.append((i * w * k + torch.arange(w * k, device=dev)).expand(b, w * k))
        toks.append(tokens[:, i].reshape(b, w * k))
        exp_rows.append((offsets[i - 1] + f, i * w + torch.arange(w, device=dev).expand(b, w)))
    scores = torch.cat(scores, 1)  # [B, C]
    parent_g = torch.cat(parent_g, 1)
    cand = torch.cat(cand, 1)
    toks = torch.cat(toks, 1).long()
    c = scores.shape[1]

    # expanded_row per candidate: d * W + w of the frontier slot it fills (lowest on repeats)
    big = d * w
    row_of = torch.full((b, c), big, dtype=torch.int64, device=dev)
    for g, r in exp_rows:
        row_of.scatter_reduce_(1, g, r, reduce="amin")

    # the N - 1 best by (score desc, g asc): ancestor-closed.  Node order: present candidates
    # by g, then absent ones by g (parents still precede children: absence is inherited)
    best = _rank(scores)[:, :n_rest]
    absent = scores.gather(1, best) == float("-inf")
    chosen = best.gather(1, (best + absent * c).sort(dim=1).indices)  # [B, N-1]
    node_of = torch.full((b, c), -1, dtype=torch.int64, device=dev)
    node_ids = torch.arange(1, num_nodes, device=dev).expand(b, n_rest)
    node_of.scatter_(1, chosen, node_ids)
    pg = parent_g.gather(1, chosen)
    par = torch.where(pg < 0, 0, node_of.gather(1, pg.clamp_min(0)))

    minus1 = torch.full((b, 1), -1, dtype=torch.int64, device=dev)
    sc = scores.gather(1, chosen)
    present = sc > float("-inf")
    parents = torch.cat([minus1, par], 1).to(torch.int32)
    draft = torch.cat(
        [root_tokens.reshape(b, 1).long(), torch.where(present, toks.gather(1, chosen), -1)], 1
    )
    node_scores = torch.cat([torch.zeros(b, 1, device=dev), sc], 1)
    candidate = torch.cat([minus1, cand.gather(1, chosen)], 1)
    er = row_of.gather(1, chosen)
    expanded = torch.cat(
        [torch.zeros(b, 1, dtype=torch.int64, device=dev), torch.where(er == big, -1, er)], 1
    )
    num_valid = (present.sum(1) + 1).to(torch.int32)
    return (
        parents,
        draft.to(torch.int32),
        node_scores.float(),
        candidate.to(torch.int32),
        expanded.to(torch.int32),
        num_valid,
    )
