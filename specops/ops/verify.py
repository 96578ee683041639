"""Public verification ops: verify_chain, verify_tree, path_acceptance (verify_jacobi: jacobi.py).

Each function checks shapes/dtypes/devices (always) and values (validation mode only), then calls
its ``torch.ops.specops.*`` op through ``c.ops`` (torch.library define/impl, with a fake kernel
for torch.compile; eager calls skip the dispatcher, and with backend "auto" go to the binding
directly, see ``_common.fast_kernel``).  The semantics, including which Philox (row, draw) every
random decision uses, are documented in ``specops/reference/verify.py``; every backend follows
them token for token.
Backends: verify_chain, verify_tree and path_acceptance have "cuda" (CUDA
kernels), "cpu" (their C++ twins) and "reference"; verify_chain also has "triton"
(``triton_kernels/verify.py``: GPUs without the CUDA build, e.g. ROCm; "auto" takes it on a GPU
when the CUDA kernels are not built, never the interpreter on the CPU)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from specops._nvtx import traced
from specops.ops import _common as c
from specops.ops import _verify_kernels as _kernels
from specops.reference import verify as rv
from specops.reference.verify import ChainResult, Relaxation, TreeResult
from specops.tree import Tree

__all__ = ["Relaxation", "verify_chain", "verify_tree", "path_acceptance"]

_PATH_BACKENDS = c.declare_backends(("cuda", "cpu", "reference"), "path_acceptance")
# C++ CPU twin / CUDA: _verify_kernels; Triton: triton_kernels/verify.py
_CHAIN_BACKENDS = c.declare_backends(("cuda", "triton", "cpu", "reference"), "verify_chain")
_TREE_BACKENDS = c.declare_backends(("cuda", "cpu", "reference"), "verify_tree")


# checks ---------------------------------------------------------------------------------------
def _check_target(op: str, t, backend: str) -> tuple[int, int, int]:
    c.check_probs(op, "target_probs", t, ndim=3, backend=backend)
    b, n, v = t.shape
    if n < 1 or v < 1:
        raise ValueError(
            f"specops.{op}: target_probs must have at least one row and a non-empty vocab, "
            f"got shape {tuple(t.shape)}"
        )
    return b, n, v


def _check_draft_probs(op: str, t, b: int, rows: int, v: int, dev):
    if t is None:
        return
    c.check_probs(op, "draft_probs", t, ndim=3, device=dev)
    if t.shape[-1] != v:
        raise ValueError(
            f"specops.{op}: draft_probs has vocab {t.shape[-1]} but target_probs has vocab {v} "
            f"(draft_probs shape {tuple(t.shape)})"
        )
    c.check_tensor(op, "draft_probs", t, shape=(b, rows, v))


def _check_relax(op: str, relax, v: int, dev):
    """-> (neighbors tensor or None, delta float)."""
    if relax is None:
        return None, 0.0
    if not isinstance(relax, Relaxation):
        raise TypeError(
            f"specops.{op}: relax must be a specops.Relaxation(neighbors, delta), "
            f"got {type(relax).__name__}"
        )
    nb, delta = relax.neighbors, relax.delta
    c.check_ids(op, "relax.neighbors", nb, ndim=2, device=dev)
    if nb.shape[0] != v:
        raise ValueError(
            f"specops.{op}: relax.neighbors must have shape [V={v}, k], got {tuple(nb.shape)}"
        )
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise TypeError(f"specops.{op}: relax.delta must be a float, got {type(delta).__name__}")
    if not 0 <= delta < math.inf:
        raise ValueError(f"specops.{op}: relax.delta must be finite and >= 0, got {delta}")
    if c.validating():
        c.check_values_ids(op, "relax.neighbors", nb, v)
    return nb, float(delta)


def _check_uniforms(op: str, u, b: int, draws: int, dev):
    if u is not None:
        c.check_tensor(op, "uniforms", u, dtypes=(torch.float32,), device=dev, shape=(b, draws))


def _check_tree(op: str, tree, b: int, n: int, dev) -> None:
    if not isinstance(tree, Tree):
        raise TypeError(f"specops.{op}: tree must be a specops.Tree, got {type(tree).__name__}")
    if tree.batch_size not in (1, b):
        raise ValueError(
            f"specops.{op}: tree has batch {tree.batch_size} but target_probs has batch {b} "
            f"(a tree must have batch 1 or {b})"
        )
    if tree.num_nodes != n:
        raise ValueError(
            f"specops.{op}: tree has {tree.num_nodes} nodes but target_probs has {n} rows "
            "(one per node)"
        )
    if tree.device != torch.device(dev):
        raise ValueError(f"specops.{op}: tree is on {tree.device} but the inputs are on {dev}")


def _bool(op: str, name: str, val) -> bool:
    if not isinstance(val, bool):
        raise TypeError(f"specops.{op}: {name} must be a bool, got {type(val).__name__}")
    return val


def _ref_rng(seed_t, seed_i, off_t, off_i, dev):
    return c.seed_for_reference(seed_t, seed_i, dev), c.offset_for_reference(off_t, off_i, dev)


def _relax_of(neighbors, delta):
    return None if neighbors is None else Relaxation(neighbors, delta)


def _fast_outs(out, n: int):
    """``out`` as the binding takes it (None for each output to make), or None when the general
    checks must see it."""
    if out is None:
        return (None,) * n
    if (
        isinstance(out, (tuple, list))
        and len(out) == n
        and all(type(t) is torch.Tensor for t in out)
    ):
        return tuple(out)
    return None


# verify_chain ---------------------------------------------------------------------------------
@traced("verify_chain")
def verify_chain(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    num_draft: torch.Tensor | None = None,
    seed=0,
    offset=0,
    relax: Relaxation | None = None,
    greedy: bool = False,
    uniforms: torch.Tensor | None = None,
    block: bool = False,
    backend: str = "auto",
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ChainResult:
    """Chain speculative sampling: verify K drafts per request against the target, lossless.

    ``target_probs`` [B, K+1, V] (row i = target dist for draft i, row K = bonus),
    ``draft_tokens`` [B, K] int32/int64 (-1 ends a request's drafts), ``draft_probs`` [B, K, V]
    or None (deterministic drafts), ``num_draft`` [B] int drafts per request (ragged batches).
    ``relax``: LANTERN ``Relaxation`` (makes verification lossy).  ``greedy``: argmax
    verification, bit-exact with greedy decoding.  ``uniforms`` [B, K+1] float32 replaces the
    Philox draws (draw i = test of draft i, draw K = the final sample).  ``block``: block
    verification (Sun et al. 2024, ``specops.reference.block``): the accepted prefix decided
    jointly, as lossless, never fewer accepted tokens on average (more where drafts are
    sampled and K >= 2); the same draws; not with ``greedy`` or ``relax``.

    Returns ``ChainResult(tokens [B, K+1] int32, num_accepted [B] int32)``: accepted drafts, then
    one corrected/bonus token, -1 after; written into ``out`` = (tokens, num_accepted) when given
    (contiguous, preallocated: CUDA graphs own them).  Exact semantics:
    ``specops.reference.verify_chain``.
    Backends: "cuda", "triton" (any GPU Triton supports; the interpreter on the CPU with
    TRITON_INTERPRET=1), "cpu" (C++ twin), "reference"; all token-identical to the reference
    except on exact rounding ties of the float64 sums."""
    op = "verify_chain"
    fast = c.fast_kernel(op, target_probs, backend, _CHAIN_BACKENDS)
    if (
        fast is not None
        and target_probs.dim() == 3
        and relax is None
        and type(greedy) is bool
        and type(block) is bool
    ):
        rng, o = c.fast_rng(seed, offset, target_probs.shape[0]), _fast_outs(out, 2)
        if rng is not None and o is not None:
            try:
                return ChainResult(*fast(target_probs, draft_probs, draft_tokens, num_draft, None,
                                         0.0, greedy, block, *rng, uniforms, *o))  # fmt: skip
            except (TypeError, ValueError):
                pass  # the checks below name what is wrong, or normalise what the kernel reads
    b, k1, v = _check_target(op, target_probs, backend)
    dev = target_probs.device
    k = k1 - 1
    c.check_ids(op, "draft_tokens", draft_tokens, ndim=2, device=dev)
    c.check_tensor(op, "draft_tokens", draft_tokens, shape=(b, k))
    _check_draft_probs(op, draft_probs, b, k, v, dev)
    if num_draft is not None:
        c.check_ids(op, "num_draft", num_draft, device=dev, shape=(b,))
    greedy = _bool(op, "greedy", greedy)
    block = _bool(op, "block", block)
    nb, delta = _check_relax(op, relax, v, dev)
    if greedy and nb is not None:
        raise ValueError(f"specops.{op}: relax cannot be combined with greedy=True")
    if block and (greedy or nb is not None):
        raise ValueError(f"specops.{op}: block=True cannot be combined with greedy or relax")
    seed_t, seed_i, off_t, off_i = c.rng_args(op, seed, offset, dev, b)
    _check_uniforms(op, uniforms, b, k + 1, dev)
    if c.validating():
        c.check_values_probs(op, "target_probs", target_probs)
        if draft_probs is not None:
            c.check_values_probs(op, "draft_probs", draft_probs)
        c.check_values_ids(op, "draft_tokens", draft_tokens, v)
        if (
            num_draft is not None
            and num_draft.numel()
            and ((num_draft < 0) | (num_draft > k)).any()
        ):
            raise ValueError(f"specops.{op}: num_draft values must be in [0, {k}]")
    args = (target_probs, draft_tokens, draft_probs, num_draft, seed_t, seed_i, off_t, off_i,
            nb, delta, greedy, uniforms, block, backend)  # fmt: skip
    i32 = torch.int32
    specs = lambda: (("tokens", (b, k1), i32, dev), ("num_accepted", (b,), i32, dev))
    return ChainResult(*c.call(op, args, out, specs))


def _chain_impl(
    target_probs: Tensor,
    draft_tokens: Tensor,
    draft_probs: Tensor | None,
    num_draft: Tensor | None,
    seed_t: Tensor | None,
    seed_i: int,
    offset_t: Tensor | None,
    offset_i: int,
    neighbors: Tensor | None,
    delta: float,
    greedy: bool,
    uniforms: Tensor | None,
    block: bool,
    backend: str,
    out=None,
) -> tuple[Tensor, Tensor]:
    target, tokens, draft, off_t, off_i, nb = (
        target_probs, draft_tokens, draft_probs, offset_t, offset_i, neighbors
    )  # fmt: skip
    be = c.pick_backend("verify_chain", backend, target.device, _CHAIN_BACKENDS)
    if be == "triton":
        from specops.triton_kernels.verify import verify_chain_triton

        return c.write_outs(out, verify_chain_triton(
            target, tokens, draft, num_draft, seed_t, seed_i, off_t, off_i, nb, delta, greedy,
            uniforms, block,
        ))  # fmt: skip
    if be != "reference":
        return _kernels.verify_chain(
            be, target, tokens, draft, num_draft, seed_t, seed_i, off_t, off_i, nb, delta,
            greedy, uniforms, out, block,
        )  # fmt: skip
    seed, offset = _ref_rng(seed_t, seed_i, off_t, off_i, target.device)
    r = rv.verify_chain(
        target,
        tokens,
        draft,
        num_draft=num_draft,
        seed=seed,
        offset=offset,
        relax=_relax_of(nb, delta),
        greedy=greedy,
        uniforms=uniforms,
        block=block,
    )
    return c.write_outs(out, (r.tokens, r.num_accepted))


def _chain_fake(target, *_rest):  # the op's arguments; outputs depend on the shape
    b, k1, _ = target.shape
    return (
        target.new_empty((b, k1), dtype=torch.int32),
        target.new_empty((b,), dtype=torch.int32),
    )


c.register("verify_chain", _chain_impl, _chain_fake, outs=2)


# verify_tree ----------------------------------------------------------------------------------
@traced("verify_tree")
def verify_tree(
    target_probs: torch.Tensor,
    tree: Tree,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    without_replacement: bool = False,
    seed=0,
    offset=0,
    relax: Relaxation | None = None,
    greedy: bool = False,
    uniforms: torch.Tensor | None = None,
    backend: str = "auto",
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> TreeResult:
    """Tree speculative sampling (recursive rejection sampling, siblings in index order).

    ``target_probs`` [B, N, V] (row n = target dist for the children of node n), ``tree`` a
    ``Tree`` of N nodes with batch 1 or B, ``draft_tokens`` [B, N] (entry 0 ignored, -1 =
    padding node), ``draft_probs`` [B, N, V] (row n = the draft dist the children of n were
    drawn from) or None (deterministic drafts).  ``without_replacement``: siblings were drawn
    without replacement.  ``uniforms`` [B, N] float32 (draw n - 1 = test of node n, draw N - 1 =
    the final sample).  The output width D+1 is read from the tree once per Tree object.

    Returns ``TreeResult(path, tokens [B, D+1] int32, num_accepted [B] int32)``, written into
    ``out`` = (path, tokens, num_accepted) when given (contiguous, preallocated).  Exact semantics:
    ``specops.reference.verify_tree``."""
    op = "verify_tree"
    fast = c.fast_kernel(op, target_probs, backend, _TREE_BACKENDS)
    if (
        fast is not None
        and target_probs.dim() == 3
        and type(tree) is Tree
        and relax is None
        and type(greedy) is bool
        and type(without_replacement) is bool
    ):
        rng, o = c.fast_rng(seed, offset, target_probs.shape[0]), _fast_outs(out, 3)
        if rng is not None and o is not None:
            try:
                return TreeResult(*fast(target_probs, draft_probs, draft_tokens, tree.first_child,
                    tree.next_sibling, tree.path_width, without_replacement, None, 0.0,
                    greedy, *rng, uniforms, None, None, *o))  # fmt: skip
            except (TypeError, ValueError):
                pass  # the checks below name what is wrong, or normalise what the kernel reads
    b, n, v = _check_target(op, target_probs, backend)
    dev = target_probs.device
    _check_tree(op, tree, b, n, dev)
    c.check_ids(op, "draft_tokens", draft_tokens, ndim=2, device=dev)
    c.check_tensor(op, "draft_tokens", draft_tokens, shape=(b, n))
    _check_draft_probs(op, draft_probs, b, n, v, dev)
    wor = _bool(op, "without_replacement", without_replacement)
    greedy = _bool(op, "greedy", greedy)
    nb, delta = _check_relax(op, relax, v, dev)
    if greedy and nb is not None:
        raise ValueError(f"specops.{op}: relax cannot be combined with greedy=True")
    seed_t, seed_i, off_t, off_i = c.rng_args(op, seed, offset, dev, b)
    _check_uniforms(op, uniforms, b, n, dev)
    if c.validating():
        c.check_values_probs(op, "target_probs", target_probs)
        if draft_probs is not None:
            c.check_values_probs(op, "draft_probs", draft_probs)
        c.check_values_ids(op, "draft_tokens", draft_tokens[:, 1:], v)
    width = tree.path_width
    args = (target_probs, tree.first_child, tree.next_sibling, width, draft_tokens, draft_probs,
            wor, seed_t, seed_i, off_t, off_i, nb, delta, greedy, uniforms, backend)  # fmt: skip
    i32 = torch.int32
    specs = lambda: (("path", (b, width), i32, dev), ("tokens", (b, width), i32, dev),
                     ("num_accepted", (b,), i32, dev))  # fmt: skip
    return TreeResult(*c.call(op, args, out, specs))


class _TreeArrays:
    """What the reference walk reads of a Tree: first_child / next_sibling."""

    def __init__(self, first_child, next_sibling):
        self.first_child = first_child
        self.next_sibling = next_sibling


def _tree_impl(
    target: Tensor,
    first_child: Tensor,
    next_sibling: Tensor,
    width: int,
    tokens: Tensor,
    draft: Tensor | None,
    wor: bool,
    seed_t: Tensor | None,
    seed_i: int,
    off_t: Tensor | None,
    off_i: int,
    nb: Tensor | None,
    delta: float,
    greedy: bool,
    uniforms: Tensor | None,
    backend: str,
    out=None,
) -> tuple[Tensor, Tensor, Tensor]:
    be = c.pick_backend("verify_tree", backend, target.device, _TREE_BACKENDS)
    if be != "reference":
        return _kernels.verify_tree(
            be, target, first_child, next_sibling, width, tokens, draft, wor, seed_t, seed_i,
            off_t, off_i, nb, delta, greedy, uniforms, out,
        )  # fmt: skip
    seed, offset = _ref_rng(seed_t, seed_i, off_t, off_i, target.device)
    r = rv.verify_tree(
        target,
        _TreeArrays(first_child, next_sibling),
        tokens,
        draft,
        without_replacement=wor,
        seed=seed,
        offset=offset,
        relax=_relax_of(nb, delta),
        greedy=greedy,
        uniforms=uniforms,
        width=width,
    )
    return c.write_outs(out, (r.path, r.tokens, r.num_accepted))


def _tree_fake(target, _first_child, _next_sibling, width, *_rest):
    b = target.shape[0]
    return (
        target.new_empty((b, width), dtype=torch.int32),
        target.new_empty((b, width), dtype=torch.int32),
        target.new_empty((b,), dtype=torch.int32),
    )


c.register("verify_tree", _tree_impl, _tree_fake, outs=3)


# path_acceptance ------------------------------------------------------------------------------
@traced("path_acceptance")
def path_acceptance(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    tree: Tree,
    draft_tokens: torch.Tensor,
    *,
    backend: str = "auto",
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """VSD path acceptance: per root-to-leaf path, kappa = prod_i min(1, p_i/q_i) and
    expected_len = sum_k prod_{i<=k} min(1, p_i/q_i)  (VSD Eqs. 2, 9-11).

    Arguments follow ``verify_tree`` (``draft_probs`` None = deterministic drafts).  Returns
    (kappa, expected_len) float32 [B, P], paths in ``Tree.paths()`` order (P read from the tree
    once per Tree object), rows with fewer leaves padded with 0; written into ``out`` =
    (kappa, expected_len) when given (contiguous, preallocated)."""
    op = "path_acceptance"
    fast = c.fast_kernel(op, target_probs, backend, _PATH_BACKENDS)
    if fast is not None and target_probs.dim() == 3 and type(tree) is Tree:
        o = _fast_outs(out, 2)
        if o is not None:
            try:
                return fast(target_probs, draft_probs, draft_tokens, tree.parents,
                            tree.num_leaves, None, *o)  # fmt: skip
            except (TypeError, ValueError):
                pass  # the checks below name what is wrong, or normalise what the kernel reads
    b, n, v = _check_target(op, target_probs, backend)
    dev = target_probs.device
    _check_tree(op, tree, b, n, dev)
    c.check_ids(op, "draft_tokens", draft_tokens, ndim=2, device=dev)
    c.check_tensor(op, "draft_tokens", draft_tokens, shape=(b, n))
    _check_draft_probs(op, draft_probs, b, n, v, dev)
    if c.validating():
        c.check_values_probs(op, "target_probs", target_probs)
        if draft_probs is not None:
            c.check_values_probs(op, "draft_probs", draft_probs)
        c.check_values_ids(op, "draft_tokens", draft_tokens[:, 1:], v)
    num_paths = tree.num_leaves
    args = (target_probs, draft_probs, tree.parents, num_paths, draft_tokens, backend)
    f32 = torch.float32
    specs = lambda: (
        ("kappa", (b, num_paths), f32, dev),
        ("expected_len", (b, num_paths), f32, dev),
    )
    return c.call(op, args, out, specs)


def _pa_impl(
    target: Tensor,
    draft: Tensor | None,
    parents: Tensor,
    num_paths: int,
    tokens: Tensor,
    backend: str,
    out=None,
) -> tuple[Tensor, Tensor]:
    be = c.pick_backend("path_acceptance", backend, target.device, _PATH_BACKENDS)
    if be == "reference":
        return c.write_outs(out, rv._path_acceptance(target, draft, parents, tokens, num_paths))
    return _kernels.path_acceptance(be, target, draft, parents, num_paths, tokens, out)


def _pa_fake(target, draft, parents, num_paths, tokens, backend):
    b = target.shape[0]
    return (
        target.new_empty((b, num_paths), dtype=torch.float32),
        target.new_empty((b, num_paths), dtype=torch.float32),
    )


c.register("path_acceptance", _pa_impl, _pa_fake, outs=2)
