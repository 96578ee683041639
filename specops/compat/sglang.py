"""SGLang's EAGLE tree verification (the sgl_kernel / SGLang 0.5.23 JIT kernels' contracts), on
device tensors, in place, without a host sync.

Trees are SGLang's linked lists, per request b over N tree-local nodes: node 0 is the root (the
last verified token), node i carries ``candidates[b, i]``, its first child is
``retrive_next_token[b, i]`` and its next sibling ``retrive_next_sibling[b, i]`` (-1: none), and
its flat output slot is ``retrive_index[b, i]`` (EAGLE: b * N + i).  S = ``accept_index.shape[1]``
is the number of speculative tokens (the walk takes at most S - 1 levels).  Written, as the
kernels write them: ``accept_index[b, 0..a]`` = the flat slots of the root and the a accepted
nodes (the rest left as given), ``accept_token_num[b]`` = a, ``predicts[slot of each accepted-path
node]`` = the token that follows it (the accepted child's candidate; for the last node the bonus
or correction token).  Other entries are left as given.

- ``verify_tree_greedy``: a child is accepted when its candidate equals the target's argmax
  after the current node, ``target_predict.flatten()[slot]`` (SGLang indexes it by flat slot).
- ``tree_speculative_sampling_target_only``: SGLang's sampled verification without draft
  probabilities.  At each level one coin ``uniform_samples[b, node]`` (the node last accepted) is
  compared with the running target mass of the siblings tried so far: sibling x is accepted iff
  p(x) > 0 and (coin < acc / threshold_acc or p(x) >= threshold_single), acc += p(x) over the
  siblings in list order (0.5.23's rule; with both thresholds 1 this samples the target over the
  ordered siblings).  A rejected sibling's p(x) is copied into ``draft_probs`` at its row, so the
  final token is drawn from r = max(p - draft_probs, 0) at the last accepted node (the target
  with the rejected siblings removed; the whole target after a full-depth acceptance): the first
  id with r > 0 whose inclusive float32 cumsum exceeds ``u * sum(r)``, else the last id with
  r > 0, else V - 1.  The walk is exact; the final id can differ from SGLang's kernel only where
  u * sum(r) falls within float32 rounding of a cumsum boundary (the sums run in another order).

Malformed trees (a child or sibling index outside [-1, N), a node reached twice: a sibling cycle
or a node with two parents, a slot outside ``predicts``) raise a ValueError naming the tensor in
validation mode (``specops.validation()``, ``SPECOPS_VALIDATE=1``); in fast mode every index is
clamped and every walk bounded, so no access leaves its tensor whatever the lists hold.

Nothing here imports SGLang; ``specops.sglang.install()`` puts these in SGLang's place."""

from __future__ import annotations

import torch

import specops
from specops.ops import _common as c

__all__ = [
    "chain_speculative_sampling_triton",
    "linked_tree_parents",
    "tree_speculative_sampling",
    "tree_speculative_sampling_target_only",
    "verify_tree_greedy",
]


def _check_tree(op, candidates, retrive_index, nxt, sib, predicts, accept_index, extra=()):
    """Shapes always; the lists' values in validation mode (host reads)."""
    if candidates.dim() != 2:
        raise ValueError(
            f"{op}: candidates must be [bs, num_draft_tokens], got {list(candidates.shape)}"
        )
    bs, n = candidates.shape
    for name, t in (("retrive_index", retrive_index), ("retrive_next_token", nxt),
                    ("retrive_next_sibling", sib), *extra):  # fmt: skip
        if tuple(t.shape[:2]) != (bs, n):
            raise ValueError(
                f"{op}: {name} must have the shape of candidates {[bs, n]}, got {list(t.shape)}"
            )
    if accept_index.dim() != 2 or accept_index.shape[0] != bs:
        raise ValueError(
            f"{op}: accept_index must be [{bs}, spec_tokens], got {list(accept_index.shape)}"
        )
    if not c.validating() or bs * n == 0:
        return
    for name, t in (("retrive_next_token", nxt), ("retrive_next_sibling", sib)):
        if bool(((t < -1) | (t >= n)).any()):
            raise ValueError(f"{op}: {name} holds an index outside [-1, {n})")
    if bool(((retrive_index < 0) | (retrive_index >= predicts.numel())).any()):
        raise ValueError(
            f"{op}: retrive_index holds a slot outside predicts [0, {predicts.numel()})"
        )
    srt = retrive_index.sort(-1).values
    if n > 1 and bool((srt[:, 1:] == srt[:, :-1]).any()):
        raise ValueError(f"{op}: retrive_index repeats a slot within a request")
    # every node is reached at most once from the root through first-child / next-sibling links
    nx, sb = nxt.tolist(), sib.tolist()
    for b in range(bs):
        seen, stack = {0}, [0]
        while stack:
            i = stack.pop()
            for link, name in (
                (nx[b][i], "retrive_next_token"),
                (sb[b][i], "retrive_next_sibling"),
            ):
                if link == -1:
                    continue
                if link in seen:
                    raise ValueError(
                        f"{op}: request {b}: node {link} is reached twice through "
                        f"{name} (a cycle, or a node with two parents)"
                    )
                seen.add(link)
                stack.append(link)


def _write(flat: torch.Tensor, at: torch.Tensor, value: torch.Tensor, where: torch.Tensor):
    """flat[at] = value where ``where``, unchanged elsewhere (no host sync)."""
    flat.scatter_(0, at, torch.where(where, value, flat.gather(0, at).long()).to(flat.dtype))


def _write_path(predicts, accept_index, accept_token_num, retrive_index, path, tokens, num):
    """SGLang's outputs from a specops result: ``path`` [bs, W] tree-local node ids root first
    (-1 padded), ``tokens`` [bs, W] the token after each path node, ``num`` [bs] accepted
    drafts.  accept_index[b, j] = slot of path[b, j] and predicts[that slot] = tokens[b, j] for
    j <= num[b]; everything else left as given."""
    bs, n = retrive_index.shape
    w = path.shape[1]
    a = num.long()
    on_path = torch.arange(w, device=a.device)[None, :] <= a[:, None]
    slot = retrive_index.long()
    rows = torch.arange(bs, device=a.device)[:, None]
    cols = accept_index[:, :w]
    cols.copy_(
        torch.where(on_path, slot[rows, path.long().clamp(min=0)], cols.long()).to(cols.dtype)
    )
    # per node: the token after it when it is on the path (off-path entries: a spare column)
    node = torch.where(on_path, path.long(), n)
    after = torch.zeros(bs, n + 1, dtype=torch.long, device=a.device).scatter_(
        1, node, tokens.long()
    )[:, :n]
    hit = torch.zeros(bs, n + 1, dtype=torch.bool, device=a.device).scatter_(1, node, on_path)
    flat = predicts.view(-1)
    at = slot.clamp(0, max(flat.numel() - 1, 0)).reshape(-1)
    old = flat.gather(0, at).view(bs, n).long()
    flat.scatter_(0, at, torch.where(hit[:, :n], after, old).reshape(-1).to(flat.dtype))
    accept_token_num.copy_(a.to(accept_token_num.dtype))


class _Walk:
    """The state of the per-request walk, as tensors [bs]."""

    def __init__(self, candidates, retrive_index, nxt, sib, predicts, accept_index):
        self.bs, self.n = candidates.shape
        dev = candidates.device
        self.rows = torch.arange(self.bs, device=dev)
        self.cand = candidates.long()
        self.slot = retrive_index.long().clamp(0, max(predicts.numel() - 1, 0))
        self.nxt, self.sib = nxt.long(), sib.long()
        self.flat = predicts.view(-1)
        self.accept_index = accept_index
        self.last = torch.zeros(self.bs, dtype=torch.long, device=dev)  # tree-local node
        self.alive = torch.ones(self.bs, dtype=torch.bool, device=dev)
        self.num = torch.zeros(self.bs, dtype=torch.long, device=dev)
        if accept_index.shape[1] > 0:
            accept_index[:, 0] = self.slot[:, 0].to(accept_index.dtype)

    def node(self, i: torch.Tensor) -> torch.Tensor:
        return i.clamp(0, self.n - 1)

    def accept(self, step: int, hit: torch.Tensor):
        """Rows with hit >= 0 accept tree-local node ``hit`` at ``step``."""
        found = hit >= 0
        h = self.node(hit)
        _write(self.flat, self.slot[self.rows, self.last], self.cand[self.rows, h], found)
        col = self.accept_index[:, step]
        self.accept_index[:, step] = torch.where(found, self.slot[self.rows, h], col.long()).to(
            col.dtype
        )
        self.last = torch.where(found, h, self.last)
        self.num += found.long()
        self.alive &= found


def verify_tree_greedy(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """sgl_kernel's ``verify_tree_greedy`` (module docstring); outputs written in place."""
    op = "specops.compat.sglang.verify_tree_greedy"
    _check_tree(op, candidates, retrive_index, retrive_next_token, retrive_next_sibling, predicts,
                accept_index, (("target_predict", target_predict),))  # fmt: skip
    w = _Walk(candidates, retrive_index, retrive_next_token, retrive_next_sibling, predicts,
              accept_index)  # fmt: skip
    if w.bs == 0:
        return
    tp = target_predict.reshape(-1).long()
    tp_at = lambda node: tp[w.slot[w.rows, node].clamp(0, tp.numel() - 1)]  # noqa: E731
    for step in range(1, accept_index.shape[1]):
        want = tp_at(w.last)
        cur = w.nxt[w.rows, w.last]
        hit = torch.full_like(cur, -1)
        for _ in range(w.n):  # the current node's sibling list, N hops at most
            valid = w.alive & (hit < 0) & (cur >= 0) & (cur < w.n)
            match = valid & (w.cand[w.rows, w.node(cur)] == want)
            hit = torch.where(match, cur, hit)
            cur = torch.where(valid & ~match, w.sib[w.rows, w.node(cur)], -1)
        w.accept(step, hit)
    _write(w.flat, w.slot[w.rows, w.last], tp_at(w.last), torch.ones_like(w.alive))
    accept_token_num.copy_(w.num.to(accept_token_num.dtype))


def tree_speculative_sampling_target_only(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """SGLang 0.5.23's ``tree_speculative_sampling_target_only`` (module docstring): ``predicts``,
    ``accept_index``, ``accept_token_num`` and ``draft_probs`` written in place.
    ``deterministic`` is accepted and ignored (this is always deterministic)."""
    op = "specops.compat.sglang.tree_speculative_sampling_target_only"
    if not (0.0 <= float(threshold_single) <= 1.0 and 0.0 <= float(threshold_acc) <= 1.0):
        raise ValueError(
            f"{op}: threshold_single and threshold_acc must be in [0, 1], got "
            f"{threshold_single} and {threshold_acc}"
        )
    _check_tree(op, candidates, retrive_index, retrive_next_token, retrive_next_sibling, predicts,
                accept_index, (("uniform_samples", uniform_samples), ("target_probs", target_probs),
                               ("draft_probs", draft_probs)))  # fmt: skip
    if uniform_samples_for_final_sampling.numel() != candidates.shape[0]:
        raise ValueError(
            f"{op}: uniform_samples_for_final_sampling must hold one coin per request "
            f"({candidates.shape[0]}), got {list(uniform_samples_for_final_sampling.shape)}"
        )
    if target_probs.dim() != 3 or draft_probs.shape != target_probs.shape:
        raise ValueError(
            f"{op}: target_probs and draft_probs must be [bs, num_draft_tokens, vocab] alike, got "
            f"{list(target_probs.shape)} and {list(draft_probs.shape)}"
        )
    w = _Walk(candidates, retrive_index, retrive_next_token, retrive_next_sibling, predicts,
              accept_index)  # fmt: skip
    vocab = target_probs.shape[2]
    if w.bs == 0 or vocab == 0:
        return
    dev = target_probs.device
    # (torch.full: no host-to-device copy; the kernel clamps threshold_acc to 1e-9 as here)
    ts = torch.full((), float(threshold_single), dtype=torch.float32, device=dev)
    ta = torch.full((), max(float(threshold_acc), 1e-9), dtype=torch.float32, device=dev)
    coins = uniform_samples.float()
    rows = w.rows
    for step in range(1, accept_index.shape[1]):
        coin = coins[rows, w.last]
        acc = torch.zeros(w.bs, dtype=torch.float32, device=dev)
        cur = w.nxt[rows, w.last]
        hit = torch.full_like(cur, -1)
        for _ in range(w.n):  # siblings in list order, N hops at most
            valid = w.alive & (hit < 0) & (cur >= 0) & (cur < w.n)
            node = w.node(cur)
            tok = w.cand[rows, node].clamp(0, vocab - 1)
            p = target_probs[rows, w.last, tok].float()
            acc = torch.where(valid, acc + p, acc)
            take = valid & (p > 0) & ((coin < acc / ta) | (p >= ts))
            # a rejected sibling's mass leaves the final draw: draft_probs[b, last, tok] = p(tok)
            rejected = valid & ~take
            old = draft_probs[rows, w.last, tok]
            draft_probs.index_put_((rows, w.last, tok), torch.where(rejected, p.to(old.dtype), old))
            hit = torch.where(take, cur, hit)
            cur = torch.where(rejected, w.sib[rows, node], -1)
        w.accept(step, hit)
    full = w.num == accept_index.shape[1] - 1  # full depth: no draft row for the bonus token
    p_row = target_probs[rows, w.last].float()
    q_row = draft_probs[rows, w.last].float()
    r = torch.fmax(p_row - torch.where(full[:, None], 0.0, q_row), p_row.new_zeros(()))
    u = uniform_samples_for_final_sampling.reshape(-1).float()
    u = u * r.sum(-1)
    pos = r > 0
    past = pos & (r.cumsum(-1) > u[:, None])  # inverse CDF: the first id whose cumsum passes u
    first, has_first = past.int().argmax(-1), past.any(-1)
    last_pos = vocab - 1 - pos.flip(-1).int().argmax(-1)
    token = torch.where(has_first, first, torch.where(pos.any(-1), last_pos, vocab - 1))
    _write(w.flat, w.slot[rows, w.last], token, torch.ones_like(w.alive))
    accept_token_num.copy_(w.num.to(accept_token_num.dtype))


def chain_speculative_sampling_triton(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
    *,
    block_verification: bool = False,
) -> None:
    """SGLang 0.5.23's chain rejection sampler (``reject_sampling.py``; EAGLE with
    ``--speculative-use-rejection-sampling``, topk 1), on ``specops.verify_chain``.

    ``candidates`` [bs, K+1] (slot 0 the root, slots 1..K the drafts x_1..x_K),
    ``target_probs`` [bs, K+1, V], ``draft_probs`` [bs, >= K, V] (rows 0..K-1 read),
    ``uniform_samples`` [bs, >= K] (column i-1 tests draft i),
    ``uniform_samples_for_final_sampling`` [bs].  Token-wise: accept x_i while
    u * q(x_i) < p(x_i), the correction drawn from max(p - q, 0).  ``block_verification``:
    Sun et al.'s block verification (``verify_chain(block=True)``).

    Written as SGLang writes them: ``accept_token_num[b]`` = tau, ``accept_index[b, j]`` =
    ``retrive_index[b, j]`` for j <= tau, ``predicts`` at ``retrive_index[b, j - 1]`` = x_j and
    at ``retrive_index[b, tau]`` the final token; the rest left as given.  The thresholds,
    ``deterministic`` and the sibling lists are ignored, as in SGLang.  Same law as SGLang's
    kernel and the same decisions on the same coins; the final token can differ where
    u * sum lies within rounding of a cumulative-sum boundary, and where the residual has no
    mass (SGLang emits V - 1, specops draws from the target row), and for a draft whose draft
    probability is 0 (impossible for a sampled draft: SGLang rejects it, specops accepts it when
    its target probability is positive, as min(1, p/q) = 1)."""
    op = "specops.compat.sglang.chain_speculative_sampling_triton"
    bs, k1 = candidates.shape
    k = k1 - 1
    if target_probs.dim() != 3 or tuple(target_probs.shape[:2]) != (bs, k1):
        raise ValueError(
            f"{op}: target_probs must be [{bs}, {k1}, V], got {list(target_probs.shape)}"
        )
    if draft_probs.dim() != 3 or draft_probs.shape[0] != bs or draft_probs.shape[1] < k:
        raise ValueError(
            f"{op}: draft_probs must be [{bs}, >= {k}, V], got {list(draft_probs.shape)}"
        )
    if uniform_samples.dim() != 2 or uniform_samples.shape[0] != bs or uniform_samples.shape[1] < k:
        raise ValueError(
            f"{op}: uniform_samples must be [{bs}, >= {k}], got {list(uniform_samples.shape)}"
        )
    if bs == 0:
        return
    u = torch.cat(
        [uniform_samples[:, :k].float(), uniform_samples_for_final_sampling.reshape(bs, 1).float()],
        1,
    )
    r = specops.verify_chain(target_probs, candidates[:, 1:], draft_probs[:, :k], uniforms=u,
                             block=bool(block_verification))  # fmt: skip
    path = torch.arange(k1, device=candidates.device).expand(bs, k1)  # a chain: node j = slot j
    _write_path(predicts, accept_index, accept_token_num, retrive_index, path, r.tokens,
                r.num_accepted)  # fmt: skip


def linked_tree_parents(retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor):
    """(parents [bs, N] long, reached [bs, N] bool): each node's parent in SGLang's linked-list
    tree (-1 for the root and for nodes no link reaches), by N hops of tensor operations."""
    bs, n = retrive_next_token.shape
    nxt, sib = retrive_next_token.long(), retrive_next_sibling.long()
    parents = torch.full((bs, n + 1), -1, dtype=torch.long, device=nxt.device)  # + a spare
    owner = torch.arange(n, device=nxt.device).expand(bs, n)
    cur = nxt.clone()  # for every node p: the child of p the hop is at
    for _ in range(n):
        ok = (cur >= 0) & (cur < n)
        parents.scatter_(1, torch.where(ok, cur, n), owner)  # misses land in the spare column
        cur = torch.where(ok, sib.gather(1, cur.clamp(0, n - 1)), -1)
    parents = parents[:, :n]
    reached = parents >= 0
    reached[:, 0] = True
    return parents, reached


def tree_speculative_sampling(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    *,
    without_replacement: bool = False,
) -> None:
    """What SGLang lacks: lossless verification of a tree whose drafts were sampled from a real
    draft distribution, using it (``specops.verify_tree``: recursive rejection sampling, with or
    without replacement), in the target-only function's signature and output layout.

    ``draft_probs`` [bs, N, V] row n = the distribution node n's children were drawn from
    (independently, or ``without_replacement``); ``target_probs`` row n = the target after node
    n.  Node n's test uses ``uniform_samples[b, n]``, the final token
    ``uniform_samples_for_final_sampling[b]``.  Siblings are tested in node-index order (SGLang's
    tree builder links them so); nodes deeper than S - 1 levels and nodes no link reaches are
    left out.  Outputs as ``tree_speculative_sampling_target_only`` writes them; ``draft_probs``
    is only read."""
    op = "specops.compat.sglang.tree_speculative_sampling"
    _check_tree(op, candidates, retrive_index, retrive_next_token, retrive_next_sibling, predicts,
                accept_index, (("uniform_samples", uniform_samples), ("target_probs", target_probs),
                               ("draft_probs", draft_probs)))  # fmt: skip
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    if bs == 0 or steps == 0:
        return
    parents, reached = linked_tree_parents(retrive_next_token, retrive_next_sibling)
    node = torch.arange(n, device=parents.device)
    # specops trees list parents before children: a node breaking that order is left out too
    keep = reached & ((parents < node) | (node == 0))
    par = torch.where(node == 0, -1, torch.where(keep, parents, 0))  # the root has none
    tree = specops.Tree.from_parents(par.int(), validate=False)
    keep &= tree.depth <= steps - 1
    tokens = torch.where(keep, candidates.long(), -1)
    tree._path_width = min(steps, n)  # known statically: no host read
    u = torch.cat([uniform_samples[:, 1:].float(),
                   uniform_samples_for_final_sampling.reshape(bs, 1).float()], 1)  # fmt: skip
    r = specops.verify_tree(target_probs, tree, tokens, draft_probs, uniforms=u,
                            without_replacement=without_replacement)  # fmt: skip
    _write_path(predicts, accept_index, accept_token_num, retrive_index, r.path, r.tokens,
                r.num_accepted)  # fmt: skip
