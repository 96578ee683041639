"""Speculative Jacobi Decoding (SJD, Teng et al.; SJD-PAC Sec. 3.3): the target drafts for itself.

A window of L undecided tokens w_0 .. w_{L-1} follows the root s_c; w_i was drawn from q_i, the
target distribution of slot i computed in an earlier iteration (stale: its context has changed
since).  One iteration:

1. one target pass over [s_c, w_0 .. w_{L-2}] gives p_i = p(w_i | prefix, s_c, w_<i) for all i;
2. ``verify_jacobi`` (chain mode, no continuation): accept w_i while u_i q_i(w_i) < p_i(w_i);
   the first rejected slot a is resampled from norm(max(p_a - q_a, 0)); later slots are
   resampled afresh from their p_i (they become drafts with q_i = p_i);
3. n = min(a + 1, L) tokens are committed (their KV too: the root and w_0 .. w_{n-2}); the window
   shifts by n and n new slots are appended, drawn from the last row p_{L-1} (the most recent
   distribution the window has; any q is lossless as long as the token is drawn from it).

``coupling`` (MC-SJD; specops/decode/_coupling.py, docs/decoding.md "Coupled drafts"): how the
slots after the rejection get their next draft from p_i.  "none": afresh (above); "maximal":
the old w_i is kept with probability min(1, p_i(w_i) / q_i(w_i)), else redrawn from
norm(max(p_i - q_i, 0)) (``verify_jacobi``'s continuation); "gumbel": every slot of position t
is argmax(log q + g_t), the Gumbel noise g_t the same in every iteration (keyed by the request
and t on the Philox stream, recomputed, never stored).  Each is a sample of p_i: lossless.
"""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode._checks import check_width, prepare
from specops.decode._coupling import check_coupling, gumbel_draw
from specops.decode._loop import compiled_step, emit_first, init_rows, start
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
    length: int | None = None,
    compile_step=None,
    **sampling_kwargs,
):
    """SJD with a window of ``window`` slots.  ``init``: the first window's draws, "target" (from
    p(s_1)), "uniform" (uniform over the vocabulary, as SJD-PAC's authors initialise) or a [V]
    bool mask of the image tokens.  ``coupling``: "none", "maximal" or "gumbel" (MC-SJD: how a
    slot's next draft is coupled with its last; sampling only).  ``sampling_kwargs``: the
    ``Sampling`` settings (temperature, top_k, top_p, cfg_scale, seed).  ``compile_step``: see
    ``specops.decode.compiled_step``.  -> (tokens [B, length] int32, Stats)."""
    sampling = Sampling.of("sjd", sampling_kwargs)
    seed = sampling.seed
    coupling = check_coupling("sjd", coupling, sampling.greedy)
    L = check_width("sjd", "window", window)
    prompt, length = prepare("sjd", model, classes, length)
    b, dev = prompt.shape[0], prompt.device
    rec, rng, tgt, out, _ = start("sjd", model, prompt, length, sampling, width=L, slack=2 * L + 1)
    rows = torch.arange(b, device=dev)
    cols = torch.arange(L, device=dev)[None, :]
    key = torch.tensor(seed, dtype=torch.int64, device=dev)  # the Gumbel noise's Philox key

    def gumbel_at(first):  # the window's slot i holds position first + i ([B] int64)
        return (first[:, None] + cols, key) if coupling == "gumbel" else None

    with nvtx_range("sjd.prefill"):
        p0, _ = tgt.prefill()
        root, ones = emit_first(p0, out, rec, sampling, rng)
        # initial window: every slot drawn from the only distribution there is, p(s_1)
        with nvtx_range("draft"), rec.timer("specops"):
            w, q = shift_window(
                torch.zeros(b, L, dtype=torch.int32, device=dev),
                None,
                ones * L,
                init_rows(init, p0),
                seed,
                rng(),
                gumbel_at(tgt.seqlens.long() + 1),  # the root s_1 is at seqlens
            )

    def step(root, w, q):
        active = out.active
        inp = torch.cat([root[:, None], w[:, : L - 1]], 1)
        pos = tgt.seqlens.long()[:, None] + cols
        p, _ = tgt.forward(inp, pos, None, charged=active)  # p[:, i] = dist of slot i
        with nvtx_range("verify"), rec.timer("specops"):
            r = specops.verify_jacobi(
                p, w, q, continue_after_reject=coupling == "maximal", seed=seed, offset=rng()
            )
        n = (r.num_accepted.long() + 1).clamp(max=L)
        n_emit = torch.where(active, n, 0)
        tgt.commit(torch.where(cols < n_emit[:, None], cols, -1).int())  # root, w_0 .. w_{n-2}
        out.write(r.next_window, n_emit)
        rec.emitted(n_emit, active)
        root = torch.where(active, r.next_window[rows, n - 1], root)
        # slots after the committed ones were drawn from their p_i: they are next drafts (gumbel:
        # redrawn with their positions' noise; old slot n + j, at pos[:, n + j + 1], is new j)
        with nvtx_range("draft"), rec.timer("specops"):
            g = gumbel_at(pos[:, 0] + n + 1)
            w, q = shift_window(r.next_window, p, n, p[:, L - 1], seed, rng(), g)
        return root, w, q

    step = compiled_step(step, compile_step)
    while not out.done():
        with nvtx_range("sjd.step"):
            root, w, q = step(root, w, q)
    return out.tokens(), rec.finish()
