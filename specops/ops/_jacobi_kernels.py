"""Launch the compiled verify_jacobi kernels (C++ CPU twin / CUDA) from validated arguments.

Inputs arrive checked by specops/ops/verify.py; here they are only made kernel-ready: float32
probability rows with a contiguous last dim (other dtypes converted once), int32 tree arrays and
neighbours, contiguous uniforms.  Token ids are read as int32 or int64 in place.

CUDA tree mode needs a per-request workspace (allocated here per call, no kernel) and completion
counters that must be zero before the launch; the kernel leaves them zero, so one zeroed buffer
per (device, stream) is kept and reused (also by CUDA graph replays)."""

from __future__ import annotations

import torch

from specops import _build
from specops.ops import _common as c
from specops.ops._verify_kernels import _f32_rows, _rng, _rows

_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def _counters(device: torch.device, stream: int, b: int) -> torch.Tensor:
    key = (device.index if device.index is not None else torch.cuda.current_device(), stream)
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
):
    """-> (num_accepted [B], next_window [B, L], first_reject [B], candidates [B, L, k or 0],
    path [B, L or 0]), int32.  ``emulate_cuda`` (tests, cpu backend): tree mode done the CUDA
    kernel's way (speculative per-node continuation, then the assembly)."""
    b, L, v = target.shape
    dev = target.device
    target = _f32_rows(target)
    draft = _f32_rows(draft) if draft is not None else None
    window = window if window.stride(-1) == 1 else window.contiguous()
    tree = fc is not None
    if tree:
        fc = fc.to(torch.int32).contiguous()
        ns = ns.to(torch.int32).contiguous()
    nb = c.int32_ids(nb)  # LANTERN neighbour ids
    uniforms = uniforms.contiguous() if uniforms is not None else None
    i32 = torch.int32
    num = torch.empty(b, dtype=i32, device=dev)
    nw = torch.empty(b, L, dtype=i32, device=dev)
    first = torch.empty(b, dtype=i32, device=dev)
    cands = torch.empty(b, L, k if k > 1 else 0, dtype=i32, device=dev)
    path = torch.empty(b, L if tree else 0, dtype=i32, device=dev)
    d = _rows(target, draft, window, "l")
    d.update(
        first_child=c.ptr(fc) if tree else 0,
        next_sibling=c.ptr(ns) if tree else 0,
        tree_sb=(L if fc.shape[0] > 1 else 0) if tree else 0,
        batch=b,
        len=L,
        vocab=v,
        cont=bool(cont),
        num_candidates=int(k),
        neighbors=c.ptr(nb),
        neighbors_k=nb.shape[1] if nb is not None else 0,
        delta=float(delta),
        out_num_accepted=num.data_ptr(),
        out_next_window=nw.data_ptr(),
        out_first_reject=first.data_ptr(),
        out_candidates=cands.data_ptr() if k > 1 else 0,
        out_path=path.data_ptr() if tree else 0,
        workspace=0,
        ws_stride=0,
        counters=0,
        emulate_cuda=bool(emulate_cuda),
    )
    _rng(d, seed_t, seed_i, off_t, off_i, uniforms, b)
    if b > 0:
        if be == "cuda":
            stream = c.stream_of(dev)
            if tree:
                ws_stride = _build._C.jacobi_ws_size(L, k)
                ws = torch.empty(b, ws_stride, dtype=i32, device=dev)
                d.update(
                    workspace=ws.data_ptr(),
                    ws_stride=ws_stride,
                    counters=_counters(dev, stream, b).data_ptr(),
                )
            _build._C.verify_jacobi_cuda(d, stream)
        else:
            _build._C.verify_jacobi_cpu(d)
    return num, nw, first, cands, path
