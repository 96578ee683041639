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
from specops.decode._loop import (
    begin,
    compiled_step,
    finish,
    first_update,
    prefill,
    relax_on,
    run_steps,
)
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
    if schedule not in ("similarity", "interval"):
        raise ValueError(f"vvs: schedule must be 'similarity' or 'interval', got {schedule!r}")
    if paths not in ("tree", "frontier"):
        raise ValueError(f"vvs: paths must be 'tree' or 'frontier', got {paths!r}")
    tree_sizes("vvs", model, branch, depth, num_nodes)
    check_int("vvs", "interval", interval, 1)
    check_int("vvs", "stride", stride, 1)
    prompt, length = prepare("vvs", model, classes, length)
    hide = check_hide("vvs", prompt, hide, drafter_prefill, hide_positions, drafter)
    relax = relax_on("vvs", relax, sampling.greedy, prompt.device)
    G, N = depth, num_nodes
    run = begin("vvs", model, prompt, length, sampling, width=2 * G + 1, slack=2 * G + N + 3,
                drafter=drafter)  # fmt: skip
    v = _Vvs(run, codebook.to(prompt.device), G, N, schedule=schedule, paths=paths,
             threshold=threshold, interval=interval, alpha=alpha, stride=stride, branch=branch,
             relax=relax)  # fmt: skip

    def then(probs, hidden, root, ones):
        v.start(hidden)
        return first_update(run, hidden, root, drafter_prefill, hide, hide_positions)

    root, upd = prefill(run, then)
    # compiled: the drafting half once its inputs have the steady shapes (the first update reads
    # the prompt's entries), and each finishing half (a separate function per branch of the
    # host decision, so neither recompiles when the decision flips)
    v.compile(compile_step)
    run_steps(run, v.step, v.first_state(root, upd), until="step")
    return finish(
        run,
        skipped_steps=int(v.skipped_steps),
        skipped_tokens=int(v.skipped_tokens),
        mean_feature_age=float(v.age_sum) / max(int(v.age_cnt), 1),
        ride_along_rows=int(v.ride_along),
        drafter_prefill=float(upd[2].float().mean()),
    )


class _Vvs:
    """One VVS run: its settings and device counters, the step's two halves around the host
    decision (``draft``, ``finish``) and the step."""

    def __init__(self, run, codebook, G, N, **opts):
        self.run, self.codebook, self.G, self.N = run, codebook, G, N
        self.__dict__.update(opts)
        dev = run.prompt.device
        self.rows = run.rows
        self.M = 2 * G + 1  # widest drafter update: gamma stale entries redone + a + 1
        self.jm = torch.arange(self.M, device=dev)[None, :]
        zero = lambda: torch.zeros((), dtype=torch.long, device=dev)  # noqa: E731
        self.skipped_steps, self.skipped_tokens, self.ride_along = zero(), zero(), zero()
        self.age_sum, self.age_cnt = zero(), zero()
        self.step_no = zero()  # FeatureCache stamps: a device count
        self.first = True

    def start(self, hidden):
        """The prefill's features into the run's FeatureCache."""
        run, b = self.run, hidden.shape[0]
        dev = hidden.device
        self.hidden_shape = hidden.shape[-1], hidden.dtype
        self.fcache = specops.FeatureCache(b, run.cap, hidden.shape[-1], dtype=hidden.dtype,
                                           device=dev)  # fmt: skip
        with run.rec.timer("specops"):
            pos = torch.arange(run.prompt.shape[1], device=dev).expand(b, -1)
            self.fcache.write(pos, hidden, 0)

    def first_state(self, root, upd):
        """-> the loop's state after the prefill: (rewind, upd, root, droot, gamma, unver,
        since) with gamma = unverified tokens pending, unver = x° (left-aligned), droot = the
        drafting root (the last emitted token), since = verified steps since the last skip."""
        b, dev, G = root.shape[0], root.device, self.G
        zeros = lambda: torch.zeros(b, dtype=torch.long, device=dev)  # noqa: E731 (unaliased)
        unver = torch.full((b, G), -1, dtype=torch.int32, device=dev)
        return zeros(), upd, root, root.clone(), zeros(), unver, zeros()

    def compile(self, how):
        self.draft_c = compiled_step(self.draft, how)
        self.finish_v = compiled_step(lambda *a: self.finish(True, *a), how)
        self.finish_s = compiled_step(lambda *a: self.finish(False, *a), how)

    def step(self, rewind, upd, root, droot, gamma, unver, since):
        """One step: the drafting half, the step's one host read (stop when every request is
        done; run no target pass at all when every active request skips verification), then
        the finishing half.  -> the next state, or None when done."""
        with nvtx_range("draft"):
            draft = self.draft if self.first else self.draft_c
            drafted, flags = draft(rewind, *upd, droot, gamma, since)
        self.first = False
        finished, any_verify = flags.tolist()
        self.run.out.report()
        if finished:
            return None
        fin = self.finish_v if any_verify else self.finish_s
        return fin(drafted, root, droot, gamma, unver, since)

    def skip_decision(self, dft, active, gamma, since):
        """VVS Algorithm 1, only right after a verified step -> (skip, verify) [B] bool."""
        if self.schedule == "similarity":
            with self.run.rec.timer("specops"):
                if self.paths == "tree":
                    sim = tree_path_similarity(dft.tree, dft.tokens, self.codebook, self.G,
                                               alpha=self.alpha, stride=self.stride)  # fmt: skip
                else:
                    sim = specops.path_similarity(dft.beams, self.codebook, alpha=self.alpha,
                                                  stride=self.stride)  # fmt: skip
            want = sim >= self.threshold
        else:
            want = since >= self.interval - 1
        skip = active & (gamma == 0) & want
        return skip, active & ~skip

    def draft(self, rewind, upd_tok, upd_feat, upd_n, droot, gamma, since):
        """The drafting half of a step: drafter update, EAGLE-2 tree, skip decision, the skipped
        rows' path.  -> (what ``finish`` needs, [finished, any_verify] for the host read)."""
        run, G, rows = self.run, self.G, self.rows
        self.step_no.add_(1)
        active = run.out.active
        run.dr.rewind(rewind)
        logits, g = run.dr.update(upd_tok, upd_feat, upd_n)
        dft = draft_dynamic(run.dr, droot, logits, g, self.branch, G, self.N, run.rec)
        tree = dft.tree
        skip, verify = self.skip_decision(dft, active, gamma, since)
        # --- skipped rows: a uniformly drawn path, truncated to the mean leaf depth (Eq. 1)
        with run.rec.timer("specops"):
            seed = run.sampling.seed
            leaf = specops.sample(tree.is_leaf.float(), seed=seed, offset=run.rng()).long()
        dep = tree.depth.long()
        mean_len = (dep * tree.is_leaf).sum(-1) / tree.is_leaf.sum(-1)
        gam_new = torch.minimum(dep[rows, leaf], mean_len.floor().long()).clamp(min=1)
        anc_leaf = tree.ancestors[rows, leaf]  # [B, N]
        path_nodes = torch.stack(
            [(anc_leaf & (dep == j)).int().argmax(-1) for j in range(1, G + 1)], 1
        )
        jg = torch.arange(G, device=droot.device)[None, :]
        new_unver = torch.where(jg < gam_new[:, None], dft.tokens.gather(1, path_nodes), -1)
        flags = torch.stack([~active.any(), verify.any()])
        drafted = (active, skip, verify, gam_new, new_unver, dft.tokens, *_tree_tensors(tree))
        return drafted, flags

    def verified(self, tree, dtokens, active, skip, verify, root, droot, gamma, unver):
        """Post verification: one target pass over [root, x°] + the new tree, verification of
        the tree, the commit of the verified rows.  -> (n_commit, bonus, drafter tokens,
        fresh features) for the verified rows."""
        run, tgt, G, jm, b = self.run, self.run.tgt, self.G, self.jm, root.shape[0]
        c = tgt.seqlens.long()
        bits = pack_bits(_combined_mask(tree, gamma, G))
        jc = torch.arange(G + 1, device=root.device)[None, :]
        lo = G - gamma[:, None]  # first real chain slot
        chain_tok = torch.where(
            jc == lo, root[:, None], unver.gather(1, (jc - lo - 1).clamp(0, G - 1))
        )
        chain_tok = torch.where(jc < lo, 0, chain_tok)
        chain_tok[:, G] = droot  # the tree root = last chain token
        tokens = torch.cat([chain_tok.int(), dtokens[:, 1:]], 1)
        chain_pos = c[:, None] + (jc - lo).clamp(min=0)
        tree_pos = c[:, None] + gamma[:, None] + tree.depth.long()[:, 1:]
        p, h = tgt.forward(tokens, torch.cat([chain_pos, tree_pos], 1), bits, charged=verify)
        with nvtx_range("verify"), run.rec.timer("specops"):
            smp = run.sampling
            r = specops.verify_tree(
                p[:, G:].contiguous(), tree, dtokens, None, seed=smp.seed, offset=run.rng(),
                relax=self.relax, greedy=smp.greedy,
            )  # fmt: skip
        self.ride_along.add_((active & skip).sum())
        a = r.num_accepted.long()
        # committed slots: chain G - gamma .. G, then G + path[1 .. a]
        path_pad = torch.cat([r.path.long(), r.path.new_full((b, self.M), -1).long()], 1)
        sl = torch.where(
            jm <= gamma[:, None],
            G - gamma[:, None] + jm,
            G + path_pad.gather(1, (jm - gamma[:, None]).clamp(0, path_pad.shape[1] - 1)),
        )
        n_commit = gamma + a + 1
        sl = torch.where((jm < n_commit[:, None]) & verify[:, None], sl, -1)
        tgt.commit(sl.int())
        fresh_feat = torch.where((sl >= 0)[..., None], specops.gather_rows(h, sl), 0)
        with run.rec.timer("specops"):
            at = torch.where(sl >= 0, c[:, None] + jm, -1).int()
            self.fcache.write(at, fresh_feat, self.step_no)
        n_emit = torch.where(verify, a + 1, 0)
        run.out.write(r.tokens, n_emit)
        run.rec.emitted(n_emit, verify)
        # drafter: redo the gamma stale entries, then the accepted ones:
        # tokens s_{i+1} = x°_1 .. x°_gamma, accepted tokens, bonus; features = fresh
        ver_tok = torch.where(
            jm < gamma[:, None],
            unver.gather(1, jm.clamp(max=G - 1).expand(b, -1)),
            r.tokens.gather(1, (jm - gamma[:, None]).clamp(0, r.tokens.shape[1] - 1)),
        )
        ver_tok = torch.where(jm < n_commit[:, None], ver_tok, -1)
        return n_commit, r.tokens[self.rows, a], ver_tok, fresh_feat

    def finish(self, verified, drafted, root, droot, gamma, unver, since):
        """The rest of the step: with ``verified`` (some active request verifies) the target
        pass and its verification (``verified``), then the skipped rows' output and every
        row's next state."""
        active, skip, verify, gam_new, new_unver, dtokens, *tt = drafted
        tree = _tree_from(tt, min(self.G + 1, self.N))  # draft_dynamic's path width
        run, G, jm, rows, b = self.run, self.G, self.jm, self.rows, root.shape[0]
        c = run.tgt.seqlens.long()
        if verified:
            n_commit, bonus, ver_tok, fresh_feat = self.verified(
                tree, dtokens, active, skip, verify, root, droot, gamma, unver
            )
        else:
            n_commit, bonus = torch.zeros_like(gamma), root
            ver_tok = torch.full((b, self.M), -1, dtype=torch.int32, device=root.device)
            h, dtype = self.hidden_shape
            fresh_feat = torch.zeros(b, self.M, h, dtype=dtype, device=root.device)

        # skipped rows: emit x°, feed the drafter stale features (the gamma most recent ones)
        n_skip = torch.where(skip, gam_new, 0)
        run.out.write(new_unver, n_skip)
        with run.rec.timer("specops"):
            spos = self.fcache.recent_positions(c, n_skip, self.M)
            stale = self.fcache.read(spos)
            age = self.fcache.age(spos, self.step_no)
        self.age_sum.add_(torch.where(age >= 0, age, 0).sum())
        self.age_cnt.add_((age >= 0).sum())
        self.skipped_steps.add_(skip.sum())
        self.skipped_tokens.add_(n_skip.sum())
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
