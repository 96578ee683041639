"""Coupled Jacobi drafts (MC-SJD, So et al., arXiv 2510.24211): a slot's new draft made to agree
with its previous one as often as the two draft distributions allow, each draft still a sample of
its own draft row (lossless).

- ``"maximal"``: keep the old token x w.p. min(1, q_new(x) / q_old(x)), else draw from
  norm(max(q_new - q_old, 0)): ``verify_jacobi``'s continuation rule, no op of its own.
- ``"gumbel"``: x_t = argmax_v (log q_t(v) + g_t(v)) with the same Gumbel noise g_t in every
  iteration, recomputed from Philox keyed by (seed, request, position t): nothing is stored.

Why both are lossless, their keep probabilities and the noise stream's layout:
docs/decoding.md, "Coupled drafts".
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
