"""Checks that a buffer an op writes does not overlap what it reads (or itself): byte spans of
tensors compared on the host, no data read.  The compiled bindings repeat them
(csrc/tensor_arg.cpp: ArgCheck::output, ArgCheck::disjoint)."""

from __future__ import annotations

import torch

__all__ = ["check_no_alias", "check_writable", "check_written_apart"]

_compiling = torch.compiler.is_compiling


def _span(t: torch.Tensor):
    """(device, first byte, one past the last byte) that ``t`` spans, or None when it is empty."""
    if t.numel() == 0:
        return None
    es, lo = t.element_size(), t.data_ptr()
    hi = lo + es
    for n, st in zip(t.shape, t.stride()):
        d = (n - 1) * st * es
        if d < 0:
            lo += d
        else:
            hi += d
    return t.device, lo, hi


def check_no_alias(op: str, outs, others) -> None:
    """A buffer an op writes (``outs``: (name, tensor) pairs) shares no byte with the op's other
    tensors (``others``, and the other outputs): a clear error on every backend, which the
    compiled bindings repeat (csrc/tensor_arg.cpp, ArgCheck::output).  Not while torch.compile
    traces: fake tensors have no addresses (and functionalization owns the buffers)."""
    _check_disjoint(op, outs, others, outs_apart=True)


def check_written_apart(op: str, written, read) -> None:
    """Tensors an op writes in place (``written``: (name, tensor) pairs, e.g. caches) share no
    byte with the tensors it reads (``read``); the written ones may share with each other (a
    stacked K/V buffer).  The compiled bindings repeat it (ArgCheck::disjoint)."""
    _check_disjoint(op, written, read, outs_apart=False)


def _check_disjoint(op: str, outs, others, *, outs_apart: bool) -> None:
    if _compiling():
        return
    seen = []
    for n, t in others:
        if isinstance(t, torch.Tensor) and (s := _span(t)) is not None:
            seen.append((n, s))
    for name, t in outs:
        s = _span(t)
        if s is None:
            continue
        for other, (dev, lo, hi) in seen:
            if dev == s[0] and lo < s[2] and s[1] < hi:
                raise ValueError(
                    f"specops.{op}: {name} shares memory with {other} (an output must not alias "
                    "the op's other tensors)"
                )
        if outs_apart:
            seen.append((name, s))


def check_writable(op: str, name: str, t: torch.Tensor) -> None:
    """A tensor an op writes must not hold two elements at one address (an expanded view)."""
    if t.numel() and any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride())):
        raise ValueError(
            f"specops.{op}: {name} has overlapping elements (shape {tuple(t.shape)}, strides "
            f"{t.stride()}: an expanded view?) and cannot be written"
        )
