"""Seeds and offsets: the ops take each as a Python int or an int64 tensor; here they are
normalised to what the bindings and the reference read."""

from __future__ import annotations

import torch

from specops.ops.checks import _shape, check_tensor


def rng_args(op: str, seed, offset, device: torch.device, num_seeds_max: int):
    """Normalise ``seed``/``offset`` (Python ints or int64 tensors) to
    (seed_tensor or None, seed_int, offset_tensor or None, offset_int).
    A seed tensor is [] or [B] (one per request); an offset tensor is [] or [1]."""
    seed_t = offset_t = None
    seed_i = offset_i = 0
    if isinstance(seed, torch.Tensor):
        check_tensor(op, "seed", seed, ndim=(0, 1), dtypes=(torch.int64,), device=device)
        if seed.dim() == 1 and seed.shape[0] not in (1, num_seeds_max):
            raise ValueError(
                f"specops.{op}: seed must have shape [] or [{num_seeds_max}] (one per request), "
                f"got {_shape(seed)}"
            )
        seed_t = seed if seed.dim() == 1 else seed.reshape(1)
    elif isinstance(seed, int):
        seed_i = _int64(op, "seed", seed)
    else:
        raise TypeError(f"specops.{op}: seed must be an int or an int64 tensor, got {type(seed)}")
    if isinstance(offset, torch.Tensor):
        check_tensor(op, "offset", offset, ndim=(0, 1), dtypes=(torch.int64,), device=device)
        if offset.numel() != 1:
            raise ValueError(f"specops.{op}: offset must have one element, got {_shape(offset)}")
        offset_t = offset if offset.dim() == 1 else offset.reshape(1)
    elif isinstance(offset, int):
        offset_i = _int64(op, "offset", offset)
    else:
        raise TypeError(
            f"specops.{op}: offset must be an int or an int64 tensor, got {type(offset)}"
        )
    return seed_t, seed_i, offset_t, offset_i


def _int64(op: str, name: str, value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise ValueError(
            f"specops.{op}: {name} must fit in int64 ([-2**63, 2**63)), got {value} "
            "(Philox reads it as its 64-bit two's complement)"
        )
    return value


def seed_for_reference(seed_t, seed_i: int, device) -> torch.Tensor:
    return seed_t if seed_t is not None else torch.tensor(seed_i, dtype=torch.int64, device=device)


def offset_for_reference(offset_t, offset_i: int, device) -> torch.Tensor:
    return (
        offset_t.reshape(())
        if offset_t is not None
        else torch.tensor(offset_i, dtype=torch.int64, device=device)
    )


def fast_rng(seed, offset, requests: int):
    """(seed_t, seed_i, offset_t, offset_i) as ``rng_args`` gives them, for the seeds and offsets
    the binding checks as ``rng_args`` would (an int; a seed tensor [1] or [requests]; an offset
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
        return st, si, None, offset
    if to is torch.Tensor and offset.dim() <= 1:
        return st, si, offset, 0
    return None
