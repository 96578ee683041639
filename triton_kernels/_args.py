"""The one door from the Python layer into a Triton kernel (DESIGN.md, Rules: Layout).

Every launcher in specops.triton_kernels launches through ``launch``
(tests/test_triton_args_launch.py fails on any other ``kernel[grid](...)`` in the package).  A
tensor argument is either wrapped in ``Strided`` (the launcher passes the strides the kernel
indexes it with, so any view is read as it is) or passed bare, which ``launch`` requires to be
contiguous (a ValueError naming the kernel and the argument otherwise).

The helpers below are the normalisations the launchers share: 1-D vectors read with a stride,
rows with a unit last stride, and out buffers (in place, through a temporary, or rejected when
elements share memory).  The rules in full: docs/triton_kernels.md, "Launching".
"""

from __future__ import annotations

import torch

__all__ = [
    "Strided",
    "launch",
    "vec",
    "unit_rows",
    "check_unit_last",
    "overlapping",
    "out_buffer",
]


class Strided:
    """A tensor argument the kernel reads through strides passed next to it."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor):
        self.t = t


def launch(kernel, grid, *args, **meta) -> None:
    """``kernel[grid](*args, **meta)`` after the layout check: bare tensors must be contiguous
    (``Strided`` ones are unwrapped), inside tuple arguments too."""
    kernel[grid](*(_unwrap(kernel, i, a) for i, a in enumerate(args)), **meta)


def _unwrap(kernel, i: int, a, field: str = ""):
    """Argument ``i`` as the kernel takes it; a tuple argument (``rng``) element by element."""
    if type(a) is Strided:
        return a.t
    if type(a) is tuple:
        return tuple(_unwrap(kernel, i, e, f"{field}[{j}]") for j, e in enumerate(a))
    if isinstance(a, torch.Tensor) and not a.is_contiguous():
        raise ValueError(
            f"specops.triton_kernels: {_arg_name(kernel, i)}{field} of {_kernel_name(kernel)} "
            f"is a non-contiguous tensor (shape {tuple(a.shape)}, strides {a.stride()}) passed "
            "without its strides: the launcher must normalise it or pass it as Strided"
        )
    return a


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)
    return getattr(fn, "__name__", repr(kernel))


def _arg_name(kernel, i: int) -> str:
    names = getattr(kernel, "arg_names", None)
    return f"argument {names[i]!r}" if names and i < len(names) else f"argument {i}"


def vec(t: torch.Tensor | None, dummy: torch.Tensor) -> tuple[Strided, int]:
    """A [] or [n] tensor (or None) as (pointer argument, element stride).  A one-element tensor
    is read at its own address (stride 0); None gives ``dummy`` (never read) and stride 0."""
    if t is None:
        return Strided(dummy), 0
    if t.dim() == 0 or t.numel() == 1:
        return Strided(t), 0
    if t.dim() != 1:
        t = t.reshape(-1)  # a view when the flat elements are equally spaced, else a copy
    return Strided(t), t.stride(0)


def cache_pages(k_cache: torch.Tensor, cache_seqlens: torch.Tensor, block_table):
    """A KV cache's geometry as the kernels take it -> (num_pages, page, capacity, block table,
    its stride over requests, over pages): paged [P, page, ...] with ``block_table`` [B, pages],
    or [B, S, ...] (one page of size 1 per position; the table argument is never read)."""
    if block_table is not None:
        page = k_cache.shape[1]
        return (k_cache.shape[0], page, block_table.shape[1] * page, Strided(block_table),
                block_table.stride(0), block_table.stride(1))  # fmt: skip
    return 1, 1, k_cache.shape[1], Strided(cache_seqlens), 0, 0


def unit_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` when its last dim has unit stride (or size <= 1), else a contiguous copy: for rows
    the kernel reads with a row stride and a unit column stride."""
    if t.stride(-1) == 1 or t.shape[-1] <= 1:
        return t
    return t.contiguous()


def check_unit_last(op: str, name: str, t: torch.Tensor) -> None:
    """Out buffers written with their strides but a unit last stride."""
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(
            f"specops.{op}: {name} must have a contiguous last dim (stride 1), got strides "
            f"{t.stride()}"
        )


def overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` surely share memory (a stride-0 dim of size > 1, as torch's
    own internal-overlap test); other layouts are written through a temporary."""
    return any(st == 0 and sz > 1 for sz, st in zip(t.shape, t.stride()))


def out_buffer(op: str, name: str, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(contiguous buffer the kernel writes, ``out`` to copy it back into or None).  An ``out``
    whose elements overlap cannot hold a result: ValueError."""
    if out.is_contiguous():
        return out, None
    if overlapping(out):
        raise ValueError(
            f"specops.{op}: {name} has overlapping elements (shape {tuple(out.shape)}, strides "
            f"{out.stride()}: an expanded view?) and cannot be written"
        )
    return torch.empty(out.shape, dtype=out.dtype, device=out.device), out
