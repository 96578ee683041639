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
from specops.ops._decl import (
    OpDecl,
    Out,
    RelaxArg,
    RngArg,
    Scalar,
    Ten,
    TreeArg,
    register_decl,
)
from specops.reference import verify as rv
from specops.reference.verify import ChainResult, Relaxation, TreeResult
from specops.tree import Tree

__all__ = ["Relaxation", "verify_chain", "verify_tree", "path_acceptance"]


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


def _relax_of(neighbors, delta):
    return None if neighbors is None else Relaxation(neighbors, delta)


class _TreeArrays:
    """What the reference walk reads of a Tree: first_child / next_sibling."""

    def __init__(self, first_child, next_sibling):
        self.first_child = first_child
        self.next_sibling = next_sibling


def _check_values(op, target_probs, draft_probs, ids, v) -> None:
    if c.validating():
        c.check_values_probs(op, "target_probs", target_probs)
        if draft_probs is not None:
            c.check_values_probs(op, "draft_probs", draft_probs)
        c.check_values_ids(op, "draft_tokens", ids, v)


# what the compiled kernels read (specops/ops/_decl.py ``Ten.form``): float32 probability rows
# with a contiguous last dim (other float dtypes converted once), token ids int32 or int64 in
# place with a contiguous last dim, tree arrays int32, counts int64.
def f32_rows(t: Tensor) -> Tensor:
    return t if t.dtype == torch.float32 and t.stride(-1) == 1 else t.float().contiguous()


def id_rows(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def tree_array(t: Tensor) -> Tensor:
    return t if t.dtype == torch.int32 and t.is_contiguous() else t.to(torch.int32).contiguous()


def counts(t: Tensor) -> Tensor:
    return t.to(torch.int64).contiguous()


# verify_chain ---------------------------------------------------------------------------------
def _check_chain(target_probs, draft_tokens, draft_probs, num_draft, seed, offset, relax, greedy,
                 uniforms, block, backend) -> None:  # fmt: skip
    op = "verify_chain"
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
    nb, _ = _check_relax(op, relax, v, dev)
    if greedy and nb is not None:
        raise ValueError(f"specops.{op}: relax cannot be combined with greedy=True")
    if block and (greedy or nb is not None):
        raise ValueError(f"specops.{op}: block=True cannot be combined with greedy or relax")
    c.check_rng(op, seed, offset, dev, b)
    _check_uniforms(op, uniforms, b, k + 1, dev)
    _check_values(op, target_probs, draft_probs, draft_tokens, v)
    if (
        c.validating()
        and num_draft is not None
        and num_draft.numel()
        and ((num_draft < 0) | (num_draft > k)).any()
    ):
        raise ValueError(f"specops.{op}: num_draft values must be in [0, {k}]")


def _chain_reference(target_probs, draft_tokens, draft_probs, num_draft, rng, neighbors, delta,
                     greedy, uniforms, block):  # fmt: skip
    seed, offset = rng.reference(target_probs.device)
    r = rv.verify_chain(target_probs, draft_tokens, draft_probs, num_draft=num_draft, seed=seed,
                        offset=offset, relax=_relax_of(neighbors, delta), greedy=greedy,
                        uniforms=uniforms, block=block)  # fmt: skip
    return r.tokens, r.num_accepted


CHAIN = OpDecl(
    "verify_chain",
    args=(
        Ten("target_probs", "B N V", form=f32_rows, fast_rank=3),
        Ten("draft_tokens", "B K", form=id_rows),
        Ten("draft_probs", "B K V", optional=True, form=f32_rows),
        Ten("num_draft", "B", optional=True, form=counts),
        RngArg(requests="target_probs.shape[0]"),
        RelaxArg(),
        Scalar("greedy", "bool"),
        Ten("uniforms", "B N", optional=True),
        Scalar("block", "bool"),
    ),
    outs=(Out("tokens", "B, N"), Out("num_accepted", "B")),
    backends=("cuda", "triton", "cpu", "reference"),
    check=_check_chain,
    reference=_chain_reference,
    triton="verify:verify_chain_triton",
)


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

    Parameters
    ----------
    target_probs : [B, K+1, V] float32/float16/bfloat16
        Row i: the target distribution for draft i; row K: for the bonus token.
    draft_tokens : [B, K] int32/int64
        The drafts; -1 ends a request's drafts.
    draft_probs : [B, K, V] float or None
        The distributions the drafts were drawn from; None: deterministic drafts.
    num_draft : [B] int or None
        Drafts per request (ragged batches); None: K each.
    seed : int or [] / [B] int64
        Philox key; a tensor [B] gives one per request.
    offset : int or [] / [1] int64
        Philox counter offset (a tensor: advanced on the device, CUDA-graph friendly).
    relax : Relaxation or None
        LANTERN relaxed acceptance (lossy); None: exact.
    greedy : bool
        Argmax verification, bit-exact with greedy decoding.
    uniforms : [B, K+1] float32 or None
        Replaces the Philox draws: draw i tests draft i, draw K is the final sample.
    block : bool
        Block verification (Sun et al. 2024): the accepted prefix decided jointly; as
        lossless, never fewer accepted on average; not with greedy or relax.
    backend : str
        "auto", "cuda", "triton", "cpu" (the C++ twin) or "reference".
    out : (tokens, num_accepted) or None
        Preallocated contiguous outputs (CUDA graphs own them).

    Returns ``ChainResult(tokens [B, K+1] int32, num_accepted [B] int32)``: the accepted drafts,
    then one corrected/bonus token, -1 after.  Every backend is token-identical to
    ``specops.reference.verify_chain`` except on exact rounding ties of the float64 sums."""
    return ChainResult(*CHAIN.call(backend, out, target_probs, draft_tokens, draft_probs,
                            num_draft, seed, offset, relax, greedy, uniforms, block))  # fmt: skip


register_decl(CHAIN)


# verify_tree ----------------------------------------------------------------------------------
def _check_tree_op(target_probs, tree, draft_tokens, draft_probs, without_replacement, seed,
                   offset, relax, greedy, uniforms, backend) -> None:  # fmt: skip
    op = "verify_tree"
    b, n, v = _check_target(op, target_probs, backend)
    dev = target_probs.device
    _check_tree(op, tree, b, n, dev)
    c.check_ids(op, "draft_tokens", draft_tokens, ndim=2, device=dev)
    c.check_tensor(op, "draft_tokens", draft_tokens, shape=(b, n))
    _check_draft_probs(op, draft_probs, b, n, v, dev)
    _bool(op, "without_replacement", without_replacement)
    greedy = _bool(op, "greedy", greedy)
    nb, _ = _check_relax(op, relax, v, dev)
    if greedy and nb is not None:
        raise ValueError(f"specops.{op}: relax cannot be combined with greedy=True")
    c.check_rng(op, seed, offset, dev, b)
    _check_uniforms(op, uniforms, b, n, dev)
    _check_values(op, target_probs, draft_probs, draft_tokens[:, 1:], v)


def _tree_reference(target_probs, first_child, next_sibling, width, draft_tokens, draft_probs,
                    without_replacement, rng, neighbors, delta, greedy, uniforms):  # fmt: skip
    seed, offset = rng.reference(target_probs.device)
    r = rv.verify_tree(target_probs, _TreeArrays(first_child, next_sibling), draft_tokens,
                       draft_probs, without_replacement=without_replacement, seed=seed,
                       offset=offset, relax=_relax_of(neighbors, delta), greedy=greedy,
                       uniforms=uniforms, width=width)  # fmt: skip
    return r.path, r.tokens, r.num_accepted


TREE = OpDecl(
    "verify_tree",
    args=(
        Ten("target_probs", "B N V", form=f32_rows, fast_rank=3),
        TreeArg(("first_child", "next_sibling"), (("width", "path_width"),), form=tree_array),
        Ten("draft_tokens", "B N", form=id_rows),
        Ten("draft_probs", "B N V", optional=True, form=f32_rows),
        Scalar("without_replacement", "bool"),
        RngArg(requests="target_probs.shape[0]"),
        RelaxArg(),
        Scalar("greedy", "bool"),
        Ten("uniforms", "B N", optional=True),
    ),
    outs=(Out("path", "B, width"), Out("tokens", "B, width"), Out("num_accepted", "B")),
    backends=("cuda", "cpu", "reference"),
    check=_check_tree_op,
    reference=_tree_reference,
)


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

    Parameters
    ----------
    target_probs : [B, N, V] float32/float16/bfloat16
        Row n: the target distribution for the children of node n.
    tree : Tree
        N nodes, batch 1 or B; its depth D makes the outputs D+1 wide.
    draft_tokens : [B, N] int32/int64
        The node tokens (entry 0 ignored; -1: a padding node).
    draft_probs : [B, N, V] float or None
        Row n: the distribution node n's children were drawn from; None: deterministic.
    without_replacement : bool
        Siblings were drawn without replacement.
    seed : int or [] / [B] int64
        Philox key; a tensor [B] gives one per request.
    offset : int or [] / [1] int64
        Philox counter offset.
    relax : Relaxation or None
        LANTERN relaxed acceptance (lossy); None: exact.
    greedy : bool
        Argmax verification.
    uniforms : [B, N] float32 or None
        Replaces the draws: draw n - 1 tests node n, draw N - 1 is the final sample.
    backend : str
        "auto", "cuda", "cpu" (the C++ twin) or "reference".
    out : (path, tokens, num_accepted) or None
        Preallocated contiguous outputs.

    Returns ``TreeResult(path, tokens [B, D+1] int32, num_accepted [B] int32)``.  Exact
    semantics: ``specops.reference.verify_tree``."""
    return TreeResult(*TREE.call(backend, out, target_probs, tree, draft_tokens, draft_probs,
                           without_replacement, seed, offset, relax, greedy, uniforms))  # fmt: skip


register_decl(TREE)


# path_acceptance ------------------------------------------------------------------------------
def _check_paths(target_probs, draft_probs, tree, draft_tokens, backend) -> None:
    op = "path_acceptance"
    b, n, v = _check_target(op, target_probs, backend)
    dev = target_probs.device
    _check_tree(op, tree, b, n, dev)
    c.check_ids(op, "draft_tokens", draft_tokens, ndim=2, device=dev)
    c.check_tensor(op, "draft_tokens", draft_tokens, shape=(b, n))
    _check_draft_probs(op, draft_probs, b, n, v, dev)
    _check_values(op, target_probs, draft_probs, draft_tokens[:, 1:], v)


def _paths_reference(target_probs, draft_probs, parents, num_paths, draft_tokens):
    return rv._path_acceptance(target_probs, draft_probs, parents, draft_tokens, num_paths)


PATHS = OpDecl(
    "path_acceptance",
    args=(
        Ten("target_probs", "B N V", form=f32_rows, fast_rank=3),
        Ten("draft_probs", "B N V", optional=True, form=f32_rows),
        TreeArg(("parents",), (("num_paths", "num_leaves"),), form=tree_array),
        Ten("draft_tokens", "B N", form=id_rows),
    ),
    outs=(
        Out("kappa", "B, num_paths", torch.float32),
        Out("expected_len", "B, num_paths", torch.float32),
    ),  # fmt: skip
    backends=("cuda", "cpu", "reference"),
    check=_check_paths,
    reference=_paths_reference,
)


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

    Parameters
    ----------
    target_probs : [B, N, V] float32/float16/bfloat16
        Row n: the target distribution for the children of node n.
    draft_probs : [B, N, V] float or None
        Row n: the draft distribution of node n's children; None: deterministic drafts.
    tree : Tree
        N nodes, batch 1 or B, with P = ``tree.num_leaves`` paths.
    draft_tokens : [B, N] int32/int64
        The node tokens (entry 0 ignored).
    backend : str
        "auto", "cuda", "cpu" (the C++ twin) or "reference".
    out : (kappa, expected_len) or None
        Preallocated contiguous outputs.

    Returns (kappa, expected_len) float32 [B, P], paths in ``Tree.paths()`` order, rows with
    fewer leaves padded with 0."""
    return PATHS.call(backend, out, target_probs, draft_probs, tree, draft_tokens)


register_decl(PATHS)
