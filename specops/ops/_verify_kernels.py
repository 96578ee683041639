"""Launch the compiled verification kernels (C++ CPU twin / CUDA) from validated arguments.

Inputs arrive checked by specops/ops/verify.py; here they are only made kernel-ready: float32
probability rows with a contiguous last dim (other float dtypes are converted once), int32 tree
arrays and neighbours, int64 counts.  Token ids are read as int32 or int64 in place.  The
bindings take the tensors themselves (csrc/tensor_arg.h): they read sizes and strides from
them, honour the strides of seeds and uniforms, and reject with a ValueError any layout their
kernel cannot read, so nothing here can hand a kernel a pointer without its layout."""

from __future__ import annotations

import torch

from specops import _build
from specops.ops import _common as c


def _f32_rows(t: torch.Tensor) -> torch.Tensor:
    if t.dtype != torch.float32 or t.stride(-1) != 1:
        t = t.float().contiguous()
    return t


def _ids(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _tree(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 and t.is_contiguous() else t.to(torch.int32).contiguous()


def verify_chain(
    be, target, tokens, draft, num_draft, seed_t, seed_i, off_t, off_i, nb, delta, greedy, uniforms,
    out=None,
):  # fmt: skip
    b, k1, v = target.shape
    dev = target.device
    out_tokens, out_num = c.outputs(out, dev, (b, k1), (b,))
    if b > 0:
        c.launch(
            be, "verify_chain", dev, _f32_rows(target),
            _f32_rows(draft) if draft is not None else None, _ids(tokens),
            num_draft.to(torch.int64).contiguous() if num_draft is not None else None,
            c.int32_ids(nb), float(delta), bool(greedy), seed_t, seed_i, off_t, off_i, uniforms,
            out_tokens, out_num,
        )  # fmt: skip
    return out_tokens, out_num


def verify_tree(
    be,
    target,
    first_child,
    next_sibling,
    width,
    tokens,
    draft,
    wor,
    seed_t,
    seed_i,
    off_t,
    off_i,
    nb,
    delta,
    greedy,
    uniforms,
    out=None,
):
    b, n, v = target.shape
    dev = target.device
    # Workspaces: the current node's residual target row (and renormalised draft row without
    # replacement) after a rejected child; rewritten in place, never read before written.
    ws_p = None if greedy else torch.empty(b, v, dtype=torch.float32, device=dev)
    ws_q = torch.empty(b, v, dtype=torch.float32, device=dev) if wor and draft is not None else None
    out_path, out_tokens, out_num = c.outputs(out, dev, (b, width), (b, width), (b,))
    if b > 0:
        c.launch(
            be, "verify_tree", dev, _f32_rows(target),
            _f32_rows(draft) if draft is not None else None, _ids(tokens), _tree(first_child),
            _tree(next_sibling), width, bool(wor), c.int32_ids(nb), float(delta), bool(greedy),
            seed_t, seed_i, off_t, off_i, uniforms, ws_p, ws_q, out_path, out_tokens, out_num,
        )  # fmt: skip
    return out_path, out_tokens, out_num


def sample_without_replacement(be, probs, k, seed_t, seed_i, off_t, off_i, uniforms, out=None):
    v = probs.shape[-1]
    lead = tuple(probs.shape[:-1])
    p = _f32_rows(probs.reshape(-1, v))
    rows = p.shape[0]
    given = out[0] if out is not None else None  # [..., k] contiguous (checked by the caller)
    out = (
        given.view(rows, k)
        if given is not None
        else torch.empty(rows, k, dtype=torch.int32, device=probs.device)
    )
    if rows > 0:
        u = uniforms.reshape(rows, v) if uniforms is not None else None
        c.launch(be, "sample_without_replacement", probs.device, p, k, seed_t, seed_i, off_t, off_i,
             u, out)  # fmt: skip
    return given if given is not None else out.reshape(*lead, k)


def path_acceptance(be, target, draft, parents, num_paths, tokens, out=None):
    b, n, v = target.shape
    dev = target.device
    kappa, exp_len = c.outputs(out, dev, (b, num_paths), (b, num_paths), dtype=torch.float32)
    # CUDA: trees too large for shared memory keep their per-node state in a global workspace
    ws = None
    ws_row = _build._C.path_acceptance_ws_size(n) if be in ("cuda", "cuda_sim") else 0
    if ws_row:
        ws = torch.empty(b * ws_row, dtype=torch.uint8, device=dev)
    if b > 0:
        c.launch(
            be, "path_acceptance", dev, _f32_rows(target),
            _f32_rows(draft) if draft is not None else None, _ids(tokens),
            _tree(parents.to(dev)), num_paths, ws, kappa, exp_len,
        )  # fmt: skip
    return kappa, exp_len
