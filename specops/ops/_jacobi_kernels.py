"""Launch the compiled verify_jacobi kernels (C++ CPU twin / CUDA) from validated arguments.

Inputs arrive checked by specops/ops/verify.py; here they are only made kernel-ready: float32
probability rows with a contiguous last dim (other dtypes converted once), int32 tree arrays and
neighbours.  Token ids are read as int32 or int64 in place, seeds and uniforms with their strides
(the binding reads every tensor's layout, csrc/tensor_arg.h).

CUDA tree mode needs a per-request workspace (allocated here per call, no kernel) and completion
counters that must be zero before the launch; the kernel leaves them zero, so one zeroed buffer
per (device, stream) is kept and reused (also by CUDA graph replays)."""

from __future__ import annotations

import torch

from specops.ops import _common as c
from specops.ops._verify_kernels import _f32_rows, _ids, _tree

_COUNTERS: dict[tuple[str, int, int], torch.Tensor] = {}


def _counters(device: torch.device, stream: int, b: int) -> torch.Tensor:
    index = -1  # CPU tensors (backend "cuda_sim")
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
    key = (device.type, index, stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < b:
        buf = torch.zeros(max(b, 64), dtype=torch.int32, device=device)
        _COUNTERS[key] = buf
    return buf


def verify_jacobi(
    be,
    target,
    window,
    draft,
    fc,
    ns,
    cont,
    k,
    seed_t,
    seed_i,
    off_t,
    off_i,
    nb,
    delta,
    uniforms,
    *,
    emulate_cuda=False,
    out=None,
):
    """-> (num_accepted [B], next_window [B, L], first_reject [B], candidates [B, L, k or 0],
    path [B, L or 0]), int32.  ``emulate_cuda`` (tests, cpu backend): tree mode done the CUDA
    kernel's way (speculative per-node continuation, then the assembly)."""
    b, L, v = target.shape
    dev = target.device
    tree = fc is not None
    counters = None
    if be in ("cuda", "cuda_sim") and tree:  # the CUDA tree mode's completion counters
        counters = _counters(dev, c.stream_of(dev) if be == "cuda" else 0, b)
    res = c.launch(
        be, "verify_jacobi", _f32_rows(target),
        _f32_rows(draft) if draft is not None else None, _ids(window),
        _tree(fc) if tree else None, _tree(ns) if tree else None, bool(cont), int(k),
        c.int32_ids(nb), float(delta), seed_t, seed_i, off_t, off_i, uniforms,
        *(out or (None,) * 5), None, counters, bool(emulate_cuda),
    )  # fmt: skip
    return jacobi_outputs(res, target, k, tree, out)


def jacobi_outputs(res: tuple, target, k: int, tree: bool, out=None) -> tuple:
    """The binding's outputs (num, next_window, first_reject[, candidates][, path]) as the op's
    five, the unused ones empty ([B, L, 0] and [B, 0]) or the caller's."""
    if out is not None:
        return tuple(out)
    b, L = target.shape[0], target.shape[1]
    i32 = torch.int32
    cands = res[3] if k > 1 else target.new_empty((b, L, 0), dtype=i32)
    path = res[-1] if tree else target.new_empty((b, 0), dtype=i32)
    return res[0], res[1], res[2], cands, path
