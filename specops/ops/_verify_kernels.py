"""Launch the compiled verification kernels (C++ CPU twin / CUDA) from validated arguments.

Inputs arrive checked by specops/ops/verify.py; here they are only made kernel-ready: float32
probability rows with a contiguous last dim (other float dtypes are converted once), int32 tree
arrays and neighbours, int64 counts.  Token ids are read as int32 or int64 in place.  The
bindings take the tensors themselves (csrc/tensor_arg.h): they read sizes and strides from
them, honour the strides of seeds and uniforms, and reject with a ValueError any layout their
kernel cannot read, so nothing here can hand a kernel a pointer without its layout."""

from __future__ import annotations

import torch

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
    out=None, block=False,
):  # fmt: skip
    return c.launch(
        be, "verify_chain", _f32_rows(target),
        _f32_rows(draft) if draft is not None else None, _ids(tokens),
        num_draft.to(torch.int64).contiguous() if num_draft is not None else None,
        c.int32_ids(nb), float(delta), bool(greedy), bool(block), seed_t, seed_i, off_t, off_i,
        uniforms,
        *(out or (None, None)),
    )  # fmt: skip


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
    # The workspaces (None: the binding makes them) hold the current node's residual target row
    # (and renormalised draft row without replacement) after a rejected child.
    return c.launch(
        be, "verify_tree", _f32_rows(target),
        _f32_rows(draft) if draft is not None else None, _ids(tokens), _tree(first_child),
        _tree(next_sibling), width, bool(wor), c.int32_ids(nb), float(delta), bool(greedy),
        seed_t, seed_i, off_t, off_i, uniforms, None, None, *(out or (None, None, None)),
    )  # fmt: skip


def sample_without_replacement(be, probs, k, seed_t, seed_i, off_t, off_i, uniforms, out=None):
    v = probs.shape[-1]
    lead = tuple(probs.shape[:-1])
    p = _f32_rows(probs.reshape(-1, v))
    rows = p.shape[0]
    given = out[0] if out is not None else None  # [..., k] contiguous (checked by the caller)
    u = uniforms.reshape(rows, v) if uniforms is not None else None
    (res,) = c.launch(
        be, "sample_without_replacement", p, k, seed_t, seed_i, off_t, off_i, u,
        given.view(rows, k) if given is not None else None,
    )  # fmt: skip
    return given if given is not None else res.view(*lead, k)


def path_acceptance(be, target, draft, parents, num_paths, tokens, out=None):
    # CUDA: trees too large for shared memory keep their per-node state in a global workspace
    # (None: the binding makes it).
    return c.launch(
        be, "path_acceptance", _f32_rows(target),
        _f32_rows(draft) if draft is not None else None, _ids(tokens),
        _tree(parents.to(target.device)), num_paths, None, *(out or (None, None)),
    )  # fmt: skip
