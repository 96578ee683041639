"""Reference probs_from_logits: CFG combine, temperature, top-k, top-p, softmax.

The semantics every backend reproduces, in order: CFG ``l = u + s * (c - u)`` in float32 (three
roundings, no fused multiply-add); temperature ``x = l / T`` (``T < 1e-5`` is greedy: one-hot
of ``argmax l``, ties -> lowest index); top-k keeps ``x_i >= tau_k`` (ties at the threshold
all kept); top-p keeps the smallest set of largest tokens whose mass reaches p (ties kept, the
arg-max always survives); softmax over the survivors.  Row r belongs to request
``b = r // (R / B)``.  NaN parameters mean no change (temperature 1, no top-p, no guidance); a
row of all ``-inf`` is the one-hot of token 0.

Each step's exact definition, top-p's rule on every backend (p read as float32, the target
``max(p * Z, 1e-30)``) and where backends may differ (the precision of the mass sums):
docs/reference_semantics.md, "Logits to probabilities".
"""

from __future__ import annotations

import torch

__all__ = ["probs_from_logits", "GREEDY_TEMPERATURE"]

# Temperatures below this are greedy (as vLLM's _SAMPLING_EPS); it also keeps l / T finite.
GREEDY_TEMPERATURE = 1e-5


def _per_row(value, rows: int, per_request: int, dtype, device) -> torch.Tensor:
    """Scalar or [] / [B] tensor -> [rows] tensor (request b's value on its rows)."""
    if isinstance(value, torch.Tensor):
        t = value.to(device=device, dtype=dtype).reshape(-1)
        if t.numel() == 1:
            return t.expand(rows)
        return t.repeat_interleave(per_request)
    return torch.full((rows,), value, dtype=dtype, device=device)


def cfg_combine(cond: torch.Tensor, uncond: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """l = u + s * (c - u) per row ([R, V] float32, s [R]); -inf in either row stays -inf."""
    d = cond - uncond
    e = scale[:, None] * d
    combined = uncond + e
    masked = (cond == float("-inf")) | (uncond == float("-inf"))
    return torch.where(masked, float("-inf"), combined)


def probs_from_logits(
    logits: torch.Tensor,
    *,
    temperature=1.0,
    top_k=None,
    top_p=None,
    cfg_scale=None,
    uncond_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """Probabilities [..., V] float32 from ``logits`` [..., V] (see the module docstring).

    ``temperature``, ``top_k``, ``top_p``, ``cfg_scale``: Python scalars or tensors [B] (one per
    request along dim 0, broadcast over its positions) or [].  ``top_k`` None/0 and ``top_p``
    None/1 disable the filter; ``cfg_scale`` applies only with ``uncond_logits`` (same shape as
    ``logits``)."""
    shape = logits.shape
    v = shape[-1]
    dev = logits.device
    x = logits.reshape(-1, v).float()
    rows = x.shape[0]
    if rows == 0:
        return torch.zeros(shape, dtype=torch.float32, device=dev)
    b = shape[0] if logits.dim() > 1 else 1
    per = rows // b

    if uncond_logits is not None:
        u = uncond_logits.reshape(-1, v).float()
        s = _per_row(1.0 if cfg_scale is None else cfg_scale, rows, per, torch.float32, dev)
        x = torch.where(torch.isnan(s)[:, None], x, cfg_combine(x, u, s))  # NaN: no guidance

    t = _per_row(temperature, rows, per, torch.float32, dev)
    t = torch.where(torch.isnan(t), 1.0, t)  # NaN temperature: 1.0
    greedy = t < GREEDY_TEMPERATURE
    x = x / torch.where(greedy, 1.0, t)[:, None]
    x = torch.where(x == 0, 0.0, x)  # -0.0 -> +0.0 (equal anyway; keeps keys canonical)

    neg_inf = torch.tensor(float("-inf"), device=dev)
    keep = torch.ones_like(x, dtype=torch.bool)

    # top-k: keep x >= k-th largest value (all ties at the threshold)
    if top_k is not None:
        k = _per_row(top_k, rows, per, torch.int64, dev)
        active = (k >= 1) & (k < v)
        desc = torch.sort(x, dim=-1, descending=True).values
        kth = desc.gather(-1, (k.clamp(1, v) - 1)[:, None])
        keep &= ~active[:, None] | (x >= kth)

    m = x.max(-1, keepdim=True).values
    no_mass = m[:, 0] == float("-inf")
    w = torch.exp(x - torch.where(no_mass[:, None], 0.0, m))  # float32, as every backend
    w = torch.where(keep, w, 0.0)

    # top-p: tau_p = the value at the first position (x descending) where the cumulative mass
    # reaches max(p * Z, 1e-30), p read as float32 (every backend's rule: a p at or below 0, or
    # one that rounds to 0 in float32, keeps the arg-max ties).  Cumulative sums in float64.
    if top_p is not None:
        p = _per_row(top_p, rows, per, torch.float32, dev).double()
        active = p < 1.0  # NaN top-p: inactive (keeps everything)
        xs, order = torch.sort(torch.where(keep, x, neg_inf), dim=-1, descending=True)
        cum = w.double().gather(-1, order).cumsum(-1)
        z = cum[:, -1:]
        reached = cum >= (p[:, None] * z).clamp_min(1e-30)
        first = torch.where(reached, torch.arange(v, device=dev), v).amin(-1).clamp_max(v - 1)
        tau_p = xs.gather(-1, first[:, None])
        keep &= ~active[:, None] | (x >= tau_p)
        w = torch.where(keep, w, 0.0)

    z = w.double().sum(-1, keepdim=True)
    probs = (w.double() / z).float()

    # greedy rows and rows without mass: one-hot of argmax l (ties -> lowest index; 0 if none)
    arg = x.argmax(-1)
    onehot = torch.nn.functional.one_hot(arg, v).float()
    probs = torch.where((greedy | no_mass)[:, None], onehot, probs)
    return probs.reshape(shape)
