"""Philox-4x32-10 in plain PyTorch: the random stream every backend shares.

key = (seed lo, seed hi), counter = (draw, row, offset lo, offset hi),
u = ((word0 >> 9) + 0.5) * 2^-23 in [2^-24, 1 - 2^-24] as float32
(see csrc/include/specops/philox.h).
All arithmetic is on int64 tensors holding uint32 values, so it runs on any device.
"""

from __future__ import annotations

import torch

__all__ = ["philox4x32_10", "philox_uniform", "row_uniforms"]

_M32 = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85


def _mulhilo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of a * b for a constant a < 2^32 and b holding uint32 values,
    without int64 overflow: split b into 16-bit halves."""
    p_lo = a * (b & 0xFFFF)  # < 2^48
    p_hi = a * (b >> 16)  # < 2^48
    t = (p_lo >> 16) + p_hi  # full product = t * 2^16 + (p_lo & 0xFFFF)
    lo = ((t & 0xFFFF) << 16) | (p_lo & 0xFFFF)
    hi = t >> 16
    return hi, lo


def philox4x32_10(c0, c1, c2, c3, k0, k1) -> tuple[torch.Tensor, ...]:
    """Philox-4x32-10 on broadcastable int64 tensors of uint32 values."""
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) & _M32 for c in (c0, c1, c2, c3))
    k0 = torch.as_tensor(k0, dtype=torch.int64) & _M32
    k1 = torch.as_tensor(k1, dtype=torch.int64) & _M32
    for _ in range(10):
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + _W0) & _M32
        k1 = (k1 + _W1) & _M32
    return c0, c1, c2, c3


def philox_uniform(seed, offset, row, draw) -> torch.Tensor:
    """float32 uniforms in (0, 1) for broadcastable int64 (seed, offset, row, draw)."""
    seed = torch.as_tensor(seed, dtype=torch.int64)
    offset = torch.as_tensor(offset, dtype=torch.int64, device=seed.device)
    row = torch.as_tensor(row, dtype=torch.int64, device=seed.device)
    draw = torch.as_tensor(draw, dtype=torch.int64, device=seed.device)
    x0, _, _, _ = philox4x32_10(
        draw, row, offset & _M32, (offset >> 32) & _M32, seed & _M32, (seed >> 32) & _M32
    )
    return ((x0 >> 9).to(torch.float32) + 0.5) * (2.0**-23)


def row_uniforms(
    seed, offset, rows: int, draws: int, *, rows_per_seed: int = 1, device=None
) -> torch.Tensor:
    """[rows, draws] uniforms of the shared stream: row r uses seed[r // rows_per_seed]
    (``seed`` a Python int, a 0-d tensor or a [num_seeds] tensor)."""
    seed = torch.as_tensor(seed, dtype=torch.int64, device=device)
    dev = seed.device
    r = torch.arange(rows, dtype=torch.int64, device=dev)
    if seed.dim() == 0:
        s = seed.expand(rows)
    else:
        s = seed.reshape(-1)[r // max(rows_per_seed, 1)]
    offset = torch.as_tensor(offset, dtype=torch.int64, device=dev).reshape(())
    d = torch.arange(draws, dtype=torch.int64, device=dev)
    return philox_uniform(s[:, None], offset, r[:, None], d[None, :])
