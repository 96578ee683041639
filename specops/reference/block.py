"""Block verification of a draft chain (Sun et al., "Block Verification Accelerates Speculative
Decoding", arXiv 2403.10444, Algorithm 2): ``verify_chain(..., block=True)``.

Token-wise verification stops at the first rejected draft.  Block verification decides the
accepted prefix jointly: lossless as token-wise, and never fewer accepted tokens on average.
The accepted length is tau = max{i in 1..n : u_{i-1} < h_i}, else 0 (u_j = draw j of the
request's row; h_i from the running weights w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1) and the
residual masses), then the final token from the bonus row or the residual with draw K.  With
n = 1 the rule is token-wise's; the draws are token-wise's (SGLang's coin layout too).

The rule in full, with every rounding: docs/reference_semantics.md, "Block verification".
"""

from __future__ import annotations

import torch


def _weights(px: torch.Tensor, qx: torch.Tensor) -> torch.Tensor:
    """w [B, K + 1] (float64, w[:, 0] = 1) from p_i(x_i), q_i(x_i) [B, K] (float32)."""
    b, k = px.shape
    w = [torch.ones(b, dtype=torch.float64, device=px.device)]
    pd, qd = px.double(), qx.double()
    for i in range(k):
        prev = w[-1]
        ratio = torch.where(qd[:, i] > 0, prev * pd[:, i] / qd[:, i].clamp_min(1e-300), 1.0)
        ratio = torch.where((prev > 0) & (pd[:, i] > 0), ratio, 0.0)
        w.append(ratio.clamp(max=1.0))
    return torch.stack(w, 1)


def block_residual(p: torch.Tensor, q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """max(float32(w * p - q), 0) per row: p, q [R, V] float32 (through ``mass``), w [R]
    float64."""
    return (w[:, None] * p.double() - q.double()).float().clamp_min(0)


def block_accept(p, q_rows, x, n_eff, u):
    """(tau [B], dist [B, V]): the accepted prefix length and the row the final token is drawn
    from.  p [B, K+1, V] and q_rows [B, K, V] float32 through ``mass`` (q one-hot rows for
    deterministic drafts), x [B, K], n_eff [B] valid drafts, u [B, K+1]."""
    b, k1, v = p.shape
    k = k1 - 1
    dev = p.device
    rows = torch.arange(b, device=dev)
    if k == 0:
        return torch.zeros(b, dtype=torch.long, device=dev), p[:, 0]
    xc = x.clamp(0, v - 1)
    ok = (x >= 0) & (x < v)
    px = torch.where(ok, p[:, :k].gather(-1, xc[:, :, None])[..., 0], 0.0)
    qx = torch.where(ok, q_rows.gather(-1, xc[:, :, None])[..., 0], 0.0)
    w = _weights(px, qx)  # [B, K + 1]
    # r_i for i = 0..K-1: weight w_i, rows p_{i+1}, q_{i+1} (tensor rows i)
    r = block_residual(p[:, :k].reshape(b * k, v), q_rows.reshape(b * k, v), w[:, :k].reshape(-1))
    r = r.reshape(b, k, v)
    z = r.double().sum(-1)  # [B, K]: Z_0..Z_{K-1}
    i = torch.arange(1, k + 1, device=dev)  # positions 1..K
    den = z[:, 1:] + (1.0 - w[:, 1:k])  # h_i for i = 1..K-1
    h_mid = torch.where(den > 0, z[:, 1:] / torch.where(den > 0, den, 1.0), 1.0)
    h = torch.cat([h_mid, w[:, k : k + 1]], 1)  # [B, K]: h_1..h_K (h_K valid where n = K)
    h = torch.where(i[None, :] == n_eff[:, None], w[:, 1:], h)  # h_n = w_n
    passed = (u[:, :k].double() < h) & (i[None, :] <= n_eff[:, None])
    tau = torch.where(passed, i[None, :], 0).amax(-1)
    at = tau.clamp(max=k - 1)
    r_tau = r[rows, at]
    p_tau = p[rows, at]
    s = r_tau.double().sum(-1, keepdim=True)
    norm = torch.where(s > 0, (r_tau.double() * (1.0 / s.clamp_min(1e-300))).float(), p_tau)
    dist = torch.where((tau < n_eff)[:, None], norm, p[rows, n_eff])
    return tau, dist
