"""Reference verification ops: chain, tree and Jacobi speculative sampling, path acceptance.

Plain PyTorch, vectorised over the batch (Python loops only over draft positions / tree nodes),
on any device, no host synchronisation.  These functions are the ground truth the compiled
kernels are tested against, token for token: every random decision reads one uniform of the
shared Philox stream at a documented (row, draw) index (``specops/reference/philox.py``), and
every backend must use the same index for the same decision.

Acceptance test: accept ``x`` iff ``u * q(x) < p(x)`` (float32; ``q`` one-hot of ``x`` for
deterministic drafts); residual ``max(p - q, 0)``; draws by ``inverse_cdf`` with float64 sums.
NaN, negative and +inf probabilities count as 0 (``mass``); -1 draft ids are padding.

Shared conventions (NaN policy, residuals, inverse CDF, draft ids, randomness, LANTERN's and
GSD's relaxations): docs/reference_semantics.md, "Verification".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from specops.reference.block import block_accept
from specops.reference.grouped import Grouping, check_grouping, group_sums
from specops.reference.philox import row_uniforms
from specops.reference.results import ChainResult, JacobiResult, Relaxation, TreeResult, pool
from specops.reference.sampling import inverse_cdf, mass, rows_per_seed, successive_draws

if TYPE_CHECKING:
    from specops.tree import Tree

__all__ = [
    "Relaxation",
    "Grouping",
    "ChainResult",
    "TreeResult",
    "JacobiResult",
    "verify_chain",
    "verify_tree",
    "verify_jacobi",
    "path_acceptance",
]


# building blocks (module-level so that tests can swap in broken variants as negative controls) --
def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(p - q, 0), unnormalised (float32)."""
    return (p - q).clamp_min(0)


def _normalise(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """r / sum(r) per row as float32(float64(r) * (1 / s)); rows without mass -> fallback."""
    s = r.double().sum(-1, keepdim=True)
    return torch.where(s > 0, (r.double() * (1.0 / s.clamp_min(1e-300))).float(), fallback)


def _residual_or(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """What a resample draws from: max(p - q, 0) unnormalised, or p where it has no mass."""
    r = _residual(p, q)
    return torch.where(r.double().sum(-1, keepdim=True) > 0, r, p)


def _drop_and_renormalise(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Sampling without replacement: q with the rejected id x zeroed, renormalised (SJD-PAC
    Eq. 7).  Out-of-range x drops nothing; a row left without mass becomes all zeros."""
    v = q.shape[-1]
    hit = torch.arange(v, device=q.device)[None, :] == x[:, None]
    q = torch.where(hit, 0.0, q)
    return _normalise(q, torch.zeros_like(q))


def _one_hot(x: torch.Tensor, v: int) -> torch.Tensor:
    """float32 one-hot rows of x [R]; ids outside [0, v) give all-zero rows."""
    return (torch.arange(v, device=x.device)[None, :] == x[:, None]).float()


def _at(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """w[r, x_r] for w [R, V], x [R]; 0 where x is outside [0, V) (never indexes out of bounds)."""
    v = w.shape[-1]
    ok = (x >= 0) & (x < v)
    val = w.gather(-1, x.clamp(0, v - 1)[:, None])[:, 0]
    return torch.where(ok, val, torch.zeros((), dtype=w.dtype, device=w.device))


def _accept(u, p, q, x, relax) -> torch.Tensor:
    """u * q(x) < p(x) + pool(x) per row; q None = one-hot of x (q(x) = 1).  With a GSD
    ``Grouping``: u * Q < P over x's group (``specops.reference.grouped``)."""
    if isinstance(relax, Grouping):
        big_p, big_q = group_sums(p, q, x, relax)
        return u * big_q < big_p
    px = _at(p, x)
    qx = torch.ones_like(px) if q is None else _at(q, x)
    return u * qx < px + pool(p, x, relax)


def _draws(seed, offset, rows: int, draws: int, device, uniforms) -> torch.Tensor:
    """[rows, draws] uniforms: stream row b = request b (seed[b] when seed is [B])."""
    if uniforms is not None:
        return uniforms.to(device=device, dtype=torch.float32).reshape(rows, draws)
    return row_uniforms(
        seed, offset, rows, draws, rows_per_seed=rows_per_seed(seed, rows), device=device
    )


def _num_leaves(tree) -> int:
    """Most leaves of any row of a Tree (``Tree.num_leaves``)."""
    return tree.num_leaves


# chain --------------------------------------------------------------------------------------
def verify_chain(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    num_draft: torch.Tensor | None = None,
    seed=0,
    offset=0,
    relax: Relaxation | Grouping | None = None,
    greedy: bool = False,
    uniforms: torch.Tensor | None = None,
    block: bool = False,
) -> ChainResult:
    """Chain speculative sampling (Leviathan et al. / Chen et al.), lossless for any draft.

    ``target_probs`` [B, K+1, V]: row i = target dist p_i for draft i; row K = bonus dist.
    ``draft_tokens`` [B, K] (int32/int64), ``draft_probs`` [B, K, V] (row i = q_i, the dist draft
    i was drawn from) or None for deterministic drafts (q_i = one-hot of x_i).
    ``num_draft`` [B] int: request b has n_b = num_draft[b] drafts; a -1 draft id also ends the
    request's drafts (n_b = index of its first -1).  Drafts at or after n_b are ignored.

    Per request: a = the number of leading drafts i < n_b with ``u_i * q_i(x_i) < p_i(x_i)``
    (+ pool with ``relax``, or ``u * Q < P`` over a GSD ``Grouping``'s group: LOSSY).
    tokens = x_0, ..., x_{a-1}, then one token t:
    if a < n_b (draft a rejected) t ~ max(p_a - q_a, 0) (falls back to p_a when that has no
    mass), else (all n_b accepted) t ~ p_{n_b}, the bonus.  -1 after; num_accepted = a.

    ``greedy``: accept x_i iff x_i == argmax p_i (first maximal id), t = argmax p_a; bit-exact
    with greedy decoding of the target; no random draws.  Cannot be combined with ``relax``.

    ``block``: block verification (Sun et al. 2024; ``specops.reference.block``): the accepted
    prefix decided jointly, lossless, never fewer tokens on average.  Not with greedy or relax.

    Random draws, all on stream row b (request b): draw i (0 <= i < K) = u_i, the acceptance
    test of draft i; draw K = the uniform of t's inverse-CDF sample.  ``uniforms`` [B, K+1].
    """
    b, k1, v = target_probs.shape
    k = k1 - 1
    dev = target_probs.device
    if isinstance(relax, Grouping):
        check_grouping("verify_chain", relax, v)
    p = mass(target_probs)
    x = draft_tokens.to(dev).long()
    ids = torch.arange(k, device=dev)
    # n_b: drafts before num_draft[b] and before the first -1.
    valid = x != -1
    if num_draft is not None:
        valid &= ids[None, :] < num_draft.to(dev).long()[:, None]
    valid = valid.long().cumprod(-1).bool()
    n_eff = valid.sum(-1)
    rows = torch.arange(b, device=dev)

    if block and (greedy or relax is not None):
        raise ValueError("verify_chain: block=True cannot be combined with greedy or relax")
    if block:
        u = _draws(seed, offset, b, k + 1, dev, uniforms)
        q = mass(draft_probs.to(dev)) if draft_probs is not None else None
        q = q if q is not None else _one_hot(x.reshape(-1), v).reshape(b, k, v)
        a, dist = block_accept(p, q, x, n_eff, u)
        final = inverse_cdf(dist, u[:, k]).long()
        return _chain_result(x, a, final)
    if greedy:
        acc = x == p[:, :k].argmax(-1)
    else:
        u = _draws(seed, offset, b, k + 1, dev, uniforms)
        q = mass(draft_probs.to(dev)).reshape(b * k, v) if draft_probs is not None else None
        acc = _accept(u[:, :k].reshape(-1), p[:, :k].reshape(b * k, v), q, x.reshape(-1), relax)
        acc = acc.reshape(b, k)
    # a = length of the accepted prefix of the valid drafts.
    a = (valid & acc).long().cumprod(-1).sum(-1)
    pa = p[rows, a]  # [B, V]: target row after the accepted prefix
    if greedy:
        final = pa.argmax(-1)
    else:
        rejected = a < n_eff
        if k > 0:
            ac = a.clamp(max=k - 1)
            xa = x[rows, ac]
            if draft_probs is not None:
                qa = mass(draft_probs.to(dev)[rows, ac])
            else:
                qa = _one_hot(xa, v)
            # draft a rejected: t ~ norm(r), r = max(p_a - q_a, 0), drawn from r (p_a if no mass)
            dist = torch.where(rejected[:, None], _residual_or(pa, qa), pa)
        else:
            dist = pa
        final = inverse_cdf(dist, u[:, k]).long()
    return _chain_result(x, a, final)


def _chain_result(x, a, final) -> ChainResult:
    """tokens = x_0 .. x_{a-1}, final, -1 ...; num_accepted = a."""
    b, k = x.shape
    col = torch.arange(k + 1, device=x.device)[None, :]
    xpad = torch.cat([x, x.new_full((b, 1), -1)], 1)
    tokens = torch.where(col < a[:, None], xpad, -1)
    tokens = torch.where(col == a[:, None], final[:, None], tokens)
    return ChainResult(tokens.to(torch.int32), a.to(torch.int32))


# tree ---------------------------------------------------------------------------------------
class _Walk(NamedTuple):
    path: torch.Tensor  # [B, W] long
    tokens: torch.Tensor  # [B, W] long
    num_accepted: torch.Tensor  # [B] long
    end: torch.Tensor  # [B] long: last accepted node
    rejected: torch.Tensor  # [B] bool: a child of `end` was tested and rejected


def _tree_walk(p_all, q_all, tok, first_child, next_sibling, u, final_draw, *, wor, relax, greedy,
               width, resid_final=False) -> _Walk:  # fmt: skip
    """Recursive rejection sampling down a batch of trees (see verify_tree).

    p_all/q_all [B, N, V] float32 (q_all None = deterministic drafts), tok [B, N] long,
    first_child/next_sibling [B, N] long, u [B, >= N] float32 (node n's test = column n - 1,
    the final sample = column ``final_draw``).  ``resid_final``: a final token after a rejection
    is drawn from that rejection's unnormalised residual (p = its norm: the same law)."""
    b, n, v = p_all.shape
    dev = p_all.device
    rows = torch.arange(b, device=dev)
    col = torch.arange(width, device=dev)[None, :]
    cur = torch.zeros(b, dtype=torch.long, device=dev)  # last accepted node
    cand = first_child[:, 0].clone()  # next child of `cur` to test, -1 when none is left
    p = p_all[:, 0]  # current target: p_cur, or its residual after rejected siblings
    q = q_all[:, 0] if q_all is not None else None  # current draft dist (without replacement)
    a = torch.zeros(b, dtype=torch.long, device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    rej = torch.zeros(b, dtype=torch.bool, device=dev)
    r_last = p  # the last rejection's residual (p where it has no mass)
    path = torch.where(col == 0, 0, torch.full((b, width), -1, dtype=torch.long, device=dev))
    tokens = torch.full((b, width), -1, dtype=torch.long, device=dev)
    # Each iteration a live row either tests one child or emits its final token; at most N - 1
    # children are ever tested, so N iterations finish every row.
    for _ in range(n):
        live = ~done
        done = done | (live & (cand < 0))  # no child left: finished (p, cur, a are final)
        test = live & (cand >= 0)
        c = cand.clamp(min=0)
        x = tok[rows, c]
        real = test & (x != -1)  # -1 = padding node: skipped, no effect on p or q
        if greedy:
            acc = real & (x == p_all[rows, cur].argmax(-1))
        else:
            acc = real & _accept(u[rows, (c - 1).clamp(min=0)], p, q, x, relax)
            no = real & ~acc
            # rejected child x: p <- norm(max(p - q, 0)); without replacement the next sibling's
            # draft dist also drops x: q <- norm(q without x)  (SJD-PAC Eqs. 7-8).
            qx = q if q is not None else _one_hot(x, v)
            r_last = torch.where(no[:, None], _residual_or(p, qx), r_last)
            p = torch.where(no[:, None], _normalise(_residual(p, qx), p), p)
            if wor and q is not None:
                q = torch.where(no[:, None], _drop_and_renormalise(q, x), q)
            rej = torch.where(acc, False, rej | no)
        # accepted child c: descend, fresh target/draft rows of c.
        path = torch.where(acc[:, None] & (col == a[:, None] + 1), c[:, None], path)
        tokens = torch.where(acc[:, None] & (col == a[:, None]), x[:, None], tokens)
        a = a + acc.long()
        cur = torch.where(acc, c, cur)
        p = torch.where(acc[:, None], p_all[rows, c], p)
        if q is not None:
            q = torch.where(acc[:, None], q_all[rows, c], q)
        nxt = torch.where(acc, first_child[rows, c], next_sibling[rows, c])
        cand = torch.where(test, nxt, cand)
    # The final token t ~ p: the residual if a child of `cur` was rejected, else target row cur.
    if greedy:
        t = p_all[rows, cur].argmax(-1)
    else:
        dist = torch.where(rej[:, None], r_last, p) if resid_final else p
        t = inverse_cdf(dist, u[:, final_draw]).long()
    tokens = torch.where(col == a[:, None], t[:, None], tokens)
    return _Walk(path, tokens, a, cur, rej)


def _tree_arrays(tree, b: int, dev):
    fc = tree.first_child.to(dev).long().expand(b, -1)
    ns = tree.next_sibling.to(dev).long().expand(b, -1)
    return fc, ns


def verify_tree(
    target_probs: torch.Tensor,
    tree: Tree,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    without_replacement: bool = False,
    seed=0,
    offset=0,
    relax: Relaxation | Grouping | None = None,
    greedy: bool = False,
    uniforms: torch.Tensor | None = None,
    width: int | None = None,
) -> TreeResult:
    """Tree speculative sampling by recursive rejection sampling; lossless for any draft.

    ``tree``: a ``Tree`` of N nodes (batch 1 or B), node 0 = root = the last committed token.
    ``target_probs`` [B, N, V]: row n = target dist for the children of node n.
    ``draft_tokens`` [B, N]: token of node n (entry 0 ignored); -1 marks a padding node, which
    is skipped as if absent (its subtree is never reached).  ``draft_probs`` [B, N, V]: row n =
    the draft dist q the children of n were drawn from (i.i.d., or sequentially without
    replacement when ``without_replacement``); None = deterministic drafts (q = one-hot of the
    child's token: accept w.p. p(x), on reject p(x) is zeroed and p renormalised).

    Walk (per request): start at node 0 with p = target row 0, q = draft row 0.  Try the
    children of the current node in index order; child c with token x is accepted iff
    ``u_c * q(x) < p(x)`` (+ pool with ``relax``, or GSD's ``u * Q < P``: LOSSY).
    Accept -> append c to the path, move
    to c with p, q = rows c.  Reject -> p <- norm(max(p - q, 0)) (kept unchanged if that has no
    mass); with ``without_replacement`` also q <- norm(q with q(x) = 0) for the next sibling
    (all zeros if nothing is left); then try the next sibling.  When no child is left, emit one
    token t ~ p (the residual if a child was rejected, the bonus target row otherwise).
    Normalisation: sums in float64, the normalised row rounded to float32.

    ``greedy``: accept the first child whose token is argmax of the current node's target row;
    t = that argmax.  Bit-exact with greedy decoding; no random draws; no ``relax``.

    Returns path [B, D+1] (node ids root first, path[:, 0] = 0), tokens [B, D+1] (accepted
    tokens then t) and num_accepted [B]; -1 padded; D = max depth of the tree (``width`` = D+1
    may be given to skip reading it).

    Random draws, on stream row b: draw n - 1 = u_n, the acceptance test of node n (1 <= n < N;
    each node is tested at most once); draw N - 1 = the uniform of t's inverse-CDF sample.
    ``uniforms`` [B, N].  On ``Tree.chain(K + 1)`` this is exactly ``verify_chain`` (same draws,
    bit-identical results).
    """
    b, n, v = target_probs.shape
    dev = target_probs.device
    if isinstance(relax, Grouping):
        check_grouping("verify_tree", relax, v)
    if width is None:
        width = tree.path_width
    fc, ns = _tree_arrays(tree, b, dev)
    u = None if greedy else _draws(seed, offset, b, n, dev, uniforms)
    q = mass(draft_probs.to(dev)) if draft_probs is not None else None
    w = _tree_walk(
        mass(target_probs),
        q,
        draft_tokens.to(dev).long(),
        fc,
        ns,
        u,
        n - 1,
        wor=without_replacement,
        relax=relax,
        greedy=greedy,
        width=width,
    )
    return TreeResult(w.path.to(torch.int32), w.tokens.to(torch.int32), w.num_accepted.int())


# Jacobi -------------------------------------------------------------------------------------
def verify_jacobi(
    target_probs: torch.Tensor,
    window_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    *,
    tree: Tree | None = None,
    continue_after_reject: bool = True,
    num_candidates: int = 1,
    seed=0,
    offset=0,
    relax: Relaxation | Grouping | None = None,
    uniforms: torch.Tensor | None = None,
) -> JacobiResult:
    """One Speculative Jacobi Decoding step (SJD; SJD-PAC Algorithm 1 with ``tree``/continuation).

    Chain mode (``tree`` None).  ``target_probs`` [B, L, V]: row i = p_i, the target dist of
    window slot i (given the window's current tokens before it); ``window_tokens`` [B, L]: x_i;
    ``draft_probs`` [B, L, V]: q_i, the dist x_i was drawn from (None = one-hot of x_i).  A -1
    window token means "no draft": the slot is rejected and resampled from p_i.
      * Slot i passes iff ``u_i * q_i(x_i) < p_i(x_i)`` (+ pool with ``relax``, or GSD's
        ``u * Q < P``: LOSSY).
      * a = num_accepted = number of leading passing slots; first_reject = a, or -1 if a = L.
      * next_window[i] = x_i for i < a; slot a = a sample of max(p_a - q_a, 0) (of p_a when that
        has no mass).  With ``continue_after_reject`` (SJD-PAC adaptive continuation) every slot
        i > a is verified the same way against its stale p_i, q_i: kept if it passes, else
        resampled from max(p_i - q_i, 0); so every slot of next_window is a sample of its p_i.
        Without it (plain SJD) every slot i > a is sampled afresh from p_i.
      * Tokens committed this step: next_window[:, :a + 1] (a + 1 of them when a < L).

    Tree mode (``tree``, e.g. ``Tree.kary_chain(K, D, L)`` with N = L nodes).  Arguments follow
    ``verify_tree``: node 0 = the last committed token (window_tokens[:, 0] ignored), row n of
    target_probs/draft_probs = the dists of the children of node n, -1 tokens = padding nodes.
      * The accepted path is ``verify_tree(..., without_replacement=True)`` with the same draws:
        a = its num_accepted, m = its last node, path [B, L] its node ids root first; t = its final
        token (after a rejection drawn from the unnormalised residual: same law, equal but at
        rounding ties).  first_reject = a if a child of m was rejected, else -1 (t is a bonus).
      * Positions: next_window[d] holds the token at depth d + 1.  d < a: the accepted tokens;
        d = a: t.  Continuation runs down the first-child line below the rejected slot:
        l_{a+1} = first child of m, l_{d+1} = first child of l_d; for d > a while l_{d+1} exists
        (and is no padding node) its token is verified against p = target row l_d, q = draft
        row l_d (the first child is a plain draw from q): kept if ``u * q(x) < p(x)``, else
        resampled from max(p - q, 0) (``continue_after_reject``), or sampled afresh from p
        (without).  Other entries are -1.

    ``num_candidates`` k > 1: candidates [B, L, k] = k draws without replacement
    (``successive_draws``: draw j is an inverse-CDF draw from p with draws 0..j-1 removed, one
    uniform each; the distribution of Gumbel top-k) from the stale target dist of every
    position after the first rejection (chain: slot i > first_reject from p_i; tree: position
    d > a on the line, from target row l_d); -1 elsewhere, everywhere when first_reject = -1,
    and where p has fewer than k positive entries.  These are the K children proactive drafting
    puts in the next window's tree.  They are independent of next_window.

    Random draws, on stream row b:
      chain mode: draw i = the test of slot i; draw L + i = the uniform of slot i's resample
        (residual or fresh), 0 <= i < L.
      tree mode: draw n - 1 = the test of node n (in the walk or in continuation, 1 <= n < L);
        draw L - 1 = t; draw L + n - 1 = the resample replacing node n's token in continuation.
      candidates: draw 2L + d * k + j = the uniform of candidate j at slot / position d.
    ``uniforms`` [B, 2L], or [B, 2L + L * k] with num_candidates k > 1.
    """
    b, L, v = target_probs.shape
    dev = target_probs.device
    if isinstance(relax, Grouping):
        check_grouping("verify_jacobi", relax, v)
    p_all = mass(target_probs)
    x_all = window_tokens.to(dev).long()
    q_all = mass(draft_probs.to(dev)) if draft_probs is not None else None
    k = int(num_candidates)
    draws = 2 * L + (L * k if k > 1 else 0)
    u = _draws(seed, offset, b, draws, dev, uniforms)
    rows = torch.arange(b, device=dev)
    pos = torch.arange(L, device=dev)[None, :]

    if tree is None:
        pf = p_all.reshape(b * L, v)
        xf = x_all.reshape(-1)
        none = xf == -1  # no draft: q = 0, so the slot fails and is resampled from p
        qf = q_all.reshape(b * L, v) if q_all is not None else _one_hot(xf, v)
        qf = torch.where(none[:, None], 0.0, qf)
        ok = _accept(u[:, :L].reshape(-1), pf, qf, xf, relax) & ~none
        ok = ok.reshape(b, L)
        r = _residual_or(pf, qf)
        u_s = u[:, L : 2 * L].reshape(-1)
        resampled = inverse_cdf(r, u_s).long().reshape(b, L)
        a = ok.long().cumprod(-1).sum(-1)
        if continue_after_reject:
            nw = torch.where(ok, x_all, resampled)
        else:
            fresh = inverse_cdf(pf, u_s).long().reshape(b, L)
            nw = torch.where(pos < a[:, None], x_all, fresh)
            nw = torch.where(pos == a[:, None], resampled, nw)
        first_reject = torch.where(a < L, a, -1)
        cand_src = torch.where(
            (first_reject[:, None] >= 0) & (pos > first_reject[:, None]), pos.expand(b, L), -1
        )
        path = None
    else:
        fc, ns = _tree_arrays(tree, b, dev)
        w = _tree_walk(
            p_all,
            q_all,
            x_all,
            fc,
            ns,
            u,
            L - 1,
            wor=True,
            relax=relax,
            greedy=False,
            width=L,
            resid_final=True,
        )
        a = w.num_accepted
        first_reject = torch.where(w.rejected, a, -1)
        nw = w.tokens.clone()
        path = w.path.to(torch.int32)
        cand_src = torch.full((b, L), -1, dtype=torch.long, device=dev)
        # Continuation line: prev = l_d (exists), d = current position; starts at d = a + 1.
        prev = fc[rows, w.end]
        d = a + 1
        alive = w.rejected & (prev >= 0) & (d < L)
        for _ in range(L):
            cand_src = torch.where(alive[:, None] & (pos == d[:, None]), prev[:, None], cand_src)
            pc = prev.clamp(min=0)
            node = fc[rows, pc]  # l_{d+1}: its token is the draft for position d
            nc = node.clamp(min=0)
            x = x_all[rows, nc]
            go = alive & (node >= 0) & (x != -1)
            p = p_all[rows, pc]
            q = q_all[rows, pc] if q_all is not None else None
            keep = _accept(u[rows, (nc - 1).clamp(min=0)], p, q, x, relax)
            u_s = u[rows, L + (nc - 1).clamp(min=0)]
            if continue_after_reject:
                r = _residual_or(p, q if q is not None else _one_hot(x, v))
                t = torch.where(keep, x, inverse_cdf(r, u_s).long())
            else:
                t = inverse_cdf(p, u_s).long()
            nw = torch.where(go[:, None] & (pos == d[:, None]), t[:, None], nw)
            prev = torch.where(go, node, prev)
            d = d + go.long()
            alive = go & (d < L)

    if k > 1:
        src = cand_src.clamp(min=0)
        pc = p_all[rows[:, None], src]  # [B, L, V]: stale target dist of each position
        uc = u[:, 2 * L :].reshape(b * L, k)
        cands = successive_draws(pc.reshape(b * L, v), uc).reshape(b, L, k)
        cands = torch.where(cand_src[:, :, None] >= 0, cands, -1).to(torch.int32)
    else:
        cands = None
    return JacobiResult(a.int(), nw.to(torch.int32), first_reject.int(), cands, path)


# path acceptance ------------------------------------------------------------------------------
def path_acceptance(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    tree: Tree,
    draft_tokens: torch.Tensor,
    *,
    num_paths: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """VSD path-level acceptance (VSD Eqs. 2, 9-11) of every root-to-leaf path of a tree.

    Node convention as in ``verify_tree``: node n (n >= 1) carries token x_n drafted from
    q = draft row parent(n) and is verified against p = target row parent(n); its acceptance
    probability is alpha_n = min(1, p(x_n) / q(x_n)) (1 if q(x_n) = 0 < p(x_n); 0 if p(x_n) = 0,
    for -1 padding and out-of-range ids).  draft_probs None: q = one-hot, alpha_n = min(1, p(x_n)).
    Along a path root = n_0, n_1, ..., n_l: S_k = prod_{i <= k} alpha_{n_i} (Eq. 9),
    kappa = S_l (Eq. 2), expected_len = sum_{k=1}^{l} S_k (Eq. 10).

    Returns (kappa, expected_len), float32 [B, P]: paths ordered like ``Tree.paths()`` (leaves in
    index order), P = the most leaves of any row (``num_paths`` may be given to skip reading it);
    rows with fewer leaves are padded with 0.  No random draws.  A parent entry outside
    [0, n) (never in a valid Tree) counts as the root, as in the kernels."""
    b, n, v = target_probs.shape
    dev = target_probs.device
    par = tree.parents.to(dev).long().expand(b, -1)
    if num_paths is None:
        num_paths = tree.num_leaves
    return _path_acceptance(target_probs, draft_probs, par, draft_tokens, num_paths)


def _path_acceptance(target_probs, draft_probs, parents, draft_tokens, num_paths: int):
    b, n, v = target_probs.shape
    dev = target_probs.device
    rows = torch.arange(b, device=dev)
    p_all = mass(target_probs)
    x = draft_tokens.to(dev).long()
    ids = torch.arange(n, device=dev)
    par = parents.to(dev).long().expand(b, n)
    par = torch.where((par >= 0) & (par < ids), par, 0)  # effective parent; the root's is unused
    par[:, 0] = -1
    s = torch.ones(b, n, dtype=torch.float64, device=dev)  # S of the path root..n
    e = torch.zeros(b, n, dtype=torch.float64, device=dev)  # sum_k S_k along root..n
    for m in range(1, n):
        pm = par[:, m]
        px = _at(p_all[rows, pm], x[:, m]).double()
        if draft_probs is None:
            alpha = px.clamp(max=1.0)
        else:
            qx = _at(mass(draft_probs.to(dev)[rows, pm]), x[:, m]).double()
            alpha = torch.where(
                qx > 0, (px / qx.clamp_min(1e-300)).clamp(max=1.0), (px > 0).double()
            )
        s[:, m] = s[rows, pm] * alpha
        e[:, m] = e[rows, pm] + s[:, m]
    is_leaf = ~(par[:, :, None] == ids[None, None, :]).any(1)  # no node has n as parent
    rank = is_leaf.long().cumsum(-1) - 1
    # non-leaves (and leaves past the num_paths columns) go to a dropped column
    slot = torch.where(is_leaf & (rank < num_paths), rank, num_paths)
    kappa = torch.zeros(b, num_paths + 1, dtype=torch.float64, device=dev)
    exp_len = torch.zeros(b, num_paths + 1, dtype=torch.float64, device=dev)
    kappa.scatter_(1, slot, torch.where(is_leaf, s, 0.0))
    exp_len.scatter_(1, slot, torch.where(is_leaf, e, 0.0))
    return kappa[:, :num_paths].float(), exp_len[:, :num_paths].float()
