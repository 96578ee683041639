"""Reference sampling: multinomial draws on the shared Philox stream, probs_from_logits."""

from __future__ import annotations

import torch

from specops.reference.philox import row_uniforms

__all__ = [
    "mass",
    "rows_per_seed",
    "inverse_cdf",
    "sample",
    "successive_draws",
    "sample_without_replacement",
]


def mass(p: torch.Tensor) -> torch.Tensor:
    """The NaN policy (every backend alike): an entry counts as probability mass only when it is
    positive and finite.  NaN, negative, -0.0 and +inf entries count as 0.  float32 result."""
    p = p.float()
    return torch.where((p > 0) & (p < float("inf")), p, torch.zeros((), device=p.device))


def rows_per_seed(seed, rows: int) -> int:
    """Row r of an op's flat rows uses seed[r // rows_per_seed] (seed [B]: one per request)."""
    if isinstance(seed, torch.Tensor) and seed.dim() == 1 and seed.numel() > 1:
        return rows // seed.numel()
    return rows


def inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """token = min{i : p_0 + ... + p_i > u * sum(p)} per row of p [R, V] (unnormalised), over
    ``mass(p)`` (NaN, negative and +inf entries count as 0: the NaN policy).
    Falls back to the last token with positive mass, or 0 for a row without any.
    Sums accumulate in float64 (as on every backend), so backends agree except on ties."""
    p = mass(p).double()
    c = p.cumsum(-1)
    target = u.double() * c[:, -1]
    hit = (c > target[:, None]) & (p > 0)
    v = p.shape[-1]
    ids = torch.arange(v, device=p.device)
    first_hit = torch.where(hit, ids, v).amin(-1)
    last_pos = torch.where(p > 0, ids, -1).amax(-1).clamp_min(0)
    return torch.where(first_hit < v, first_hit, last_pos).to(torch.int32)


def sample(
    probs: torch.Tensor, *, seed=0, offset=0, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """One draw per row of ``probs`` [..., V] (rows need not be normalised) -> [...] int32:
    ``inverse_cdf`` of the row, so NaN / negative / +inf entries are never drawn and a row
    without positive finite mass gives token 0.  The row's uniform is draw 0 of stream row r
    (flat row index), or ``uniforms[..., ]``."""
    lead = probs.shape[:-1]
    p = probs.reshape(-1, probs.shape[-1]).float()
    r = p.shape[0]
    if uniforms is not None:
        u = uniforms.reshape(r).float()
    else:
        u = row_uniforms(
            seed, offset, r, 1, rows_per_seed=rows_per_seed(seed, r), device=probs.device
        )[:, 0]
    return inverse_cdf(p, u).reshape(lead)


def successive_draws(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """k draws without replacement per row of ``p`` [R, V] (unnormalised), one uniform each
    (``u`` [R, k]) -> [R, k] int32: draw j is ``inverse_cdf`` of ``mass(p)`` with the ids of draws
    0..j-1 set to 0, with uniform u[:, j]; -1 once no positive entry is left.  Same distribution
    as Gumbel top-k (sequential sampling without replacement), k uniforms instead of V."""
    w = mass(p)  # a new tensor: zeroing draws below leaves p alone
    rows = torch.arange(w.shape[0], device=w.device)
    out = []
    for j in range(u.shape[1]):
        left = (w > 0).any(-1)
        c = inverse_cdf(w, u[:, j]).long()
        out.append(torch.where(left, c, -1))
        w[rows, c] = torch.where(left, 0.0, w[rows, c])
    if not out:
        return torch.empty(w.shape[0], 0, dtype=torch.int32, device=w.device)
    return torch.stack(out, -1).to(torch.int32)


def sample_without_replacement(
    probs: torch.Tensor, k: int, *, seed=0, offset=0, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """k distinct draws per row of ``probs`` [..., V] (non-negative, need not sum to 1), in the
    order of sequential sampling without replacement -> [..., k] int32.

    Gumbel top-k: with one uniform u_v per vocabulary entry, key_v = log(p_v) - log(-log(u_v))
    (float32); the result is the ids of the k largest keys, largest first (ties: lower id
    first).  Entry 0 is therefore a plain draw from p, entry j a draw from p without the first j.
    Entries without mass (p_v <= 0, NaN or +inf: ``mass``) are never chosen: a row with fewer
    than k such entries returns all of them (in key order) followed by -1 padding (a row without
    mass is all -1); k > V pads likewise.

    Random draws: flat row r (row-major over the leading dims; ``seed`` [B] = one per request
    along dim 0), draw v = u_v for entry v.  ``uniforms`` [..., V] float32 replaces them,
    clamped to [2^-24, 1] on every backend: one below 2^-24 (the stream's smallest), 0 and NaN
    included, counts as 2^-24, one above 1 (+inf included) as 1 (key +inf: first, ties to the
    lower id).  The public op rejects uniforms outside [0, 1] in validation mode."""
    lead = probs.shape[:-1]
    v = probs.shape[-1]
    p = mass(probs.reshape(-1, v))
    r = p.shape[0]
    if uniforms is not None:
        u = uniforms.reshape(r, v).float()
    else:
        u = row_uniforms(
            seed, offset, r, v, rows_per_seed=rows_per_seed(seed, r), device=probs.device
        )
    # Philox's uniforms lie in [2^-24, 1 - 2^-24]; a caller's below 2^-24 (0, NaN) counts as
    # 2^-24, so every entry with mass has a key > -inf and can be chosen, and one above 1 (+inf)
    # as 1, so no key is NaN (every backend alike: gumbel_uniform, csrc/include/specops/sample.h)
    u = torch.where(u > 2.0**-24, u.clamp_max(1.0), 2.0**-24)
    keys = torch.log(p) - torch.log(-torch.log(u))
    keys = torch.where(p > 0, keys, float("-inf"))
    kk = min(k, v)
    order = torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :kk]
    out = torch.where(keys.gather(-1, order) > float("-inf"), order, -1).to(torch.int32)
    if k > v:
        out = torch.cat([out, out.new_full((r, k - v), -1)], -1)
    return out.reshape(*lead, k)
