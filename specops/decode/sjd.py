"""Speculative Jacobi Decoding (SJD, Teng et al.; SJD-PAC Sec. 3.3): the target drafts for itself.

A window of L undecided tokens follows the root; one iteration is one target pass over the root
and the window, ``verify_jacobi`` (chain mode) accepting a prefix, and the window shifted by the
committed tokens, its new slots drawn from the most recent distribution it has.  ``coupling``
(MC-SJD, specops/decode/_coupling.py): how the slots after a rejection get their next draft
("none", "maximal", "gumbel"); each is lossless.

The iteration step by step and the couplings' maths: docs/decoding.md, "SJD" and "Coupled drafts".
"""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode import _loop
from specops.decode._checks import check_width, prepare
from specops.decode._coupling import check_coupling, gumbel_draw
from specops.decode._loop import begin, commit, finish, first_n, init_rows, prefill, run_steps
from specops.decode.sampling import Sampling

__all__ = ["sjd", "shift_window"]


def shift_window(tokens, probs, n, fresh_q, seed, offset, gumbel_at=None):
    """Drop the first n[b] slots of a window (tokens [B, L], their draft dists probs [B, L, V]),
    shift the rest left and fill the tail with draws from fresh_q [B, V].  ``gumbel_at``
    ((positions [B, L] of the new slots, seed tensor)): every slot redrawn by Gumbel-max from its
    draft dist with that position's noise instead (``gumbel_draw``)."""
    b, L = tokens.shape
    if probs is None:
        probs = fresh_q[:, None].expand(b, L, -1)
    cols = torch.arange(L, device=tokens.device)[None, :]
    src = cols + n[:, None]
    fresh = src >= L
    rows = torch.arange(b, device=tokens.device)[:, None]
    srcc = src.clamp(max=L - 1)
    q = torch.where(fresh[..., None], fresh_q[:, None], probs[rows, srcc])
    if gumbel_at is not None:
        return gumbel_draw(q, *gumbel_at), q
    new = specops.sample(fresh_q[:, None].expand(b, L, -1), seed=seed, offset=offset)
    return torch.where(fresh, new, tokens.gather(1, srcc)).int(), q


@torch.no_grad()
def sjd(
    model,
    classes,
    *,
    window: int = 16,
    init="target",
    coupling: str = "none",
    relax=None,
    length: int | None = None,
    compile_step=None,
    **sampling_kwargs,
):
    """SJD with a window of ``window`` slots.  ``init``: the first window's draws, "target" (from
    p(s_1)), "uniform" (uniform over the vocabulary, as SJD-PAC's authors initialise) or a [V]
    bool mask of the image tokens.  ``coupling``: "none", "maximal" or "gumbel" (MC-SJD: how a
    slot's next draft is coupled with its last; sampling only).  ``relax``: a lossy acceptance
    for ``verify_jacobi``, LANTERN's ``Relaxation`` or GSD's ``Grouping`` (sampling only; None:
    exact).  ``sampling_kwargs``: the
    ``Sampling`` settings (temperature, top_k, top_p, cfg_scale, seed).  ``compile_step``: see
    ``specops.decode.compiled_step``.  -> (tokens [B, length] int32, Stats)."""
    sampling = Sampling.of("sjd", sampling_kwargs)
    seed = sampling.seed
    coupling = check_coupling("sjd", coupling, sampling.greedy)
    L = check_width("sjd", "window", window)
    prompt, length = prepare("sjd", model, classes, length)
    b, dev = prompt.shape[0], prompt.device
    relax = _loop.relax_on("sjd", relax, sampling.greedy, prompt.device)
    run = begin("sjd", model, prompt, length, sampling, width=L, slack=2 * L + 1)
    rec, rng, tgt, out = run.rec, run.rng, run.tgt, run.out
    rows, cols = run.rows, torch.arange(L, device=dev)[None, :]
    key = torch.tensor(seed, dtype=torch.int64, device=dev)  # the Gumbel noise's Philox key

    def gumbel_at(first):  # the window's slot i holds position first + i ([B] int64)
        return (first[:, None] + cols, key) if coupling == "gumbel" else None

    def first_window(p0, hidden, root, ones):
        # every slot drawn from the only distribution there is, p(s_1) (or as ``init`` says)
        with nvtx_range("draft"), rec.timer("specops"):
            empty = torch.zeros(b, L, dtype=torch.int32, device=dev)
            first = tgt.seqlens.long() + 1  # the root s_1 is at seqlens
            return shift_window(empty, None, ones * L, init_rows(init, p0), seed, rng(),
                                gumbel_at(first))  # fmt: skip

    def step(root, w, q):
        active = out.active
        inp = torch.cat([root[:, None], w[:, : L - 1]], 1)
        pos = tgt.seqlens.long()[:, None] + cols
        p, _ = tgt.forward(inp, pos, None, charged=active)  # p[:, i] = dist of slot i
        with nvtx_range("verify"), rec.timer("specops"):
            r = specops.verify_jacobi(
                p,
                w,
                q,
                continue_after_reject=coupling == "maximal",
                seed=seed,
                offset=rng(),
                relax=relax,
            )
        n = (r.num_accepted.long() + 1).clamp(max=L)
        n_emit = torch.where(active, n, 0)
        # root, w_0 .. w_{n-2}
        commit(run, first_n(cols.expand(b, L), n_emit), r.next_window, n_emit, active)
        root = torch.where(active, r.next_window[rows, n - 1], root)
        # slots after the committed ones were drawn from their p_i: they are next drafts (gumbel:
        # redrawn with their positions' noise; old slot n + j, at pos[:, n + j + 1], is new j)
        with nvtx_range("draft"), rec.timer("specops"):
            g = gumbel_at(pos[:, 0] + n + 1)
            w, q = shift_window(r.next_window, p, n, p[:, L - 1], seed, rng(), g)
        return root, w, q

    root, (w, q) = prefill(run, first_window)
    run_steps(run, step, (root, w, q), compile_step=compile_step)
    return finish(run)
