"""SGLang's EAGLE tree verification (the sgl_kernel / SGLang 0.5.23 JIT kernels' contracts), on
device tensors, in place, without a host sync: ``verify_tree_greedy``,
``tree_speculative_sampling_target_only`` (one coin per level against the running target mass),
``tree_speculative_sampling`` (lossless, with the draft distribution) and
``chain_speculative_sampling_triton``.

Trees are SGLang's linked lists (``retrive_next_token`` / ``retrive_next_sibling``, flat slots
``retrive_index``).  Every argument is checked against SGLang's contract, named in SGLang's
words, without a sync; validation mode also checks the values.  In fast mode no access leaves
its tensor and every walk is bounded, whatever the values.  The exact rules (what is written,
the final draw, the checks, the fast-mode policy): docs/sglang.md.  Nothing here imports
SGLang; ``specops.sglang.install()`` puts these in SGLang's place."""

from typing import NamedTuple

import torch

import specops
from specops.ops import checks as c

__all__ = [
    "chain_speculative_sampling_triton",
    "linked_tree_parents",
    "tree_speculative_sampling",
    "tree_speculative_sampling_target_only",
    "verify_tree_greedy",
]


_OP = "compat.sglang_verify."  # error messages: "specops.compat.sglang_verify.<function>: ..."
INF = float("inf")


class _Tree(NamedTuple):
    """The outputs and the tree of one call, the first seven parameters of every entry point
    (sgl_kernel's order): what the checks, the walk and the writes read, by name."""

    predicts: torch.Tensor
    accept_index: torch.Tensor
    accept_token_num: torch.Tensor
    candidates: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor


def _check_outputs(op, a, bs, min_cols, dev):
    """The three outputs every function writes: dtypes, shapes, device, writability."""
    predicts, accept_index, accept_token_num = a.predicts, a.accept_index, a.accept_token_num
    c.check_ids(op, "predicts", predicts, device=dev)
    if not predicts.is_contiguous():
        raise ValueError(
            f"specops.{op}: predicts must be contiguous (its flat slots are written), got shape "
            f"{list(predicts.shape)} with strides {predicts.stride()}"
        )
    c.check_ids(op, "accept_index", accept_index, ndim=2, device=dev)
    _check_rows(op, "accept_index", accept_index, bs, min_cols, " (one row per request)")
    c.check_ids(op, "accept_token_num", accept_token_num, device=dev, shape=(bs,))
    for name, t in (("predicts", predicts), ("accept_index", accept_index),
                    ("accept_token_num", accept_token_num)):  # fmt: skip
        c.check_writable(op, name, t)


def _check_rows(op, name, t, bs, min_cols, why=""):
    """A 2-D ``t`` holds [bs, >= min_cols]: one row per request, at least that many columns."""
    if t.shape[0] != bs or t.shape[1] < min_cols:
        raise ValueError(
            f"specops.{op}: {name} must be [{bs}, >= {min_cols}]{why}, got {list(t.shape)}"
        )


def _check_candidates(op, candidates):
    c.check_ids(op, "candidates", candidates, ndim=2)
    if candidates.shape[1] == 0:
        raise ValueError(
            f"specops.{op}: candidates must be [bs, num_draft_tokens >= 1] (column 0 the root), "
            f"got {list(candidates.shape)}"
        )
    return candidates.shape


def _check_final(op, u, bs, dev):
    c.check_probs(op, "uniform_samples_for_final_sampling", u, device=dev)
    if u.numel() != bs:
        raise ValueError(
            f"specops.{op}: uniform_samples_for_final_sampling must hold one coin per request "
            f"[{bs}], got {list(u.shape)}"
        )


def _check_slots(op, retrive_index, limit, what="predicts"):
    """Validation mode: every slot inside [0, limit), none twice within a request."""
    if not c.validating() or retrive_index.numel() == 0:
        return
    bad = (retrive_index < 0) | (retrive_index >= limit)
    if bool(bad.any()):
        b, i = (int(j) for j in bad.nonzero()[0])
        raise ValueError(
            f"specops.{op}: retrive_index[{b}, {i}] = {int(retrive_index[b, i])} is a slot "
            f"outside {what} [0, {limit})"
        )
    srt = retrive_index.sort(-1).values
    if retrive_index.shape[1] > 1 and bool((srt[:, 1:] == srt[:, :-1]).any()):
        raise ValueError(f"specops.{op}: retrive_index repeats a slot within a request")


def _check_vocab(op, candidates, vocab):
    """Validation mode: the drafts (every column but the root's, which no kernel reads) are ids
    in [0, vocab)."""
    if not c.validating() or candidates.shape[1] < 2 or candidates.shape[0] == 0:
        return
    x = candidates[:, 1:]
    bad = (x < 0) | (x >= vocab)
    if bool(bad.any()):
        b, i = (int(j) for j in bad.nonzero()[0])
        raise ValueError(
            f"specops.{op}: candidates[{b}, {i + 1}] = {int(x[b, i])} is outside the vocabulary "
            f"[0, {vocab})"
        )


def _check_tree(op, a, extra=(), read_through=None):
    """The outputs and the tree of the call ``a``: shapes, dtypes and devices always; the lists'
    values in validation mode (host reads).  ``extra``: (name, tensor, check) triples whose
    first two dims are [bs, N]; ``read_through``: a tensor also indexed by slot (greedy's
    ``target_predict``)."""
    predicts, retrive_index, candidates = a.predicts, a.retrive_index, a.candidates
    nxt, sib = a.retrive_next_token, a.retrive_next_sibling
    bs, n = _check_candidates(op, candidates)
    dev = candidates.device
    for name, t in (("retrive_index", retrive_index), ("retrive_next_token", nxt),
                    ("retrive_next_sibling", sib)):  # fmt: skip
        c.check_ids(op, name, t, device=dev, shape=(bs, n))
    _check_outputs(op, a, bs, 1, dev)
    for name, t, check in extra:
        check(op, name, t, device=dev)
        if tuple(t.shape[:2]) != (bs, n) or t.dim() < 2:
            raise ValueError(
                f"specops.{op}: {name} must be [{bs}, {n}, ...] like candidates, got "
                f"{list(t.shape)}"
            )
    if not c.validating() or bs == 0:
        return
    for name, t in (("retrive_next_token", nxt), ("retrive_next_sibling", sib)):
        if bool(((t < -1) | (t >= n)).any()):
            raise ValueError(f"specops.{op}: {name} holds an index outside [-1, {n})")
    if read_through is None:
        _check_slots(op, retrive_index, predicts.numel())
    else:
        _check_slots(op, retrive_index, min(predicts.numel(), read_through.numel()),
                     "predicts and target_predict")  # fmt: skip
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
                        f"specops.{op}: request {b}: node {link} is reached twice through "
                        f"{name} (a cycle, or a node with two parents)"
                    )
                seen.add(link)
                stack.append(link)


def _check_sampled_tree(op, a, uniform_samples, final, target_probs, draft_probs):
    """``_check_tree`` with the coins and the probability rows of the sampling verifiers (the
    target-only one and ``tree_speculative_sampling``): ``uniform_samples`` [bs, N], ``final``
    one coin per request, ``target_probs`` and ``draft_probs`` [bs, N, vocab >= 1] alike."""
    _check_tree(op, a, (("uniform_samples", uniform_samples, c.check_probs),
                        ("target_probs", target_probs, c.check_probs),
                        ("draft_probs", draft_probs, c.check_probs)))  # fmt: skip
    _check_final(op, final, a.candidates.shape[0], a.candidates.device)
    for name, t in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        if t.dim() != 3 or t.shape != target_probs.shape or t.shape[2] == 0:
            raise ValueError(
                f"specops.{op}: {name} must be [bs, num_draft_tokens, vocab >= 1] like "
                f"target_probs, got {list(t.shape)} (target_probs {list(target_probs.shape)})"
            )


def _ids_2d(op, name, t, device):
    c.check_ids(op, name, t, device=device, ndim=2)


def _put(flat: torch.Tensor, at: torch.Tensor, value: torch.Tensor, keep: torch.Tensor) -> None:
    """flat[at] = value where ``keep`` and ``at`` lies inside ``flat``; the other writes are
    dropped (never clamped onto another slot).  No host sync, and the result does not depend on
    the order the writes run in: min, then max (kept: min(old, v) then max(., v) = v; dropped:
    the dtype's extremes, neutral).  A slot written twice gets the larger value."""
    size = flat.numel()
    if size == 0 or at.numel() == 0:
        return
    keep = keep & (at.clamp(0, size - 1) == at)
    at = torch.where(keep, at.long(), 0)
    v = value.to(flat.dtype)
    info = torch.iinfo(flat.dtype)
    flat.scatter_reduce_(0, at, torch.where(keep, v, info.max), "amin")
    flat.scatter_reduce_(0, at, torch.where(keep, v, info.min), "amax")


def _write_path(a, at, tokens, num):
    """The call ``a``'s outputs from a specops result: ``at`` [bs, W] the slots
    (``retrive_index`` values, as given) of the path's nodes root first, ``tokens`` [bs, W] the
    token after each path node, ``num`` [bs] accepted drafts.  accept_index[b, j] = at[b, j]
    and predicts[at[b, j]] = tokens[b, j] for j <= num[b], writes through slots outside
    ``predicts`` dropped; everything else left as given."""
    w = at.shape[1]
    n = num.long()
    on_path = torch.arange(w, device=n.device) <= n[:, None]
    cols = a.accept_index[:, :w]
    cols.copy_(torch.where(on_path, at, cols))
    _put(a.predicts.view(-1), at.reshape(-1), tokens.reshape(-1), on_path.reshape(-1))
    a.accept_token_num.copy_(n)


class _Walk:
    """The state of the per-request walk, as tensors [bs].  The ``predicts`` writes are
    collected and made once at the end (``finish``)."""

    def __init__(self, a):
        """The walk of the call ``a`` (its tree and outputs)."""
        self.bs, self.n = a.candidates.shape
        dev = a.candidates.device
        self.rows = torch.arange(self.bs, device=dev)
        self.cand = a.candidates.long()
        self.slot = a.retrive_index.long()  # as given: accept_index records it, _put bounds it
        self.nxt, self.sib = a.retrive_next_token.long(), a.retrive_next_sibling.long()
        self.flat = a.predicts.view(-1)
        self.accept_index = accept_index = a.accept_index
        self.last = torch.zeros(self.bs, dtype=torch.long, device=dev)  # tree-local node
        self.alive = torch.ones(self.bs, dtype=torch.bool, device=dev)
        self.num = torch.zeros(self.bs, dtype=torch.long, device=dev)
        self.writes: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        accept_index[:, 0] = self.slot[:, 0].to(accept_index.dtype)

    def node(self, i: torch.Tensor) -> torch.Tensor:
        return i.clamp(0, self.n - 1)

    def accept(self, step: int, hit: torch.Tensor):
        """Rows with hit >= 0 accept tree-local node ``hit`` at ``step``."""
        found = hit >= 0
        h = self.node(hit)
        self.writes.append((self.slot[self.rows, self.last], self.cand[self.rows, h], found))
        col = self.accept_index[:, step]
        self.accept_index[:, step] = torch.where(found, self.slot[self.rows, h], col.long()).to(
            col.dtype
        )
        self.last = torch.where(found, h, self.last)
        self.num += found.long()
        self.alive &= found

    def finish(self, token: torch.Tensor, keep: torch.Tensor, accept_token_num: torch.Tensor):
        """The last node's token, then every collected write, then the counts."""
        self.writes.append((self.slot[self.rows, self.last], token, keep))
        at, value, kept = (torch.cat(t) for t in zip(*self.writes))
        _put(self.flat, at, value, kept)
        accept_token_num.copy_(self.num.to(accept_token_num.dtype))


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
    a = _Tree(predicts, accept_index, accept_token_num, candidates, retrive_index,
              retrive_next_token, retrive_next_sibling)  # fmt: skip
    op = _OP + "verify_tree_greedy"
    _check_tree(op, a, (("target_predict", target_predict, _ids_2d),), target_predict)
    w = _Walk(a)
    if w.bs == 0:
        return
    tp = target_predict.reshape(-1)
    # the target's token after each node, read through its slot (none where the slot is outside
    # target_predict: no child matches there and nothing is written)
    readable = (w.slot >= 0) & (w.slot < tp.numel())
    after = tp[torch.where(readable, w.slot, 0)].long()
    for step in range(1, a.accept_index.shape[1]):
        want = after[w.rows, w.last]
        live = w.alive & readable[w.rows, w.last]
        cur = w.nxt[w.rows, w.last]
        hit = torch.full_like(cur, -1)
        for _ in range(w.n):  # the current node's sibling list, N hops at most
            valid = live & (hit < 0) & (cur >= 0) & (cur < w.n)
            match = valid & (w.cand[w.rows, w.node(cur)] == want)
            hit = torch.where(match, cur, hit)
            cur = torch.where(valid & ~match, w.sib[w.rows, w.node(cur)], -1)
        w.accept(step, hit)
    w.finish(after[w.rows, w.last], readable[w.rows, w.last], a.accept_token_num)


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
    a = _Tree(predicts, accept_index, accept_token_num, candidates, retrive_index,
              retrive_next_token, retrive_next_sibling)  # fmt: skip
    op = _OP + "tree_speculative_sampling_target_only"
    if not (0.0 <= float(threshold_single) <= 1.0 and 0.0 <= float(threshold_acc) <= 1.0):
        raise ValueError(
            f"specops.{op}: threshold_single and threshold_acc must be in [0, 1], got "
            f"{threshold_single} and {threshold_acc}"
        )
    _check_sampled_tree(op, a, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                        draft_probs)  # fmt: skip
    c.check_writable(op, "draft_probs", draft_probs)
    vocab = target_probs.shape[2]
    _check_vocab(op, a.candidates, vocab)
    w = _Walk(a)
    if w.bs == 0:
        return
    dev = target_probs.device
    # (torch.full: no host-to-device copy; the kernel clamps threshold_acc to 1e-9 as here)
    ts = torch.full((), float(threshold_single), dtype=torch.float32, device=dev)
    ta = torch.full((), max(float(threshold_acc), 1e-9), dtype=torch.float32, device=dev)
    coins = uniform_samples.float()
    rows = w.rows
    # an id outside the vocabulary has no target probability (never accepted, never copied into
    # draft_probs); only in-vocabulary ids are used as an index
    in_vocab_all = (w.cand >= 0) & (w.cand < vocab)
    tok_all = torch.where(in_vocab_all, w.cand, 0)
    for step in range(1, a.accept_index.shape[1]):
        coin = coins[rows, w.last]
        acc = torch.zeros(w.bs, dtype=torch.float32, device=dev)
        cur = w.nxt[rows, w.last]
        hit = torch.full_like(cur, -1)
        for _ in range(w.n):  # siblings in list order, N hops at most
            valid = w.alive & (hit < 0) & (cur >= 0) & (cur < w.n)
            node = w.node(cur)
            tok, in_vocab = tok_all[rows, node], in_vocab_all[rows, node]
            p = torch.where(in_vocab, target_probs[rows, w.last, tok].float(), 0.0)
            acc = torch.where(valid, acc + p, acc)
            take = valid & (p > 0) & ((coin < acc / ta) | (p >= ts))
            # a rejected sibling's mass leaves the final draw: draft_probs[b, last, tok] = p(tok)
            rejected = valid & ~take
            old = draft_probs[rows, w.last, tok]
            draft_probs.index_put_(
                (rows, w.last, tok), torch.where(rejected & in_vocab, p.to(old.dtype), old)
            )
            hit = torch.where(take, cur, hit)
            cur = torch.where(rejected, w.sib[rows, node], -1)
        w.accept(step, hit)
    full = w.num == a.accept_index.shape[1] - 1  # full depth: no draft row for the bonus token
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
    w.finish(token, torch.ones_like(w.alive), a.accept_token_num)


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
    ``retrive_index`` [bs, K+1], ``target_probs`` [bs, K+1, V], ``draft_probs`` [bs, >= K, V]
    (rows 0..K-1 read), ``uniform_samples`` [bs, >= K] (column i-1 tests draft i),
    ``uniform_samples_for_final_sampling`` [bs], ``accept_index`` [bs, >= K+1],
    ``accept_token_num`` [bs].  Token-wise: accept x_i while q(x_i) is in (0, 1] and
    u * q(x_i) < p(x_i), the correction drawn from max(p - q, 0).  ``block_verification``:
    Sun et al.'s block verification (``verify_chain(block=True)``); a draft whose q(x_i) is not
    in (0, 1] zeroes the prefix weight from position i on, as in SGLang.

    A draft whose draft probability is not in (0, 1] (0, negative, NaN, +-inf, above 1: no
    sampler proposes it) is rejected, as SGLang's kernel rejects it, where specops's own test
    would accept it (min(1, p/q) = 1 at q = 0): it and every later draft get a coin of +inf,
    which fails the test u * q < p (inf, or NaN where q = 0) and block verification's u < h on
    every backend.  A draft id outside [0, V) counts as one without probability (rejected;
    SGLang reads out of bounds there); validation mode raises naming ``candidates`` instead.

    Written as SGLang writes them: ``accept_token_num[b]`` = tau, ``accept_index[b, j]`` =
    ``retrive_index[b, j]`` (as given) for j <= tau, ``predicts`` at ``retrive_index[b, j - 1]``
    = x_j and at ``retrive_index[b, tau]`` the final token; the rest left as given.  A slot
    outside ``predicts``: validation mode raises naming ``retrive_index``, fast mode drops the
    write.  The thresholds, ``deterministic`` and the sibling lists are ignored, as in SGLang.
    Same law as SGLang's kernel and the same decisions on the same coins; the final token can
    differ where u * sum lies within rounding of a cumulative-sum boundary, where the residual
    has no mass (SGLang emits V - 1, specops draws from the target row), and where the rows
    hold entries that are not probabilities: specops reads NaN, negative and +-inf entries as 0
    and subtracts draft entries above 1, SGLang's final draw counts draft entries outside
    [0, 1] as 0 (and its block-verification sums read them raw)."""
    a = _Tree(predicts, accept_index, accept_token_num, candidates, retrive_index,
              retrive_next_token, retrive_next_sibling)  # fmt: skip
    op = _OP + "chain_speculative_sampling_triton"
    bs, k1 = _check_candidates(op, a.candidates)
    k = k1 - 1
    dev = a.candidates.device
    c.check_ids(op, "retrive_index", a.retrive_index, device=dev, shape=(bs, k1))
    _check_outputs(op, a, bs, k1, dev)
    c.check_probs(op, "target_probs", target_probs, ndim=3, device=dev)
    v = target_probs.shape[2]
    if tuple(target_probs.shape[:2]) != (bs, k1) or v == 0:
        raise ValueError(
            f"specops.{op}: target_probs must be [{bs}, {k1}, V >= 1] (one row per slot of "
            f"candidates), got {list(target_probs.shape)}"
        )
    c.check_probs(op, "draft_probs", draft_probs, ndim=3, device=dev)
    if draft_probs.shape[0] != bs or draft_probs.shape[1] < k or draft_probs.shape[2] != v:
        raise ValueError(
            f"specops.{op}: draft_probs must be [{bs}, >= {k}, {v}] (the vocabulary of "
            f"target_probs), got {list(draft_probs.shape)}"
        )
    c.check_probs(op, "uniform_samples", uniform_samples, ndim=2, device=dev)
    _check_rows(op, "uniform_samples", uniform_samples, bs, k)
    _check_final(op, uniform_samples_for_final_sampling, bs, dev)
    _check_vocab(op, a.candidates, v)
    _check_slots(op, a.retrive_index, a.predicts.numel())
    if bs == 0:
        return
    # drafts without draft probability (SGLang: q not in (0, 1]) fail, and so does every later
    # one: a coin of +inf from there on (see the docstring); ids outside [0, V) are among them
    x = a.candidates[:, 1:].long()
    xc = x.clamp(0, v - 1)
    qx = draft_probs[:, :k].gather(2, xc[:, :, None])[:, :, 0]
    ok = (xc == x) & (qx > 0) & (qx <= 1)
    coins = uniform_samples[:, :k].float().masked_fill(ok.logical_not_().cumsum(1) > 0, INF)
    u = torch.cat([coins, uniform_samples_for_final_sampling.reshape(bs, 1).float()], 1)
    r = specops.verify_chain(target_probs, xc, draft_probs[:, :k], uniforms=u,
                             block=bool(block_verification))  # fmt: skip
    # a chain: node j has slot retrive_index[b, j]
    _write_path(a, a.retrive_index, r.tokens, r.num_accepted)


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
    a = _Tree(predicts, accept_index, accept_token_num, candidates, retrive_index,
              retrive_next_token, retrive_next_sibling)  # fmt: skip
    op = _OP + "tree_speculative_sampling"
    _check_sampled_tree(op, a, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                        draft_probs)  # fmt: skip
    vocab = target_probs.shape[2]
    _check_vocab(op, a.candidates, vocab)
    bs, n = a.candidates.shape
    steps = a.accept_index.shape[1]
    if bs == 0 or steps == 0:
        return
    parents, reached = linked_tree_parents(a.retrive_next_token, a.retrive_next_sibling)
    node = torch.arange(n, device=parents.device)
    # specops trees list parents before children: a node breaking that order is left out too
    keep = reached & ((parents < node) | (node == 0))
    par = torch.where(node == 0, -1, torch.where(keep, parents, 0))  # the root has none
    tree = specops.Tree.from_parents(par.int(), validate=False)
    keep &= tree.depth <= steps - 1
    # an id outside the vocabulary (fast mode) is a draft of target probability 0: id vocab,
    # which verify_tree rejects (-1 would remove the node)
    cand = a.candidates.long()
    tokens = torch.where(keep, torch.where((cand >= 0) & (cand < vocab), cand, vocab), -1)
    tree = tree.with_path_width(min(steps, n))  # known statically: no host read
    u = torch.cat([uniform_samples[:, 1:].float(),
                   uniform_samples_for_final_sampling.reshape(bs, 1).float()], 1)  # fmt: skip
    r = specops.verify_tree(target_probs, tree, tokens, draft_probs, uniforms=u,
                            without_replacement=without_replacement)  # fmt: skip
    at = a.retrive_index.gather(1, r.path.long().clamp(0, n - 1))  # the path nodes' slots
    _write_path(a, at, r.tokens, r.num_accepted)
