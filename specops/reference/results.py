"""The result types of the verification ops and LANTERN's ``Relaxation`` with its pooled mass
``pool`` (re-exported by ``specops.reference.verify`` and ``specops``)."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Relaxation", "pool", "ChainResult", "TreeResult", "JacobiResult"]


class Relaxation(NamedTuple):
    """LANTERN relaxed acceptance.  LOSSY: with it the output no longer follows the target.

    ``neighbors`` [V, k] int32/int64: row ``x`` lists the latent-space neighbours of token ``x``,
    nearest first; -1 entries, ids outside [0, V) and ``x`` itself are skipped.  ``delta`` >= 0.

    With ``n_1, ..., n_k = neighbors[x]`` in the given order (skipped entries contribute 0) and
    ``c_j = p(n_1) + ... + p(n_j)`` (float64), the pooled mass is
    ``pool(x) = sum_{j : c_j <= delta} p(n_j)``: the longest prefix of the neighbour list whose
    cumulative target mass stays <= delta.  A draft ``x`` is accepted iff
    ``u * q(x) < p(x) + pool(x)`` (pool rounded to float32, the sum in float32).  ``p`` is the
    current target row (in a tree: the residual after earlier siblings were rejected).
    ``delta = 0`` pools nothing of positive mass, i.e. exact verification."""

    neighbors: torch.Tensor
    delta: float


def pool(p: torch.Tensor, x: torch.Tensor, relax: Relaxation | None) -> torch.Tensor:
    """LANTERN pooled neighbour mass of x under p [R, V] (see ``Relaxation``), float32 [R]."""
    if relax is None:
        return torch.zeros(p.shape[0], dtype=torch.float32, device=p.device)
    v = p.shape[-1]
    nb = relax.neighbors.to(p.device).long()
    ok = (x >= 0) & (x < v)
    rows = nb[x.clamp(0, v - 1)]  # [R, k]
    valid = (rows >= 0) & (rows < v) & (rows != x[:, None]) & ok[:, None]
    pn = torch.where(valid, p.gather(-1, rows.clamp(0, v - 1)), 0.0).double()
    cum = pn.cumsum(-1)
    return torch.where(cum <= float(relax.delta), pn, 0.0).sum(-1).float()


class ChainResult(NamedTuple):
    tokens: torch.Tensor  # [B, K+1] int32: accepted drafts, then one corrected/bonus token, -1 pad
    num_accepted: torch.Tensor  # [B] int32


class TreeResult(NamedTuple):
    path: torch.Tensor  # [B, D+1] int32 node ids root first (path[:, 0] = 0), -1 padded
    tokens: torch.Tensor  # [B, D+1] int32: accepted draft tokens, then the corrected/bonus token
    num_accepted: torch.Tensor  # [B] int32


class JacobiResult(NamedTuple):
    num_accepted: torch.Tensor  # [B] int32
    next_window: torch.Tensor  # [B, L] int32
    first_reject: torch.Tensor  # [B] int32, -1 when none
    candidates: torch.Tensor | None  # [B, L, num_candidates] int32, or None
    path: torch.Tensor | None  # [B, L] int32 in tree mode, else None
