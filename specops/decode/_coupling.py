"""Coupled Jacobi drafts (MC-SJD, So et al., arXiv 2510.24211): a slot's new draft made to agree
with its previous one as often as the two draft distributions allow.

Lossless when each new draft of position t is a sample of its draft row q_t given everything
that decided the tokens before t, as both couplings below make it: they correlate it only with
earlier drafts of the same position t, which decided nothing (a draft of t is verified once, in
the iteration that commits t).  A rule that keeps old tokens more often than min(1, q_new/q_old)
(e.g. always) breaks it, and the exact-law tests catch it (tests/test_decode_coupling.py).

- ``"maximal"``: the old token x ~ q_old is kept with probability min(1, q_new(x) / q_old(x)),
  else replaced by a draw from norm(max(q_new - q_old, 0)).  Then
  P(y) = q_old(y) min(1, q_new(y)/q_old(y)) + (1 - sum_x min(q_old(x), q_new(x))) r(y)
       = min(q_old(y), q_new(y)) + max(q_new(y) - q_old(y), 0) = q_new(y),
  and P(keep) = sum_x min(q_old(x), q_new(x)) = 1 - TV(q_old, q_new), the most any coupling
  keeps.  It is ``verify_jacobi``'s continuation rule (``u q(x) < p(x)``, else the residual),
  so it needs no op of its own.
- ``"gumbel"``: x_t = argmax_v (log q_t(v) + g_t(v)), g_t(v) = -log(-log u_t(v)) with the same
  uniforms u_t in every iteration: each draw is a sample of its q (the Gumbel-max trick), and
  two draws of position t agree iff the argmax does not move.  Both argmaxes are x iff
  g_v < g_x + log min(q_old(x)/q_old(v), q_new(x)/q_new(v)) for every v, a Gumbel-max event
  over the weights w_v = max(q_old(v)/q_old(x), q_new(v)/q_new(x)) (w_x = 1), so
  P(keep) = sum_x 1 / sum_v max(q_old(v)/q_old(x), q_new(v)/q_new(x)),
  which lies between (1 - TV) / (1 + TV) and the maximal coupling's 1 - TV (TV = total
  variation of q_old, q_new).  Its noise is a function of (seed, request, position), recomputed
  from Philox, so nothing is stored, and a position that left the window (SJD-PAC's tree spans
  fewer positions than its chain) is still coupled when it comes back.

The noise stream: u_t(v) = ((w >> 9) + 0.5) 2^-23 (the shared stream's uniform, specops/
reference/philox.py) of word v mod 4 of Philox4x32-10(key = seed, counter = (v div 4, request b,
lo(T), hi(T))), T = GUMBEL_OFFSET + t: an offset block the loop's counter (1, 2, ...) never
reaches, four uniforms per Philox call.
"""

from __future__ import annotations

import torch

import specops
from specops.reference.philox import philox4x32_10

__all__ = [
    "COUPLINGS", "PAC_COUPLINGS", "GUMBEL_OFFSET", "check_coupling", "gumbel_uniforms",
    "gumbel_draw", "draw",
]  # fmt: skip

COUPLINGS = ("none", "maximal", "gumbel")
PAC_COUPLINGS = ("none", "gumbel")  # SJD-PAC: its continuation is the maximal coupling already
GUMBEL_OFFSET = 0x4D43534A << 32  # 'MCSJ' in the offset's high word


def check_coupling(fn: str, coupling, greedy: bool, allowed=COUPLINGS) -> str:
    """``coupling`` one of ``allowed``, and not with greedy decoding (temperature 0: drafts are
    argmaxes, there is no randomness to couple).  One ValueError naming the argument."""
    if coupling == "maximal" and allowed == PAC_COUPLINGS:
        raise ValueError(
            f"{fn}: coupling='maximal' is what adaptive continuation already does to every slot "
            f"it continues; the fresh slots have no old token: coupling must be one of {allowed}"
        )
    if not isinstance(coupling, str) or coupling not in allowed:
        raise ValueError(f"{fn}: coupling must be one of {allowed}, got {coupling!r}")
    if coupling != "none" and greedy:
        raise ValueError(
            f"{fn}: coupling={coupling!r} needs sampling; greedy decoding (temperature=0, "
            "do_sample=False) has no random drafts to couple: use coupling='none'"
        )
    return coupling


def gumbel_uniforms(seed: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """u[b, i, v] = u_t(v) of request b at position t = positions[b, i] ([B, L] int64) for the
    int64 ``seed`` tensor [] -> [B, L, vocab] float32 in [2^-24, 1 - 2^-24]."""
    b = positions.shape[0]
    dev = positions.device
    t = positions.long()[..., None] + GUMBEL_OFFSET  # [B, L, 1]
    row = torch.arange(b, device=dev)[:, None, None]
    blk = torch.arange((vocab + 3) // 4, device=dev)  # Philox calls: four uniforms each
    words = philox4x32_10(blk, row, t & 0xFFFFFFFF, t >> 32, seed & 0xFFFFFFFF, seed >> 32)
    w = torch.stack(words, -1).flatten(-2)[..., :vocab]  # word v mod 4 of call v div 4
    return ((w >> 9).to(torch.float32) + 0.5) * (2.0**-23)


def gumbel_draw(q: torch.Tensor, positions: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
    """x[b, i] = argmax_v (log q[b, i, v] + g_t(v)), t = positions[b, i]: a sample of each row of
    q [B, L, V] (rows need not be normalised), the noise keyed by (seed, b, t) -> [B, L] int32.
    ``specops.sample_without_replacement`` with k = 1 is this Gumbel-max given the uniforms."""
    u = gumbel_uniforms(seed, positions, q.shape[-1])
    return specops.sample_without_replacement(q, 1, uniforms=u)[..., 0]


def draw(coupling: str, q, positions, key, seed, offset) -> torch.Tensor:
    """One token per row of q [B, L, V]: by Gumbel-max with the noise of ``positions`` [B, L]
    ("gumbel", Philox key ``key``), else afresh on the run's stream (``seed``, ``offset``)."""
    if coupling == "gumbel":
        return gumbel_draw(q, positions, key)
    return specops.sample(q, seed=seed, offset=offset)
