"""VVS's token-level feature cache (``FeatureCache``): a preallocated store of the target's
hidden states by token position; its writes run the op ``feature_cache_write`` and its reads
``gather_rows`` (specops/ops/features.py declares both)."""

from __future__ import annotations

import numbers

import torch

from specops import reference
from specops._int_arg import check_int
from specops._nvtx import traced
from specops.ops import _common as c
from specops.ops._generated_features import feature_cache_write, gather_rows
from specops.ops.features import _FLOATS, _check_positions, _check_step, _step_parts

__all__ = ["FeatureCache"]


class FeatureCache:
    """VVS's token-level feature cache: a preallocated [B, capacity, H] store of the target's
    hidden states by token position, and a per-slot int32 step stamp (-1: never written).

    Verified step t (post verification included: the tokens accepted without verification
    earlier are re-run by this target pass)::

        cache.write(positions, hidden, step=t)        # [B, N], [B, N, H]; -1 positions skipped

    Skipped step (tokens accepted without verification have no features yet): read the most
    recent cached ones, of mixed staleness, without a host sync::

        pos = cache.recent_positions(verified_len, num_unverified, width)
        feats = cache.read(pos)                       # [B, width, H], -1 -> zeros
        staleness = cache.age(pos, step=t)            # [B, width] int32, -1 for -1 / unwritten

    ``step`` is an int or an integer tensor [] / [B] (device-side step counters for CUDA
    graphs).  Positions outside [0, capacity) raise in validation mode; in fast mode writes to
    them are dropped and reads give zeros.  A position repeated within one write row stores one
    of its rows (unspecified which; validation mode raises).  ``backend`` runs ``write`` (the op
    ``feature_cache_write``, listed beside ``FeatureCache`` in ``specops.backend_table()``) and
    ``read`` (``gather_rows``)."""

    def __init__(self, batch, capacity, hidden, dtype=torch.float32, device=None, backend="auto"):
        op = "specops.FeatureCache"
        if not isinstance(dtype, torch.dtype) or dtype not in _FLOATS:
            raise TypeError(f"{op}: dtype must be one of {_FLOATS}, got {dtype!r}")
        for name, v in (("batch", batch), ("capacity", capacity), ("hidden", hidden)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{op}: {name} must be an int >= 0, got {type(v).__name__} {v!r}")
            if v < 0:
                raise ValueError(f"{op}: {name} must be an int >= 0, got {v}")
        batch, capacity, hidden = int(batch), int(capacity), int(hidden)
        size = batch * capacity * hidden * torch.empty((), dtype=dtype).element_size()
        if size > 2**63 - 1:
            raise ValueError(
                f"{op}: batch * capacity * hidden must fit in one tensor (2**63 - 1 bytes), got "
                f"{batch} * {capacity} * {hidden} ({size} bytes)"
            )
        if not isinstance(backend, str) or backend not in c.BACKENDS:
            raise ValueError(f"{op}: backend must be one of {c.BACKENDS}, got {backend!r}")
        try:
            dev = torch.device(device) if device is not None else torch.device("cpu")
            torch.empty(0, device=dev)  # an unavailable device (no CUDA, index out of range)
        except (RuntimeError, TypeError, ValueError, AssertionError) as e:
            raise ValueError(
                f"{op}: device must be None or an available torch device, got {device!r} ({e})"
            ) from None
        self.features = torch.zeros(batch, capacity, hidden, dtype=dtype, device=dev)
        self.stamps = torch.full((batch, capacity), -1, dtype=torch.int32, device=dev)
        self.backend = backend

    @property
    def batch(self) -> int:
        return self.features.shape[0]

    @property
    def capacity(self) -> int:
        return self.features.shape[1]

    @property
    def hidden(self) -> int:
        return self.features.shape[2]

    @property
    def device(self) -> torch.device:
        return self.features.device

    @property
    def dtype(self) -> torch.dtype:
        return self.features.dtype

    def reset(self) -> None:
        """Forget everything (stamps -1, features 0)."""
        self.features.zero_()
        self.stamps.fill_(-1)

    def _check_positions(self, op, positions):
        _check_positions(op, positions, self.batch, self.capacity, self.device)

    def _step(self, op, step):
        _check_step(op, step, self.batch, self.device)
        return _step_parts(step)

    @traced("FeatureCache.write")
    def write(self, positions: torch.Tensor, feats: torch.Tensor, step) -> None:
        """store[b, positions[b, j]] = feats[b, j], stamped ``step``; -1 positions skipped."""
        feature_cache_write(
            self.features, self.stamps, positions, feats, step, backend=self.backend
        )

    def read(self, positions: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """[B, M, H]: the cached features at ``positions``; -1 (and never-written slots, which
        hold zeros) read as zeros.  ``out``: a preallocated [B, M, H] buffer."""
        self._check_positions("FeatureCache.read", positions)
        return gather_rows(self.features, positions, backend=self.backend, out=out)

    def age(self, positions: torch.Tensor, step) -> torch.Tensor:
        """[B, M] int32: step - the step each slot was last written; -1 for -1 positions and
        never-written slots."""
        op = "FeatureCache.age"
        self._check_positions(op, positions)
        step_t, step_i = self._step(op, step)
        return reference.feature_cache_age(
            self.stamps, positions, step_t if step_t is not None else step_i
        )

    def recent_positions(self, end, count, width: int) -> torch.Tensor:
        """[B, width] int32 on the cache's device: end - count, ..., end - 1 per request, then
        -1 (the ``count`` most recent positions before ``end``; ints or [] / [B] integer tensors
        ([1] broadcast) on the cache's device; ``width`` an int >= 0)."""
        op = "FeatureCache.recent_positions"
        width = check_int(f"specops.{op}", "width", width, 0)
        for name, v in (("end", end), ("count", count)):
            if isinstance(v, torch.Tensor):
                c.check_ids(op, name, v, ndim=(0, 1), device=self.device)
                if v.numel() not in (1, self.batch):
                    raise ValueError(
                        f"specops.{op}: {name} must have shape [], [1] or [{self.batch}] (the "
                        f"cache's batch), got {tuple(v.shape)}"
                    )
            elif isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(
                    f"specops.{op}: {name} must be an int or an integer tensor, got {v!r}"
                )
        pos = reference.recent_positions(end, count, width, device=self.device)
        return pos.expand(self.batch, width).contiguous()

    def __repr__(self) -> str:
        return (
            f"FeatureCache(batch={self.batch}, capacity={self.capacity}, hidden={self.hidden}, "
            f"dtype={self.dtype}, device={self.device})"
        )
