"""Seeds and offsets: the ops take each as a Python int or an int64 tensor; here they are
normalised to what the bindings and the reference read."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.ops.checks import _shape, check_tensor


class Rng(NamedTuple):
    """The random stream of one call, as the kernels take it: a seed tensor [1] / [B] (one per
    request) or None with the Python seed, an offset tensor [1] or None with the Python offset.
    Philox key = seed, counter = (draw, row, offset lo, offset hi) (specops/reference/philox.py)."""

    seed: torch.Tensor | None
    seed_value: int
    offset: torch.Tensor | None
    offset_value: int

    @staticmethod
    def of(seed, offset) -> Rng:
        """From checked ``seed``/``offset`` (``check_rng``)."""
        if isinstance(seed, torch.Tensor):
            st, si = (seed if seed.dim() == 1 else seed.reshape(1)), 0
        else:
            st, si = None, seed
        if isinstance(offset, torch.Tensor):
            return Rng(st, si, offset if offset.dim() == 1 else offset.reshape(1), 0)
        return Rng(st, si, None, offset)

    def reference(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(seed [] / [B], offset []) int64 tensors, as ``specops.reference`` takes them."""
        i64 = torch.int64
        seed = (
            self.seed
            if self.seed is not None
            else torch.tensor(self.seed_value, dtype=i64, device=device)
        )
        if self.offset is not None:
            return seed, self.offset.reshape(())
        return seed, torch.tensor(self.offset_value, dtype=i64, device=device)


def check_rng(op: str, seed, offset, device: torch.device, num_seeds_max: int) -> None:
    """``seed``: a Python int or an int64 tensor [] / [1] / [num_seeds_max] (one per request);
    ``offset``: a Python int or an int64 tensor of one element; Python ints fit int64."""
    if isinstance(seed, torch.Tensor):
        check_tensor(op, "seed", seed, ndim=(0, 1), dtypes=(torch.int64,), device=device)
        if seed.dim() == 1 and seed.shape[0] not in (1, num_seeds_max):
            raise ValueError(
                f"specops.{op}: seed must have shape [] or [{num_seeds_max}] (one per request), "
                f"got {_shape(seed)}"
            )
    elif isinstance(seed, int):
        _int64(op, "seed", seed)
    else:
        raise TypeError(f"specops.{op}: seed must be an int or an int64 tensor, got {type(seed)}")
    if isinstance(offset, torch.Tensor):
        check_tensor(op, "offset", offset, ndim=(0, 1), dtypes=(torch.int64,), device=device)
        if offset.numel() != 1:
            raise ValueError(f"specops.{op}: offset must have one element, got {_shape(offset)}")
    elif isinstance(offset, int):
        _int64(op, "offset", offset)
    else:
        raise TypeError(
            f"specops.{op}: offset must be an int or an int64 tensor, got {type(offset)}"
        )


def _int64(op: str, name: str, value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise ValueError(
            f"specops.{op}: {name} must fit in int64 ([-2**63, 2**63)), got {value} "
            "(Philox reads it as its 64-bit two's complement)"
        )
    return value


def fast_rng(seed, offset, requests: int):
    """The fields of ``Rng.of(seed, offset)``, for the seeds and offsets the binding checks as
    ``check_rng`` would (an int; a seed tensor [1] or [requests]; an offset
    tensor of rank <= 1), else None."""
    ts = type(seed)
    if ts is int:
        st, si = None, seed
    elif ts is torch.Tensor and seed.dim() == 1 and seed.shape[0] in (1, requests):
        st, si = seed, 0
    else:
        return None
    to = type(offset)
    if to is int:
        return st, si, None, offset  # (a plain tuple: a NamedTuple costs 0.2 us to make)
    if to is torch.Tensor and offset.dim() <= 1:
        return st, si, offset, 0
    return None
