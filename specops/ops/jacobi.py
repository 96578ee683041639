"""Public op verify_jacobi: one Speculative Jacobi Decoding step (SJD, SJD-PAC).

Checks shapes/dtypes/devices (always) and values (validation mode only), then calls the
``torch.ops.specops.verify_jacobi`` op through ``c.ops`` (eager calls with backend "auto" go to
the binding directly, see ``_common.fast_kernel``).  The semantics, including which Philox
(row, draw) every random decision uses, are documented in ``specops/reference/verify.py``.
Backends: "cuda" (specops/jacobi.cuh), "cpu" (its C++ twin, ``_jacobi_kernels``), "reference"."""

from __future__ import annotations

import torch
from torch import Tensor

from specops._nvtx import traced
from specops.ops import _common as c
from specops.ops.verify import (
    _bool,
    _check_draft_probs,
    _check_relax,
    _check_target,
    _check_tree,
    _check_uniforms,
    _ref_rng,
    _relax_of,
    _TreeArrays,
)
from specops.reference import verify as rv
from specops.reference.verify import JacobiResult, Relaxation
from specops.tree import Tree

__all__ = ["verify_jacobi"]


# verify_jacobi --------------------------------------------------------------------------------
@traced("verify_jacobi")
def verify_jacobi(
    target_probs: torch.Tensor,
    window_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    *,
    tree: Tree | None = None,
    continue_after_reject: bool = True,
    num_candidates: int = 1,
    seed=0,
    offset=0,
    relax: Relaxation | None = None,
    uniforms: torch.Tensor | None = None,
    backend: str = "auto",
    out: JacobiResult | tuple | None = None,
) -> JacobiResult:
    """One Speculative Jacobi Decoding step (SJD, or SJD-PAC with continuation / a tree window).

    ``target_probs`` [B, L, V], ``window_tokens`` [B, L], ``draft_probs`` [B, L, V] (the dists
    the window tokens were drawn from; None = one-hot).  ``tree``: None (chain window: row i =
    target dist of slot i) or a ``Tree`` of L nodes, batch 1 or B, e.g. ``Tree.kary_chain``
    (``verify_tree``'s node convention).  ``num_candidates`` > 1 adds the proactive-drafting
    candidates.  ``uniforms`` [B, 2L] float32, or [B, 2L + L*k] with num_candidates k > 1.

    Returns ``JacobiResult(num_accepted [B], next_window [B, L], first_reject [B],
    candidates [B, L, num_candidates] or None, path [B, L] in tree mode or None)``, int32,
    written into ``out`` (the same five fields, contiguous; candidates / path None when not
    produced) when given.  Exact semantics and draw indices: ``specops.reference.verify_jacobi``.
    Backends: "cuda" (one launch per step, specops/jacobi.cuh), "cpu" (its C++ twin) and
    "reference"."""
    op = "verify_jacobi"
    fast = c.fast_kernel(op, target_probs, backend, _JACOBI_BACKENDS)
    if (
        fast is not None
        and target_probs.dim() == 3
        and out is None
        and relax is None
        and type(continue_after_reject) is bool
        and type(num_candidates) is int
        and (tree is None or (type(tree) is Tree and not target_probs.is_cuda))
    ):
        rng = c.fast_rng(seed, offset, target_probs.shape[0])
        if rng is not None:
            tr = tree is not None
            try:
                r = fast(target_probs, draft_probs, window_tokens, tree.first_child if tr else None,
                         tree.next_sibling if tr else None, continue_after_reject, num_candidates,
                         None, 0.0, *rng, uniforms, None, None, None, None, None, None, None,
                         False)  # fmt: skip
            except (TypeError, ValueError):
                pass  # the checks below name what is wrong, or normalise what the kernel reads
            else:
                k = num_candidates > 1
                return JacobiResult(r[0], r[1], r[2], r[3] if k else None, r[-1] if tr else None)
    b, L, v = _check_target(op, target_probs, backend)
    dev = target_probs.device
    if tree is not None:
        _check_tree(op, tree, b, L, dev)
    c.check_ids(op, "window_tokens", window_tokens, ndim=2, device=dev)
    c.check_tensor(op, "window_tokens", window_tokens, shape=(b, L))
    _check_draft_probs(op, draft_probs, b, L, v, dev)
    cont = _bool(op, "continue_after_reject", continue_after_reject)
    if isinstance(num_candidates, bool) or not isinstance(num_candidates, int):
        raise TypeError(
            f"specops.{op}: num_candidates must be an int, got {type(num_candidates).__name__}"
        )
    if num_candidates < 1:
        raise ValueError(f"specops.{op}: num_candidates must be >= 1, got {num_candidates}")
    nb, delta = _check_relax(op, relax, v, dev)
    seed_t, seed_i, off_t, off_i = c.rng_args(op, seed, offset, dev, b)
    draws = 2 * L + (L * num_candidates if num_candidates > 1 else 0)
    _check_uniforms(op, uniforms, b, draws, dev)
    if c.validating():
        c.check_values_probs(op, "target_probs", target_probs)
        if draft_probs is not None:
            c.check_values_probs(op, "draft_probs", draft_probs)
        ids = window_tokens if tree is None else window_tokens[:, 1:]
        c.check_values_ids(op, "window_tokens", ids, v)
    fc = tree.first_child if tree is not None else None
    ns = tree.next_sibling if tree is not None else None
    args = (target_probs, window_tokens, draft_probs, fc, ns, cont, num_candidates, seed_t, seed_i,
            off_t, off_i, nb, delta, uniforms, backend)  # fmt: skip
    k, tr = num_candidates > 1, tree is not None
    if out is None:
        num, nw, first, cands, path = c.ops.verify_jacobi(*args)
        return JacobiResult(num, nw, first, cands if k else None, path if tr else None)
    i32 = torch.int32
    specs = (("num_accepted", (b,), i32, dev), ("next_window", (b, L), i32, dev),
             ("first_reject", (b,), i32, dev))  # fmt: skip
    if isinstance(out, (tuple, list)) and len(out) == 5:  # unused fields None, or empty below
        cands = out[3] if k else None
        path = out[4] if tr else None
        out = tuple(out[:3]) + ((cands,) if k else ()) + ((path,) if tr else ())
        specs += ((("candidates", (b, L, num_candidates), i32, dev),) if k else ()) + (
            (("path", (b, L), i32, dev),) if tr else ()
        )
    out = list(c.check_out(op, out, specs))
    names = [f"out.{spec[0]}" for spec in specs]
    c.check_no_alias(op, list(zip(names, out)), zip(c._ARG_NAMES[op], args))
    cands = out.pop(3) if k else target_probs.new_empty((b, L, 0), dtype=i32)
    path = out.pop(3) if tr else target_probs.new_empty((b, 0), dtype=i32)
    c.ops.verify_jacobi_out(*args, *out, cands, path)
    return JacobiResult(*out, cands if k else None, path if tr else None)


# C++ CPU twin / CUDA: _jacobi_kernels
_JACOBI_BACKENDS = c.declare_backends(("cuda", "cpu", "reference"), "verify_jacobi")


def _jacobi_impl(
    target: Tensor,
    window: Tensor,
    draft: Tensor | None,
    fc: Tensor | None,
    ns: Tensor | None,
    cont: bool,
    k: int,
    seed_t: Tensor | None,
    seed_i: int,
    off_t: Tensor | None,
    off_i: int,
    nb: Tensor | None,
    delta: float,
    uniforms: Tensor | None,
    backend: str,
    out=None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    be = c.pick_backend("verify_jacobi", backend, target.device, _JACOBI_BACKENDS)
    if be != "reference":
        from specops.ops import _jacobi_kernels

        return _jacobi_kernels.verify_jacobi(
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
            out=out,
        )
    seed, offset = _ref_rng(seed_t, seed_i, off_t, off_i, target.device)
    tree = _TreeArrays(fc, ns) if fc is not None else None
    r = rv.verify_jacobi(
        target,
        window,
        draft,
        tree=tree,
        continue_after_reject=cont,
        num_candidates=k,
        seed=seed,
        offset=offset,
        relax=_relax_of(nb, delta),
        uniforms=uniforms,
    )
    b, L, _ = target.shape
    cands = (
        r.candidates if r.candidates is not None else target.new_empty((b, L, 0), dtype=torch.int32)
    )
    path = r.path if r.path is not None else target.new_empty((b, 0), dtype=torch.int32)
    return c.write_outs(out, (r.num_accepted, r.next_window, r.first_reject, cands, path))


def _jacobi_fake(target, _window, _draft, fc, _ns, _cont, k, *_rest):
    b, L, _ = target.shape
    i32 = torch.int32
    return (
        target.new_empty((b,), dtype=i32),
        target.new_empty((b, L), dtype=i32),
        target.new_empty((b,), dtype=i32),
        target.new_empty((b, L, k if k > 1 else 0), dtype=i32),
        target.new_empty((b, L if fc is not None else 0), dtype=i32),
    )


c.register("verify_jacobi", _jacobi_impl, _jacobi_fake, outs=5)
