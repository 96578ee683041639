"""Speculative decoding with a feature drafter: chain (Leviathan/Chen), EAGLE-2 dynamic tree, or a
static tree with sampled children.  Lossless in every mode (``temperature=0``: bit-exact greedy).

One step, with the root s_c the last emitted token (not yet in the target's cache): the drafter
catches up and predicts the root's children (``DraftRunner.update``); drafting builds a chain
(``verify_chain`` with q), an EAGLE-2 dynamic tree (``tree="dynamic"``: deterministic drafts),
a Spec-LLaVA confidence tree (``tree="confidence"``) or a static ``Tree`` with children drawn
from q (``verify_tree`` with q); one target pass over root + drafts with tree attention;
verification -> a accepted drafts + one corrected/bonus token, and ``commit_kv`` keeps the KV
of the root and the accepted nodes (a + 1 entries).

Each drafting mode in full, and why each is lossless: docs/decoding.md, "Speculative decoding".
"""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode._checks import check_branch, check_hide, check_int, prepare
from specops.decode._loop import (
    begin,
    commit,
    finish,
    first_n,
    first_update,
    prefill,
    relax_on,
    run_steps,
)
from specops.decode._runners import DraftRunner
from specops.decode.sampling import Sampling
from specops.tree import MAX_NODES, Tree, chain_bits, pack_bits

__all__ = ["speculative", "draft_dynamic", "Drafted"]


class Drafted:
    """A drafted tree: ``tree`` (N nodes, node 0 = root), ``tokens`` [B, N] (entry 0 = root),
    ``draft_probs`` [B, N, V] or None (deterministic), ``beams`` [B, k, D] token paths of the
    final top-k frontier (dynamic trees; VVS's candidate paths)."""

    def __init__(self, tree, tokens, draft_probs=None, beams=None, chain=False):
        self.tree, self.tokens, self.draft_probs = tree, tokens, draft_probs
        self.beams, self.chain = beams, chain


def draft_chain(dr: DraftRunner, root, logits, g, k: int, sampling: Sampling, rng, rec) -> Drafted:
    """x_j ~ q_j = drafter(. | x_<j), j = 1..k, each fed back with the drafter's own feature;
    q_j at the run's temperature / top-k / top-p."""
    b = root.shape[0]
    bits = chain_bits(k, b, root.device)
    toks, qs = [root.int()], []
    for j in range(k):
        with rec.timer("specops"):
            q = specops.probs_from_logits(logits, **sampling.probs_kwargs)
            x = specops.sample(q, seed=sampling.seed, offset=rng())
        toks.append(x)
        qs.append(q)
        if j < k - 1:
            lg, gg = dr.extend(x[:, None], g[:, None], j + 1, bits[:, : j + 1], j)
            logits, g = lg[:, 0], gg[:, 0]
    return Drafted(None, torch.stack(toks, 1), torch.stack(qs, 1), chain=True)


def confident(logits, confidence: str, threshold: float) -> torch.Tensor:
    """Spec-LLaVA's per-node decision on the drafter's T = 1 distribution q = softmax(logits)
    [..., V]: True (expand the top-1 child only) where H(q) = -sum q log q <= threshold
    ("entropy", nats) or max q >= threshold ("top1")."""
    lq = logits.float().log_softmax(-1)
    if confidence == "entropy":
        return -(lq.exp() * lq).nan_to_num().sum(-1) <= threshold
    return lq.amax(-1).exp() >= threshold


def _offer(tk, logits, narrow):
    """Top-k children tk [..., k] with all but the first marked absent (-1) where ``narrow``
    (a callable on the logits) says the node is confident."""
    if narrow is None:
        return tk
    rank = torch.arange(tk.shape[-1], device=tk.device)
    return torch.where(narrow(logits)[..., None] & (rank > 0), -1, tk)


def draft_dynamic(
    dr: DraftRunner, root, logits, g, k: int, depth: int, num_nodes: int, rec, narrow=None
):
    """EAGLE-2 dynamic tree (see the module docstring) with frontier width = branching = k:
    ``specops.select_frontier`` picks each depth's frontier, ``specops.build_dynamic_tree`` the
    final N-node tree.  Scores use the drafter's T = 1 log-probabilities.  ``narrow``: None
    (EAGLE-2), or Spec-LLaVA's confidence test (logits [..., V] -> bool [...]): a confident
    node offers its top-1 child only (the others absent, -1, and so are the descendants of an
    absent frontier slot).
    -> Drafted with draft_probs None (deterministic children) and the final frontier's paths."""
    b = root.shape[0]
    dev = root.device
    rows = torch.arange(b, device=dev)[:, None]
    tokens = torch.full((b, depth, k, k), -1, dtype=torch.int32, device=dev)
    logps = torch.full((b, depth, k, k), float("-inf"), device=dev)
    frontier = torch.zeros(b, max(depth - 1, 0), k, dtype=torch.int32, device=dev)
    lp, tk = logits.float().log_softmax(-1).topk(k, -1)  # [B, k]: the root's children
    tk = _offer(tk, logits, narrow)
    tokens[:, 0, 0], logps[:, 0, 0] = tk.int(), lp
    with rec.timer("specops"):
        f = specops.select_frontier(lp[:, None], k, tokens=tk[:, None].int())
    path = f.tokens[:, :, None]  # [B, k, d]: token path of every frontier slot
    feat = g[:, None].expand(b, k, -1)  # drafter feature input of each frontier node (parent's)
    slots = k * max(depth - 1, 1)
    anc = torch.zeros(b, slots, slots, dtype=torch.bool, device=dev)  # drafter-slot ancestry
    par_slot = torch.full((b, k), -1, dtype=torch.long, device=dev)
    for d in range(1, depth):
        frontier[:, d - 1] = f.index
        # the frontier (depth d) takes drafter slots k(d-1) .. kd-1; a slot sees its ancestors
        lo = k * (d - 1)
        new = torch.arange(lo, lo + k, device=dev)
        anc[:, lo : lo + k] = anc[rows, par_slot.clamp(min=0)] & (par_slot >= 0)[:, :, None]
        anc[:, new, new] = True
        bits = pack_bits(anc[:, : lo + k, : lo + k])
        lg, gg = dr.extend(f.tokens.clamp(min=0), feat, d, bits, lo)
        lp, tk = lg.float().log_softmax(-1).topk(k, -1)  # [B, k, k]
        if narrow is not None:  # absent frontier slots (-1) have absent children
            tk = torch.where(f.tokens[..., None] < 0, -1, _offer(tk, lg, narrow))
        tokens[:, d], logps[:, d] = tk.int(), lp
        with rec.timer("specops"):
            f = specops.select_frontier(lp, k, parent_scores=f.scores, tokens=tk.int())
        ps = f.parent_slot.long()
        path = torch.cat([path[rows, ps], f.tokens[:, :, None]], 2)
        feat = gg[rows, ps]
        par_slot = lo + ps
    with rec.timer("specops"):
        t = specops.build_dynamic_tree(root.int(), tokens, logps, frontier, num_nodes)
    tree = t.tree.with_path_width(min(depth + 1, num_nodes))  # a path holds <= N nodes
    return Drafted(tree, t.draft_tokens, None, beams=path)


class StaticPlan:
    """Host-side schedule of a static tree, computed once: per depth the node range and, per
    parent, its children."""

    def __init__(self, tree: Tree, device):
        parents = tree.parents[0].tolist()
        depth = tree.depth[0].tolist()
        if any(depth[i] < depth[i - 1] for i in range(1, len(depth))):
            raise ValueError("speculative: a static tree must list its nodes breadth-first")
        self.tree = tree.to(device).with_path_width(max(depth) + 1)
        self.levels = []  # (lo, hi, {parent: [children]}, parent index tensor)
        for d in range(1, max(depth) + 1):
            nodes = [i for i in range(len(depth)) if depth[i] == d]
            kids: dict = {}
            for i in nodes:
                kids.setdefault(parents[i], []).append(i)
            par = torch.tensor([parents[i] for i in nodes], device=device)
            self.levels.append((nodes[0], nodes[-1] + 1, kids, par))
        self.bits = pack_bits(self.tree.ancestors[:1, 1:, 1:])  # drafter slot = node - 1


def draft_static(
    dr: DraftRunner, root, logits, g, plan: StaticPlan, wor, sampling: Sampling, rng, rec
):
    """Children of every node drawn from the node's drafter distribution q (i.i.d., or without
    replacement), level by level; the drafter runs on every non-leaf level."""
    b = root.shape[0]
    dev = root.device
    n = plan.tree.num_nodes
    tokens = torch.full((b, n), -1, dtype=torch.int32, device=dev)
    tokens[:, 0] = root.int()
    v = logits.shape[-1]
    qrows = torch.zeros(b, n, v, dtype=torch.float32, device=dev)
    feats = torch.zeros(b, n, g.shape[-1], dtype=g.dtype, device=dev)
    seed, probs_kwargs = sampling.seed, sampling.probs_kwargs
    with rec.timer("specops"):
        qrows[:, 0] = specops.probs_from_logits(logits, **probs_kwargs)
    feats[:, 0] = g
    bits = plan.bits.expand(b, -1, -1)
    for li, (lo, hi, kids, par) in enumerate(plan.levels):
        with rec.timer("specops"):
            for p, ks in kids.items():
                q = qrows[:, p]
                if wor:
                    x = specops.sample_without_replacement(q, len(ks), seed=seed, offset=rng())
                else:
                    x = specops.sample(q[:, None].expand(b, len(ks), v), seed=seed, offset=rng())
                tokens[:, ks] = x.int()
        if li == len(plan.levels) - 1:
            break
        lg, gg = dr.extend(tokens[:, lo:hi], feats[:, par], li + 1, bits[:, : hi - 1], lo - 1)
        feats[:, lo:hi] = gg
        with rec.timer("specops"):
            qrows[:, lo:hi] = specops.probs_from_logits(lg, **probs_kwargs)
    return Drafted(plan.tree, tokens, qrows)


def tree_sizes(fn: str, model, branch, depth, num_nodes) -> None:
    """The EAGLE-2 tree's sizes (``speculative``, ``vvs``): ``branch`` children per node (at
    most the vocabulary), ``depth`` >= 1 levels, ``num_nodes`` in [2, Tree.MAX_NODES]."""
    check_branch(fn, branch, model)
    check_int(fn, "depth", depth, 1, MAX_NODES, " (Tree.MAX_NODES)")
    check_int(fn, "num_nodes", num_nodes, 2, MAX_NODES, " (Tree.MAX_NODES)")


@torch.no_grad()
def speculative(
    model,
    drafter,
    classes,
    *,
    tree="dynamic",
    num_draft: int = 4,
    branch: int = 4,
    depth: int = 5,
    num_nodes: int = 24,
    confidence: str = "entropy",
    threshold: float = 1.0,
    without_replacement: bool = True,
    relax=None,
    block: bool = False,
    length: int | None = None,
    drafter_prefill: bool = True,
    hide=None,
    hide_positions: str = "compact",
    compile_step=None,
    **sampling_kwargs,
):
    """Speculative decoding of ``length`` tokens per prompt.

    ``tree``: None (chain of ``num_draft`` sampled drafts), "dynamic" (EAGLE-2: ``branch`` = top-k
    per node and frontier width, ``depth`` levels, ``num_nodes`` nodes including the root),
    "confidence" (Spec-LLaVA: the same with top-1 only at confident nodes, ``confidence`` =
    "entropy" (H(q) <= ``threshold`` nats) or "top1" (max q >= ``threshold``); ``num_nodes`` is
    the node budget, the tree may use fewer; extra["mean_tree_nodes"]) or a static ``Tree``
    (children sampled; ``without_replacement`` picks the sibling scheme).
    ``sampling_kwargs``: the ``Sampling`` settings (temperature, top_k, top_p, cfg_scale, seed);
    ``temperature=0``: greedy drafts and greedy verification.  ``relax``: LANTERN relaxed
    acceptance (``specops.decode.lantern(codebook, k, delta)``; LOSSY, the LANTERN baseline of
    the VVS paper).  ``block``: block verification of the chain (``tree=None``; Sun et al. 2024,
    ``verify_chain(block=True)``: lossless, never fewer accepted drafts on average).
    ``drafter_prefill`` (default): a feature drafter first reads the prompt,
    entry i = [e(x_{i+1}) || f_i] with the target's last hidden states (HiViS Eq. 3), in one
    call; False: it starts from the last prompt position alone.  ``hide`` [B, P] bool (HiViS):
    prompt positions (visual tokens) left out of the drafter's sequence, seen only through the
    target's features at the kept positions; ``hide_positions`` "compact" (drafter positions
    0 .. m-1 over the kept entries, the paper's) or "target" (the target's position ids).
    ``stats.extra["drafter_prefill"]`` = mean drafter prefill length.  ``compile_step``: see
    ``specops.decode.compiled_step`` (the first step, whose drafter update reads the prompt's
    entries, runs eagerly; every later step has the same shapes).
    -> (tokens [B, length], Stats)."""
    sampling = Sampling.of("speculative", sampling_kwargs)
    tree_sizes("speculative", model, branch, depth, num_nodes)
    num_draft = check_int("speculative", "num_draft", num_draft, 1, MAX_NODES - 1,
                          " (Tree.MAX_NODES - 1)")  # fmt: skip
    if not (tree is None or isinstance(tree, (str, Tree))):
        raise TypeError(
            f"speculative: tree must be None, 'dynamic', 'confidence' or a specops.Tree, got "
            f"{type(tree).__name__}"
        )
    prompt, length = prepare("speculative", model, classes, length)
    hide = check_hide("speculative", prompt, hide, drafter_prefill, hide_positions, drafter)
    relax = relax_on("speculative", relax, sampling.greedy, prompt.device)
    if block and (tree is not None or sampling.greedy or relax is not None):
        raise ValueError("speculative: block=True verifies a sampled chain (tree=None, no relax)")
    mode, width, nodes = _mode(tree, num_draft, depth, num_nodes, confidence)
    name = _NAMES[mode]
    run = begin(name, model, prompt, length, sampling, width=width, slack=width + nodes + 1,
                drafter=drafter)  # fmt: skip
    spec = _Spec(run, mode, width, tree=tree, num_draft=num_draft, branch=branch, depth=depth,
                 num_nodes=num_nodes, without_replacement=without_replacement, relax=relax,
                 block=block)  # fmt: skip
    if mode == "confidence":
        spec.narrow = lambda lg: confident(lg, confidence, threshold)
    then = lambda p, hidden, root, ones: first_update(  # noqa: E731
        run, hidden, root, drafter_prefill, hide, hide_positions
    )
    root, upd = prefill(run, then)
    run_steps(run, spec.step, (root, *upd), compile_step=compile_step, eager_first=True)
    tokens, stats = finish(run, drafter_prefill=float(upd[2].float().mean()))
    if mode in ("dynamic", "confidence"):
        steps = sum(stats.passes_per_request) - prompt.shape[0]  # the prefill is no tree step
        stats.extra["mean_tree_nodes"] = int(spec.node_sum) / max(steps, 1)
    return tokens, stats


_NAMES = {"chain": "spec-chain", "dynamic": "spec-tree", "confidence": "spec-conf",
          "static": "spec-static"}  # fmt: skip


def _mode(tree, num_draft, depth, num_nodes, confidence):
    """-> (mode, the most tokens a step emits, the nodes of a drafted tree) of ``tree``."""
    if tree is None:
        return "chain", num_draft + 1, num_draft + 1
    if isinstance(tree, str):
        if tree not in ("dynamic", "confidence"):
            raise ValueError(
                f"speculative: tree must be None, 'dynamic', 'confidence' or a Tree, got {tree!r}"
            )
        if confidence not in ("entropy", "top1"):
            raise ValueError(
                f"speculative: confidence must be 'entropy' or 'top1', got {confidence!r}"
            )
        return tree, min(depth + 1, num_nodes), num_nodes
    return "static", tree.max_depth() + 1, tree.num_nodes


class _Spec:
    """One speculative run's drafting settings, its step and its drafting."""

    def __init__(self, run, mode, width, *, tree, **opts):
        self.run, self.mode, self.narrow = run, mode, None
        self.__dict__.update(opts)
        dev = run.prompt.device
        self.plan = StaticPlan(tree, dev) if mode == "static" else None
        self.rows, self.cols = run.rows, torch.arange(width, device=dev)[None, :]
        self.node_sum = torch.zeros((), dtype=torch.long, device=dev)

    def draft(self, root, upd_tok, upd_feat, upd_n, active):
        """The drafter's update with the last committed entries, then the draft."""
        run, dr, mode = self.run, self.run.dr, self.mode
        smp, rng, rec = run.sampling, run.rng, run.rec
        logits, g = dr.update(upd_tok, upd_feat, upd_n)
        if mode == "chain":
            return draft_chain(dr, root, logits, g, self.num_draft, smp, rng, rec)
        if mode == "static":
            wor = self.without_replacement
            return draft_static(dr, root, logits, g, self.plan, wor, smp, rng, rec)
        dft = draft_dynamic(dr, root, logits, g, self.branch, self.depth, self.num_nodes, rec,
                            self.narrow)  # fmt: skip
        self.node_sum.add_(torch.where(active, (dft.tokens >= 0).sum(-1), 0).sum())
        return dft

    def verify(self, probs, dft):
        """-> (verification result, its path [B, width]: slots of the root and accepted nodes)."""
        smp, cols = self.run.sampling, self.cols
        kw = dict(seed=smp.seed, offset=self.run.rng(), relax=self.relax, greedy=smp.greedy)
        if self.mode == "chain":
            r = specops.verify_chain(probs, dft.tokens[:, 1:], dft.draft_probs, block=self.block,
                                     **kw)  # fmt: skip
            return r, torch.where(cols <= r.num_accepted[:, None], cols, -1)
        wor = self.without_replacement and self.mode == "static"
        r = specops.verify_tree(probs, dft.tree, dft.tokens, dft.draft_probs,
                                without_replacement=wor, **kw)  # fmt: skip
        return r, r.path

    def step(self, root, upd_tok, upd_feat, upd_n):
        run, tgt = self.run, self.run.tgt
        active = run.out.active
        with nvtx_range("draft"):
            dft = self.draft(root, upd_tok, upd_feat, upd_n, active)
        depth_of = self.cols if self.mode == "chain" else dft.tree.depth
        positions = tgt.seqlens.long()[:, None] + depth_of
        # padding nodes (-1: absent candidates) go through the target as token 0, never accepted
        probs, hidden = tgt.forward(dft.tokens.clamp(min=0), positions, dft.tree, charged=active)
        with nvtx_range("verify"), run.rec.timer("specops"):
            r, path = self.verify(probs, dft)
        a = r.num_accepted.long()
        n_emit = torch.where(active, a + 1, 0)
        # keep the KV of the root and the accepted nodes: slots path[0 .. a]
        commit(run, first_n(path, n_emit), r.tokens, n_emit, active)
        root = torch.where(active, r.tokens[self.rows, a], root)
        # the drafter's next entries: [e(s_{i+1}) || f_i] for the committed positions i
        with run.rec.timer("specops"):
            upd_feat = specops.gather_rows(hidden, path)
        return root, r.tokens, upd_feat, n_emit
