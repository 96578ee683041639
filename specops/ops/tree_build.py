"""Public tree_build ops: EAGLE-2 dynamic draft trees built on the device.

``select_frontier`` picks each depth's frontier from the drafted children (W * K -> W);
``build_dynamic_tree`` reranks the candidates of every drafted layer into one tree of N nodes.
Everything stays on the device: no host sync, no loop over requests (the drafting loop is over
depth).  Semantics, ranking and tie rules: ``specops/reference/tree_build.py``.  A whole drafting
step (depth D, frontier width W, K children per expanded node), written out: docs/trees.md.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops import reference
from specops.ops import _common as c
from specops.ops._decl import OpDecl, Out, Scalar, Ten, register_decl
from specops.tree import Tree

# the public functions select_frontier and build_dynamic_tree: written from these declarations
# to specops/ops/_generated_tree_build.py by scripts/gen_ops.py
__all__ = ["Frontier", "DynamicTree"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class Frontier(NamedTuple):
    """The next frontier (``select_frontier``); W' = ``width`` slots, best first."""

    index: torch.Tensor  # [B, W'] int32: flat child index w * K + k into the [W, K] children
    scores: torch.Tensor  # [B, W'] float32: cumulative log-probs (pass back as parent_scores)
    parent_slot: torch.Tensor  # [B, W'] int32: index // K, the current-frontier slot it hangs from
    tokens: torch.Tensor | None  # [B, W'] int32 (when ``tokens`` was given), -1 if absent


class DynamicTree(NamedTuple):
    """The drafted tree (``build_dynamic_tree``), N nodes, node 0 = the root."""

    tree: Tree  # Tree.from_parents(parents), built on the device
    draft_tokens: torch.Tensor  # [B, N] int32: root token, then the drafts (-1: absent)
    scores: torch.Tensor  # [B, N] float32 cumulative log-probs (root 0, absent -inf)
    candidate: torch.Tensor  # [B, N] int32: d * W * K + w * K + k of each node (root -1)
    expanded_row: torch.Tensor  # [B, N] int32: d * W + w if node = frontier slot w of layer d
    num_valid: torch.Tensor  # [B] int32: present nodes, root included

    @property
    def parents(self) -> torch.Tensor:
        return self.tree.parents


# select_frontier ------------------------------------------------------------------------------
def _check_select(logprobs, width, parent_scores, tokens, backend) -> None:
    op = "select_frontier"
    c.check_probs(op, "logprobs", logprobs, ndim=3)
    b, w, k = logprobs.shape
    dev = logprobs.device
    if not isinstance(width, int) or isinstance(width, bool) or not 1 <= width <= w * k:
        raise ValueError(
            f"specops.{op}: width must be an int in [1, W * K = {w * k}] for logprobs of shape "
            f"{list(logprobs.shape)}, got {width!r}"
        )
    if parent_scores is not None:
        c.check_probs(op, "parent_scores", parent_scores, device=dev, shape=(b, w))
    if tokens is not None:
        c.check_ids(op, "tokens", tokens, device=dev, shape=(b, w, k))


def _frontier(r, logprobs, tokens) -> Frontier:
    """The op's (index, scores) as a ``Frontier``: with the parent slot index // K and the
    chosen children's tokens (-1 where absent)."""
    index, scores = r
    b, w, k = logprobs.shape
    toks = None
    if tokens is not None:
        toks = tokens.reshape(b, w * k).gather(1, index.long()).to(torch.int32)
        toks = torch.where(scores > float("-inf"), toks, -1)
    return Frontier(index, scores, torch.div(index, k, rounding_mode="floor"), toks)


SELECT = OpDecl(
    "select_frontier",
    args=(
        Ten("logprobs", "B W K"),
        Scalar("width", "int"),
        Ten("parent_scores", "B W", optional=True),
        Ten("tokens", "B W K", optional=True),
    ),
    outs=(Out("index", "B, width"), Out("scores", "B, width", torch.float32)),
    backends=("reference",),
    check=_check_select,
    reference=reference.select_frontier,
    fast=False,  # no compiled kernel: every call runs the checks
)
SELECT.public(
    reference.select_frontier,
    result=_frontier,
    returns="Frontier",
    doc="""EAGLE-2's per-depth selection: the ``width`` best of the W * K drafted children.

    Parameters
    ----------
    logprobs : [B, W, K] float32/float16/bfloat16
        Edge log-probs: log q of child k given frontier node w, e.g. the drafter's
        ``log_softmax(-1).topk(K)`` values; NaN / -inf mark absent children.
    width : int
        W', the children kept, 1 <= W' <= W * K.
    parent_scores : [B, W] float32/float16/bfloat16 or None
        The current frontier's cumulative scores (``Frontier.scores`` of the previous call);
        None: 0, i.e. the root.
    tokens : [B, W, K] int32/int64 or None
        The children's tokens, returned for the chosen ones; negative tokens mark absent
        children.
    backend : str
        "auto" or "reference" (the only implementation).
    out : (index, scores) or None
        Preallocated contiguous outputs ([B, W'] int32, float32).

    Score of a child = parent score + min(log q, 0); ranking by (score descending, flat index
    ``w * K + k`` ascending), the order ``build_dynamic_tree`` uses.  Returns a ``Frontier``.
    Layer 0 (the root's K children) is ``logprobs[:, None]`` with ``parent_scores=None``.""",
)
register_decl(SELECT)


# build_dynamic_tree ---------------------------------------------------------------------------
def _check_build(root_tokens, tokens, logprobs, frontier, num_nodes, backend) -> None:
    op = "build_dynamic_tree"
    c.check_ids(op, "tokens", tokens, ndim=4)
    b, d, w, k = tokens.shape
    dev = tokens.device
    if min(d, w, k) < 1:  # B = 0 (an empty batch) gives empty outputs and an empty Tree
        raise ValueError(
            f"specops.{op}: tokens must have shape [B, D, W, K] with D, W, K >= 1, "
            f"got {list(tokens.shape)}"
        )
    c.check_probs(op, "logprobs", logprobs, device=dev, shape=(b, d, w, k))
    c.check_ids(op, "frontier", frontier, device=dev, shape=(b, d - 1, w))
    c.check_ids(op, "root_tokens", root_tokens, device=dev, shape=(b,))
    cands = k + (d - 1) * w * k
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int):
        raise TypeError(
            f"specops.{op}: num_nodes must be an int, got {type(num_nodes).__name__} {num_nodes!r}"
        )
    top = min(cands + 1, Tree.MAX_NODES)  # a Tree holds at most Tree.MAX_NODES nodes
    if not 1 <= num_nodes <= top:
        raise ValueError(
            f"specops.{op}: num_nodes must be an int in [1, min(1 + K + (D - 1) W K, "
            f"Tree.MAX_NODES) = {top}] for tokens of shape {list(tokens.shape)}, got {num_nodes!r}"
        )
    if b * num_nodes * ((num_nodes + 31) // 32) > 2**31 - 1:
        raise ValueError(
            f"specops.{op}: num_nodes must keep the tree's mask_bits within 2**31 - 1 words "
            f"(B * N * ceil(N/32)) for a batch of B = {b}, got {num_nodes}"
        )
    if c.validating() and frontier.numel():
        lim = torch.full((d - 1, 1), w * k, device=dev)
        lim[0] = k
        bad = (frontier < 0) | (frontier >= lim)
        if bad.any():
            i = bad.nonzero()[0].tolist()
            raise ValueError(
                f"specops.{op}: frontier[{i[0]}, {i[1]}, {i[2]}] = {int(frontier[tuple(i)])} is "
                f"outside [0, {k if i[1] == 0 else w * k}) (flat child index into layer {i[1]})"
            )


def _dynamic_tree(r) -> DynamicTree:
    parents, *rest = r
    return DynamicTree(Tree.from_parents(parents, validate=False), *rest)


BUILD = OpDecl(
    "build_dynamic_tree",
    args=(
        Ten("root_tokens", "B"),
        Ten("tokens", "B D W K"),
        Ten("logprobs", "B D W K"),
        Ten("frontier", "B E W"),
        Scalar("num_nodes", "int"),
    ),
    outs=(
        Out("parents", "B, num_nodes"),
        Out("draft_tokens", "B, num_nodes"),
        Out("scores", "B, num_nodes", torch.float32),
        Out("candidate", "B, num_nodes"),
        Out("expanded_row", "B, num_nodes"),
        Out("num_valid", "B"),
    ),
    backends=("reference",),
    check=_check_build,
    reference=reference.build_dynamic_tree,
    fast=False,
)
BUILD.public(
    reference.build_dynamic_tree,
    result=_dynamic_tree,
    returns="DynamicTree",
    doc="""EAGLE-2's rerank: the draft tree of the root and the ``num_nodes - 1`` best candidates.

    Parameters
    ----------
    root_tokens : [B] int32/int64
        The last committed token of each request (node 0's token).
    tokens : [B, D, W, K] int32/int64
        Layer d's drafted children, K per frontier slot; layer 0 is the root's K children in
        slot 0 (``tokens[:, 0, 1:]`` is ignored).
    logprobs : [B, D, W, K] float32/float16/bfloat16
        Their edge log-probs, log q of the child given its path, not cumulative; clamped to
        <= 0; NaN / -inf, or a negative token, mark an absent child.
    frontier : [B, D - 1, W] int32/int64
        ``frontier[:, d - 1, w]`` = flat index ``w' * K + k'`` into layer d - 1 of the candidate
        in frontier slot w of layer d, i.e. the parent of ``tokens[:, d, w, :]``
        (``Frontier.index``; entries of ``frontier[:, 0]`` are < K).
    num_nodes : int
        N, the tree size including the root: 1 <= N <= 1 + K + (D - 1) W K and
        N <= ``Tree.MAX_NODES`` (16384).
    backend : str
        "auto" or "reference" (the only implementation).
    out : (parents, draft_tokens, scores, candidate, expanded_row, num_valid) or None
        Preallocated contiguous outputs (``DynamicTree``'s fields; tree as its parents).

    Built on the device; B = 0 gives empty outputs.  The candidates of every drafted layer are
    ranked by (cumulative log-prob descending, candidate index ascending) and the first N - 1
    are taken: the set is closed under ancestors (a child never outscores its parent and ties go
    to the earlier layer), so the tree is valid by construction.  Nodes are ordered by candidate
    index (layer, slot, child rank): ``parents[n] < n``, depth non-decreasing, siblings best
    first (the order ``verify_tree`` tries them).  When fewer than N - 1 candidates are present,
    the tree is padded with absent nodes after the real ones: nodes ``[num_valid, N)`` have
    token -1 and score -inf (verification rejects them).

    Returns a ``DynamicTree`` (fields documented there and in the reference).""",
)
register_decl(BUILD)
