"""The ops' argument checks, shared by specops.ops and the engine adapters (specops.compat):
each raises a TypeError / ValueError that names the op, the argument and what was expected.
Shape, dtype and device checks always run (no sync); value checks (``check_values_*``) read the
data and run only in validation mode (``specops.validation()``)."""

from __future__ import annotations

import torch

from specops.ops._backends import _META, validating
from specops.ops._overlap import (  # noqa: F401 (part of this module's surface)
    check_no_alias,
    check_writable,
    check_written_apart,
)

_INT_DTYPES = (torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _shape(t) -> tuple:
    return tuple(t.shape)


def check_tensor(
    op: str, name: str, t, *, ndim=None, dtypes=None, device=None, shape=None, backend=None
):
    """Raise TypeError/ValueError naming the argument when ``t`` is not as expected.
    ``shape`` entries may be None (any size); ``backend`` (the one asked for) is named when
    ``t`` is a meta tensor.  The passing path is a handful of attribute reads (it runs several
    times per op call)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"specops.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_meta:
        asked = f" (backend {backend!r} was asked for)" if backend is not None else ""
        raise ValueError(f"specops.{op}: {name} is a meta tensor{asked} {_META}")
    if ndim is not None:
        nd = t.dim()
        if (nd != ndim) if isinstance(ndim, int) else (nd not in ndim):
            ndims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
            want = " or ".join(str(n) for n in ndims)
            raise ValueError(
                f"specops.{op}: {name} must have {want} dimensions, got shape {_shape(t)}"
            )
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"specops.{op}: {name} must have dtype in ({names}), got {t.dtype}")
    # a torch.device compares directly; a string is converted only when that comparison fails
    if device is not None and t.device != device and t.device != torch.device(device):
        raise ValueError(
            f"specops.{op}: {name} is on {t.device} but the other inputs are on {device}"
        )
    if shape is not None:
        ts = t.shape
        if ts != shape and (
            len(ts) != len(shape) or any(s is not None and s != d for s, d in zip(shape, ts))
        ):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"specops.{op}: {name} must have shape {want}, got {_shape(t)}")
    return t


def check_probs(op: str, name: str, t, **kw):
    return check_tensor(op, name, t, dtypes=_FLOAT_DTYPES, **kw)


def check_ids(op: str, name: str, t, **kw):
    return check_tensor(op, name, t, dtypes=_INT_DTYPES, **kw)


def check_values_probs(op: str, name: str, t: torch.Tensor) -> None:
    """Validation mode: finite and non-negative."""
    if not validating():
        return
    if not torch.isfinite(t).all():
        raise ValueError(f"specops.{op}: {name} has non-finite values")
    if (t < 0).any():
        raise ValueError(f"specops.{op}: {name} has negative probabilities")


def check_values_ids(op: str, name: str, t: torch.Tensor, vocab: int, *, allow_pad=True) -> None:
    """Validation mode: ids in [0, vocab) (or -1 padding)."""
    if not validating() or t.numel() == 0:
        return
    lo = -1 if allow_pad else 0
    if (t < lo).any() or (t >= vocab).any():
        bad = t[(t < lo) | (t >= vocab)][0]
        raise ValueError(f"specops.{op}: {name} holds id {int(bad)} outside [{lo}, {vocab})")


def check_out(op: str, out, specs, contiguous=None) -> tuple | None:
    """``out=`` of an op returning several tensors: None, or a tuple / NamedTuple of tensors
    matching ``specs`` [(name, shape, dtype, device)], each contiguous (the kernels write it in
    place; a CUDA graph can own it; ``contiguous[i]`` False: any layout without overlapping
    elements) and free of overlapping elements."""
    if out is None:
        return None
    if not isinstance(out, (tuple, list)) or len(out) != len(specs):
        names = ", ".join(s[0] for s in specs)
        raise TypeError(f"specops.{op}: out must be a tuple of {len(specs)} tensors ({names})")
    for i, (t, (name, shape, dtype, device)) in enumerate(zip(out, specs)):
        label = "out" if len(specs) == 1 else f"out.{name}"  # a single output: out= itself
        check_tensor(op, label, t, dtypes=(dtype,), device=device, shape=shape)
        if contiguous is not None and not contiguous[i]:
            check_writable(op, label, t)
        elif not t.is_contiguous():
            raise ValueError(
                f"specops.{op}: {label} must be contiguous (written in place), got strides "
                f"{t.stride()}"
            )
    return tuple(out)
