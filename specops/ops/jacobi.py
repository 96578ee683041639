"""Public op verify_jacobi: one Speculative Jacobi Decoding step (SJD, SJD-PAC), declared once
(``JACOBI``, specops/ops/_decl.py).  Semantics and draw indices: ``specops/reference/verify.py``.
Backends: "cuda" (specops/jacobi.cuh), "cpu" (its C++ twin), "reference"."""

from __future__ import annotations

import torch

from specops.ops import _common as c
from specops.ops import _verify_checks as vc
from specops.ops._decl import OpDecl, Out, RelaxArg, RngArg, Scalar, Ten, TreeArg, register_decl
from specops.reference import verify as rv
from specops.reference.verify import JacobiResult

# the public function verify_jacobi: written from this declaration to
# specops/ops/_generated_jacobi.py by scripts/gen_ops.py
__all__: list[str] = []


def _check(target_probs, window_tokens, draft_probs, tree, continue_after_reject, num_candidates,
           seed, offset, relax, uniforms, backend) -> None:  # fmt: skip
    op = "verify_jacobi"
    b, L, v = vc.check_target(op, target_probs, backend)
    dev = target_probs.device
    if tree is not None:
        vc.check_tree(op, tree, b, L, dev)
    c.check_ids(op, "window_tokens", window_tokens, ndim=2, device=dev)
    c.check_tensor(op, "window_tokens", window_tokens, shape=(b, L))
    vc.check_draft_probs(op, draft_probs, b, L, v, dev)
    vc.check_bool(op, "continue_after_reject", continue_after_reject)
    if isinstance(num_candidates, bool) or not isinstance(num_candidates, int):
        raise TypeError(
            f"specops.{op}: num_candidates must be an int, got {type(num_candidates).__name__}"
        )
    if num_candidates < 1:
        raise ValueError(f"specops.{op}: num_candidates must be >= 1, got {num_candidates}")
    vc.check_relax(op, relax, v, dev)
    c.check_rng(op, seed, offset, dev, b)
    draws = 2 * L + (L * num_candidates if num_candidates > 1 else 0)
    vc.check_uniforms(op, uniforms, b, draws, dev)
    vc.check_values(op, target_probs, draft_probs, window_tokens, v, ids_name="window_tokens",
                    tree=tree is not None)  # fmt: skip


def _reference(target_probs, window_tokens, draft_probs, first_child, next_sibling,
               continue_after_reject, num_candidates, rng, neighbors, delta, codebook,
               group_window, group_p, group_d, image_start, uniforms):  # fmt: skip
    relax = vc.relax_of(neighbors, delta, codebook, group_window, group_p, group_d, image_start)
    seed, offset = rng.reference(target_probs.device)
    tree = vc.TreeArrays(first_child, next_sibling) if first_child is not None else None
    r = rv.verify_jacobi(target_probs, window_tokens, draft_probs, tree=tree,
                         continue_after_reject=continue_after_reject,
                         num_candidates=num_candidates, seed=seed, offset=offset,
                         relax=relax, uniforms=uniforms)  # fmt: skip
    return _five(target_probs, r.num_accepted, r.next_window, r.first_reject, r.candidates, r.path)


def _five(target_probs, num, next_window, first_reject, candidates, path) -> tuple:
    """The op's five outputs: candidates / path None (not produced) become the empty [B, L, 0] /
    [B, 0] tensors the schema returns (never written)."""
    b, L = target_probs.shape[0], target_probs.shape[1]
    if candidates is None:
        candidates = target_probs.new_empty((b, L, 0), dtype=torch.int32)
    if path is None:
        path = target_probs.new_empty((b, 0), dtype=torch.int32)
    return num, next_window, first_reject, candidates, path


# CUDA tree mode signals completion through per-request counters that must be zero before the
# launch; the kernel leaves them zero, so one zeroed buffer per (device, stream) is kept and
# reused (also by CUDA graph replays).
_COUNTERS: dict[tuple[str, int, int], torch.Tensor] = {}


def _counters(be: str, a) -> dict:
    if be not in ("cuda", "cuda_sim") or a.first_child is None:  # tree mode only
        return {}
    dev, b = a.target_probs.device, a.target_probs.shape[0]
    index = -1  # CPU tensors (backend "cuda_sim")
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
    key = (dev.type, index, c.stream_of(dev) if be == "cuda" else 0)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < b:
        buf = torch.zeros(max(b, 64), dtype=torch.int32, device=dev)
        _COUNTERS[key] = buf
    return {"counters": buf}


def _complete(res: tuple, a, out) -> tuple:
    """The binding's outputs (num, next_window, first_reject[, candidates][, path]) as the op's
    five, the unused ones empty ([B, L, 0] and [B, 0]) or the caller's."""
    if out is not None:
        return tuple(out)
    k, tree = a.num_candidates, a.first_child is not None
    return _five(a.target_probs, *res[:3], res[3] if k > 1 else None, res[-1] if tree else None)


def _five_outs(out, target_probs, num_candidates, tree):
    """A public ``out`` (a tuple or list) as the five buffers the op writes: the caller's fields
    (all five, unused ones None, or only the produced ones in order) and empty ones never written
    ([B, L, 0], [B, 0]) for candidates without proactive candidates and path without a tree."""
    if not isinstance(out, (tuple, list)) or not isinstance(target_probs, torch.Tensor):
        return out  # the checks say what is wrong
    k, tree = num_candidates != 1, tree is not None
    used = 3 + k + tree
    if len(out) == 5:
        fields = [*out[:3], *((out[3],) if k else ()), *((out[4],) if tree else ())]
    elif len(out) == used:
        fields = list(out)
    else:
        return out  # run's check says what is expected
    return _five(target_probs, *fields[:3], fields[3] if k else None, fields[-1] if tree else None)


JACOBI = OpDecl(
    "verify_jacobi",
    args=(
        vc.target_probs("B L V"),
        Ten("window_tokens", "B L", form=vc.id_rows),
        vc.draft_probs("B L V"),
        TreeArg(("first_child", "next_sibling"), optional=True, form=vc.tree_array),
        Scalar("continue_after_reject", "bool"),
        Scalar("num_candidates", "int"),
        RngArg(batch="target_probs"),
        RelaxArg(),
        Ten("uniforms", "B D", optional=True),
    ),
    outs=(
        Out("num_accepted", "B"),
        Out("next_window", "B, L"),
        Out("first_reject", "B"),
        Out("candidates", "B, L, C"),
        Out("path", "B, W"),
    ),
    sizes={
        "C": lambda num_candidates: num_candidates if num_candidates > 1 else 0,
        "W": lambda L, first_child: L if first_child is not None else 0,  # (tree mode only)
    },
    backends=("cuda", "cpu", "reference"),
    check=_check,
    reference=_reference,
    # CUDA tree mode needs the completion counters (launch_extra), which the checked path adds
    fast_when=lambda tree, target_probs: tree is None or not target_probs.is_cuda,
    launch_extra=_counters,
    complete=_complete,  # the fast path returns the binding's outputs as they are
)


JACOBI.public(
    rv.verify_jacobi,
    # out: the caller's fields as the five buffers the op writes; the result: the fields produced
    prepare=lambda out, target_probs, num_candidates, tree: (
        out if out is None else _five_outs(out, target_probs, num_candidates, tree)
    ),
    result=lambda r, num_candidates, tree: JacobiResult(
        r[0], r[1], r[2], r[3] if num_candidates != 1 else None, r[-1] if tree is not None else None
    ),
    doc="""One Speculative Jacobi Decoding step (SJD, or SJD-PAC with continuation / a tree window).

    Parameters
    ----------
    target_probs : [B, L, V] float32/float16/bfloat16
        Row i: the target distribution of window slot i (tree mode: of node i's children).
    window_tokens : [B, L] int32/int64
        The window (tree mode: entry 0 ignored).
    draft_probs : [B, L, V] float or None
        The distributions the window tokens were drawn from; None: one-hot.
    tree : Tree or None
        None: a chain window; a Tree of L nodes, batch 1 or B (``verify_tree``'s node
        convention), e.g. ``Tree.kary_chain``.
    continue_after_reject : bool
        SJD-PAC: the window continues after a rejection.
    num_candidates : int
        > 1 adds the proactive-drafting candidates.
    seed : int or [] / [B] int64
        Philox key; a tensor [B] gives one per request.
    offset : int or [] / [1] int64
        Philox counter offset.
    relax : Relaxation, Grouping or None
        LANTERN relaxed acceptance, or GSD grouped acceptance (both lossy); None: exact.
    uniforms : [B, 2L] or [B, 2L + L*k] float32 or None
        Replaces the draws (the second form with num_candidates k > 1).
    backend : str
        "auto", "cuda", "cpu" (the C++ twin) or "reference".
    out : JacobiResult or tuple or None
        Preallocated contiguous fields (candidates / path None when not produced).

    Returns ``JacobiResult(num_accepted [B], next_window [B, L], first_reject [B],
    candidates [B, L, num_candidates] or None, path [B, L] in tree mode or None)``, int32.
    Exact semantics and draw indices: ``specops.reference.verify_jacobi``.""",
)

register_decl(JACOBI)
