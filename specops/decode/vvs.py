"""VVS: speculative decoding with partial verification skipping (VVS Algorithms 1-2, Eqs. 1-2).

EAGLE-2 tree speculative decoding (``speculative(tree="dynamic")``) where some steps skip the
target pass.  LOSSY by design: skipped tokens are never verified.  A request never skips twice
in a row; otherwise it skips when the candidate paths' similarity reaches ``threshold``
(``schedule="similarity"``) or every ``interval``-th step (``schedule="interval"``).
Verification uses LANTERN relaxed acceptance when ``relax`` is given.

Batches: the skip decision is per request, but a target pass is one batched call: a request
that skips rides along in a pass another request needs (its rows computed and discarded).
``Stats.step_compression`` charges a request only the passes it verified in;
``Stats.batch_step_compression`` counts the batched passes that actually ran.
The skip decision, skipped and verified steps, the combined pass's layout: docs/decoding.md, "VVS".
"""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode._checks import check_hide, check_int, prepare
from specops.decode._loop import compiled_step, emit_first, start
from specops.decode._runners import DraftRunner
from specops.decode.sampling import Sampling
from specops.decode.speculative import draft_dynamic, tree_sizes
from specops.reference.verify import Relaxation
from specops.tree import Tree, pack_bits

__all__ = ["vvs", "lantern", "latent_neighbors", "tree_path_similarity"]


def latent_neighbors(codebook: torch.Tensor, k: int) -> torch.Tensor:
    """The k nearest codebook entries of every token in latent space (Euclidean distance between
    the VQ latent vectors, the token itself excluded), nearest first: [V, k] int64 -- LANTERN's
    latent neighbourhood of a visual token."""
    cb = codebook.float()
    d = torch.cdist(cb, cb)
    d.fill_diagonal_(float("inf"))
    return d.topk(min(k, cb.shape[0] - 1), -1, largest=False).indices


def lantern(codebook: torch.Tensor, k: int = 16, delta: float = 0.2) -> Relaxation:
    """LANTERN relaxed acceptance over the ``k`` latent neighbours of each token, pooling at most
    ``delta`` target mass (VVS's experiments: delta 0.1 / 0.2).  LOSSY; delta 0 = exact."""
    return Relaxation(latent_neighbors(codebook, k), float(delta))


def tree_path_similarity(tree, tokens, codebook, depth: int, *, alpha=0.9, stride: int = 1):
    """VVS Eq. 2 over all root-to-leaf paths of a draft tree (tokens [B, N], entry 0 = the root,
    which no path counts; ``depth`` = the tree's max depth): with e_{i,l} the unit latent
    vector of the token at depth l + 1 of leaf path i, and P_l the paths that reach depth l + 1,

        S_l = 1 / (|P_l| (|P_l| - 1)) * sum_{i != j in P_l} <e_i,l, e_j,l>
        S   = sum_l alpha^l S_l / sum_l alpha^l      over l = 0, stride, ... with |P_l| >= 2

    (S = 1 when no position has two paths: a single path agrees with itself).  All paths at one
    depth: equals ``specops.path_similarity`` of the paths.  On the device, no host read:
    [B, N, D, N] ancestor selection (trees of a few dozen nodes).  -> [B] float32."""
    dev = tokens.device
    dep = tree.depth.long()
    lv = torch.arange(1, depth + 1, device=dev)[::stride]  # depths of the positions used
    anc = tree.ancestors  # [B, N, N]: row n = n and its ancestors
    sel = anc[:, :, None, :] & (dep[:, None, None, :] == lv[None, None, :, None])  # [B,N,L',N]
    tok = (sel.long() * (tokens.long() + 1)[:, None, None, :]).sum(-1) - 1  # [B, N, L']
    v = codebook.shape[0]
    ok = tree.is_leaf[:, :, None] & (tok >= 0) & (tok < v)
    unit = torch.nn.functional.normalize(codebook.float(), dim=-1)
    e = unit[tok.clamp(0, v - 1)] * ok[..., None]  # [B, N, L', C]
    pair = e.sum(1).pow(2).sum(-1) - e.pow(2).sum((1, 3))  # [B, L']
    cnt = ok.sum(1).float()
    has = cnt >= 2
    s_l = torch.where(has, pair / (cnt * (cnt - 1)).clamp(min=1), 0.0)
    w = alpha ** (lv - 1).float() * has
    den = w.sum(-1)
    return torch.where(den > 0, (s_l * w).sum(-1) / den.clamp(min=1e-30), 1.0).float()


def _tree_tensors(tree) -> tuple:
    """A Tree's tensors, to carry it between two compiled halves of a step (a graph returns
    tensors, not objects)."""
    return tree._tensors()


def _tree_from(tensors, width: int) -> Tree:
    """The Tree of ``_tree_tensors``, its path width known statically (no validation, no host
    read)."""
    return Tree._of(tensors, width)


def _combined_mask(tree, gamma, g: int):
    """Ancestor mask [B, G + N, G + N] of chain (right-aligned, gamma[b] + 1 real slots ending at
    slot G) + tree (node m at slot G + m, its root = slot G)."""
    b, n = tree.depth.shape
    dev = gamma.device
    tot = g + n
    j = torch.arange(tot, device=dev)
    lo = (g - gamma)[:, None, None]  # first real chain slot
    row, col = j[None, :, None], j[None, None, :]
    chain_row = row <= g
    # chain rows: real ones see real chain slots up to themselves; dummies only themselves
    real_row = row >= lo
    chain_vis = (col >= lo) & (col <= row) & real_row
    dummy_vis = (col == row) & ~real_row
    # tree rows: the whole real chain, plus tree ancestors (offset by G; the root is slot G)
    anc = torch.zeros(b, n, tot, dtype=torch.bool, device=dev)
    anc[:, :, g:] = tree.ancestors
    tree_vis = ((col >= lo) & (col <= g)).expand(b, tot, tot)[:, g:] | anc
    mask = torch.where(chain_row, chain_vis | dummy_vis, False).expand(b, tot, tot).clone()
    mask[:, g:] = tree_vis
    return mask


@torch.no_grad()
def vvs(
    model,
    drafter,
    classes,
    codebook,
    *,
    schedule: str = "similarity",
    paths: str = "tree",
    threshold: float = 0.7,
    interval: int = 2,
    alpha: float = 0.9,
    stride: int = 2,
    branch: int = 4,
    depth: int = 5,
    num_nodes: int = 24,
    relax: Relaxation | None = None,
    length: int | None = None,
    drafter_prefill: bool = True,
    hide=None,
    hide_positions: str = "compact",
    compile_step=None,
    **sampling_kwargs,
):
    """VVS on top of EAGLE-2 drafting (``branch``/``depth``/``num_nodes`` as in
    ``speculative``); ``codebook`` [V, C] = the VQ latent embeddings; ``threshold`` = T_sim
    (the paper runs 0.65 - 0.80).  ``paths``: "tree" (the
    skip decision over all root-to-leaf paths of the pruned tree, as published) or "frontier"
    (the final beam frontier's paths; cheaper).  ``relax``: LANTERN relaxed acceptance for the
    verified steps (``lantern(codebook, k, delta)``; LOSSY, delta 0 = exact), None = exact.
    -> (tokens [B, length] int32, Stats with extra["skipped_steps"], extra["skipped_tokens"],
    extra["mean_feature_age"], extra["ride_along_rows"] (skipping requests computed in a batched
    target pass anyway), extra["drafter_prefill"]).  ``drafter_prefill``, ``hide``,
    ``hide_positions``: the drafter's prefill over the prompt and HiViS hidden visual tokens, as
    in ``speculative``.  ``compile_step`` (``specops.decode.compiled_step``): a step is two
    graphs around its host decision, the drafting half and the finishing half (one function per
    outcome of the decision), each compiled once per run.  ``sampling_kwargs``: the ``Sampling``
    settings (temperature, top_k, top_p, cfg_scale, seed)."""
    sampling = Sampling.of("vvs", sampling_kwargs)
    seed, greedy = sampling.seed, sampling.greedy
    if schedule not in ("similarity", "interval"):
        raise ValueError(f"vvs: schedule must be 'similarity' or 'interval', got {schedule!r}")
    if paths not in ("tree", "frontier"):
        raise ValueError(f"vvs: paths must be 'tree' or 'frontier', got {paths!r}")
    if relax is not None and greedy:
        raise ValueError("vvs: relax (LANTERN) needs sampling; greedy (temperature=0) is exact")
    tree_sizes("vvs", model, branch, depth, num_nodes)
    check_int("vvs", "interval", interval, 1)
    check_int("vvs", "stride", stride, 1)
    prompt, length = prepare("vvs", model, classes, length)
    dev = prompt.device
    hide = check_hide("vvs", prompt, hide, drafter_prefill, hide_positions, drafter)
    b = prompt.shape[0]
    G, D, N = depth, depth, num_nodes
    width = D + 1
    rec, rng, tgt, out, cap = start(
        "vvs", model, prompt, length, sampling, width=width + G, slack=G + N + width + 2
    )
    dr = DraftRunner(drafter, b, cap, rec, dev)
    codebook = codebook.to(dev)
    if relax is not None:
        relax = Relaxation(relax.neighbors.to(dev), relax.delta)
    rows = torch.arange(b, device=dev)
    M = G + width  # widest drafter update: gamma stale entries redone + a + 1
    jm = torch.arange(M, device=dev)[None, :]

    with nvtx_range("vvs.prefill"):
        dr.prefill(prompt)  # a standalone draft model reads the prompt
        probs, hidden = tgt.prefill()
        fcache = specops.FeatureCache(b, cap, hidden.shape[-1], dtype=hidden.dtype, device=dev)
        with rec.timer("specops"):
            fcache.write(torch.arange(prompt.shape[1], device=dev).expand(b, -1), hidden, 0)
        root, _ = emit_first(probs, out, rec, sampling, rng)
        # the drafter's first update: its prefill over the prompt, [e(x_{i+1}) || f_i] (HiViS
        # Eq. 3; visual positions in ``hide`` omitted), or only [e(s_1) || f_{n-1}] without
        # drafter_prefill
        upd_tok, upd_feat, upd_n = dr.first_entries(
            prompt, hidden, root, prefill=drafter_prefill, hide=hide,
            keep_positions=hide_positions == "target",
        )  # fmt: skip
    gamma = torch.zeros(b, dtype=torch.long, device=dev)  # unverified tokens pending
    unver = torch.full((b, G), -1, dtype=torch.int32, device=dev)  # x°, left-aligned
    droot = root.clone()  # the drafting root: last emitted token
    since = torch.zeros(b, dtype=torch.long, device=dev)  # verified steps since the last skip
    upd_n0 = upd_n  # the drafter's prefill length
    rewind = torch.zeros(b, dtype=torch.long, device=dev)
    skipped_steps = torch.zeros((), dtype=torch.long, device=dev)
    skipped_tokens = torch.zeros((), dtype=torch.long, device=dev)
    age_sum = torch.zeros((), dtype=torch.long, device=dev)
    age_cnt = torch.zeros((), dtype=torch.long, device=dev)
    ride_along = torch.zeros((), dtype=torch.long, device=dev)
    step_no = torch.zeros((), dtype=torch.long, device=dev)  # FeatureCache stamps: a device count

    def draft(rewind, upd_tok, upd_feat, upd_n, droot, gamma, since):
        """The drafting half of a step: drafter update, EAGLE-2 tree, skip decision, the skipped
        rows' path.  -> (what ``finish`` needs, [finished, any_verify] for the host read)."""
        step_no.add_(1)
        active = out.active
        dr.rewind(rewind)
        logits, g = dr.update(upd_tok, upd_feat, upd_n)
        dft = draft_dynamic(dr, droot, logits, g, branch, D, N, rec)
        tree = dft.tree
        # --- skip decision (Algorithm 1): only right after a verified step
        if schedule == "similarity":
            with rec.timer("specops"):
                if paths == "tree":
                    sim = tree_path_similarity(
                        tree, dft.tokens, codebook, D, alpha=alpha, stride=stride
                    )
                else:
                    sim = specops.path_similarity(dft.beams, codebook, alpha=alpha, stride=stride)
            want = sim >= threshold
        else:
            want = since >= interval - 1
        skip = active & (gamma == 0) & want
        verify = active & ~skip
        # --- skipped rows: a uniformly drawn path, truncated to the mean leaf depth (Eq. 1)
        with rec.timer("specops"):
            leaf = specops.sample(tree.is_leaf.float(), seed=seed, offset=rng()).long()
        dep = tree.depth.long()
        mean_len = (dep * tree.is_leaf).sum(-1) / tree.is_leaf.sum(-1)
        gam_new = torch.minimum(dep[rows, leaf], mean_len.floor().long()).clamp(min=1)
        anc_leaf = tree.ancestors[rows, leaf]  # [B, N]
        path_nodes = torch.stack(
            [(anc_leaf & (dep == j)).int().argmax(-1) for j in range(1, G + 1)], 1
        )
        jg = torch.arange(G, device=dev)[None, :]
        new_unver = torch.where(jg < gam_new[:, None], dft.tokens.gather(1, path_nodes), -1)
        flags = torch.stack([~active.any(), verify.any()])
        drafted = (active, skip, verify, gam_new, new_unver, dft.tokens, *_tree_tensors(tree))
        return drafted, flags

    def finish(verified, drafted, root, droot, gamma, unver, since):
        """The rest of the step: with ``verified`` (some active request verifies) one target
        pass over [root, x°] + the new tree (post verification), then the skipped rows' output
        and every row's next state."""
        active, skip, verify, gam_new, new_unver, dtokens, *tt = drafted
        tree = _tree_from(tt, min(D + 1, N))  # draft_dynamic's path width
        dep = tree.depth.long()
        c = tgt.seqlens.long()
        if verified:
            mask = _combined_mask(tree, gamma, G)
            bits = pack_bits(mask)
            jc = torch.arange(G + 1, device=dev)[None, :]
            chain_tok = torch.where(
                jc == G - gamma[:, None],
                root[:, None],
                unver.gather(1, (jc - (G - gamma[:, None]) - 1).clamp(0, G - 1)),
            )
            chain_tok = torch.where(jc < G - gamma[:, None], 0, chain_tok)
            chain_tok[:, G] = droot  # the tree root = last chain token
            tokens = torch.cat([chain_tok.int(), dtokens[:, 1:]], 1)
            chain_pos = c[:, None] + (jc - (G - gamma[:, None])).clamp(min=0)
            tree_pos = c[:, None] + gamma[:, None] + dep[:, 1:]
            pos = torch.cat([chain_pos, tree_pos], 1)
            p, h = tgt.forward(tokens, pos, bits, charged=verify)
            with nvtx_range("verify"), rec.timer("specops"):
                r = specops.verify_tree(
                    p[:, G:].contiguous(),
                    tree,
                    dtokens,
                    None,
                    seed=seed,
                    offset=rng(),
                    relax=relax,
                    greedy=greedy,
                )
            ride_along.add_((active & skip).sum())
            a = r.num_accepted.long()
            # committed slots: chain G - gamma .. G, then G + path[1 .. a]
            path_pad = torch.cat([r.path.long(), r.path.new_full((b, M), -1).long()], 1)
            sl = torch.where(
                jm <= gamma[:, None],
                G - gamma[:, None] + jm,
                G + path_pad.gather(1, (jm - gamma[:, None]).clamp(0, path_pad.shape[1] - 1)),
            )
            n_commit = gamma + a + 1
            sl = torch.where((jm < n_commit[:, None]) & verify[:, None], sl, -1)
            tgt.commit(sl.int())
            fresh_feat = torch.where((sl >= 0)[..., None], specops.gather_rows(h, sl), 0)
            with rec.timer("specops"):
                fcache.write(torch.where(sl >= 0, c[:, None] + jm, -1).int(), fresh_feat, step_no)
            n_emit = torch.where(verify, a + 1, 0)
            out.write(r.tokens, n_emit)
            rec.emitted(n_emit, verify)
            bonus = r.tokens[rows, a]
            # drafter: redo the gamma stale entries, then the accepted ones:
            # tokens s_{i+1} = x°_1 .. x°_gamma, accepted tokens, bonus; features = fresh
            ver_tok = torch.where(
                jm < gamma[:, None],
                unver.gather(1, jm.clamp(max=G - 1).expand(b, -1)),
                r.tokens.gather(1, (jm - gamma[:, None]).clamp(0, r.tokens.shape[1] - 1)),
            )
            ver_tok = torch.where(jm < n_commit[:, None], ver_tok, -1)
        else:
            n_commit = torch.zeros_like(gamma)
            bonus = root
            ver_tok = torch.full((b, M), -1, dtype=torch.int32, device=dev)
            fresh_feat = torch.zeros(b, M, hidden.shape[-1], dtype=hidden.dtype, device=dev)

        # skipped rows: emit x°, feed the drafter stale features (the gamma most recent ones)
        n_skip = torch.where(skip, gam_new, 0)
        out.write(new_unver, n_skip)
        with rec.timer("specops"):
            spos = fcache.recent_positions(c, n_skip, M)
            stale = fcache.read(spos)
            age = fcache.age(spos, step_no)
        age_sum.add_(torch.where(age >= 0, age, 0).sum())
        age_cnt.add_((age >= 0).sum())
        skipped_steps.add_(skip.sum())
        skipped_tokens.add_(n_skip.sum())
        skip_tok = torch.where(jm < n_skip[:, None], new_unver.gather(1, jm.clamp(max=G - 1)), -1)

        # next step's drafter update and state, per row
        upd_tok = torch.where(skip[:, None], skip_tok, ver_tok)
        upd_feat = torch.where(skip[:, None, None], stale, fresh_feat)
        upd_n = torch.where(skip, n_skip, torch.where(verify, n_commit, 0))
        rewind = torch.where(verify, gamma, 0)
        root = torch.where(verify, bonus, root)
        droot = torch.where(
            skip, new_unver[rows, (gam_new - 1).clamp(min=0)], torch.where(verify, bonus, droot)
        )
        unver = torch.where(skip[:, None], new_unver, torch.where(verify[:, None], -1, unver))
        gamma = torch.where(skip, gam_new, torch.where(verify, 0, gamma))
        since = torch.where(skip, 0, since + verify.long())
        return rewind, (upd_tok, upd_feat, upd_n), root, droot, gamma, unver, since

    # compiled: the drafting half once its inputs have the steady shapes (the first update reads
    # the prompt's entries), and each finishing half (a separate function per branch of the
    # host decision, so neither recompiles when the decision flips)
    draft_c = compiled_step(draft, compile_step)
    finish_v = compiled_step(lambda *a: finish(True, *a), compile_step)
    finish_s = compiled_step(lambda *a: finish(False, *a), compile_step)
    upd = (upd_tok, upd_feat, upd_n)
    first = True
    while True:
        with nvtx_range("vvs.step"):
            with nvtx_range("draft"):
                drafted, flags = (draft if first else draft_c)(rewind, *upd, droot, gamma, since)
            first = False
            # the step's one host read: stop when every request is done; run no target pass at
            # all when every active request skips verification
            finished, any_verify = flags.tolist()
            out.report()
            if finished:
                break
            fin = finish_v if any_verify else finish_s
            rewind, upd, root, droot, gamma, unver, since = fin(
                drafted, root, droot, gamma, unver, since
            )
    stats = rec.finish()
    stats.extra.update(
        skipped_steps=int(skipped_steps),
        skipped_tokens=int(skipped_tokens),
        mean_feature_age=float(age_sum) / max(int(age_cnt), 1),
        ride_along_rows=int(ride_along),
        drafter_prefill=float(upd_n0.float().mean()),
    )
    return out.tokens(), stats
