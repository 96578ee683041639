"""Public verification ops: verify_chain, verify_tree, path_acceptance (verify_jacobi: jacobi.py).

Each op is declared here; its public function (specops/ops/_generated_verify.py, written by
scripts/gen_ops.py) checks shapes/dtypes/devices (always) and values (validation mode only), then
runs the declaration (torch.library define/impl, with a fake kernel for torch.compile; eager
calls skip the dispatcher, and with backend "auto" go to the binding directly).  The semantics,
including which Philox (row, draw) every random decision uses, are documented in
``specops/reference/verify.py``; every backend follows them token for token.
Backends: verify_chain, verify_tree and path_acceptance have "cuda" (CUDA
kernels), "cpu" (their C++ twins) and "reference"; verify_chain also has "triton"
(``triton_kernels/verify.py``: GPUs without the CUDA build, e.g. ROCm; "auto" takes it on a GPU
when the CUDA kernels are not built, never the interpreter on the CPU)."""

from __future__ import annotations

import torch

from specops.ops import _common as c
from specops.ops import _verify_checks as vc
from specops.ops._decl import OpDecl, Out, RelaxArg, RngArg, Scalar, Ten, TreeArg, register_decl
from specops.reference import verify as rv
from specops.reference.verify import ChainResult, Grouping, Relaxation, TreeResult

# the public functions verify_chain, verify_tree and path_acceptance: written from these
# declarations to specops/ops/_generated_verify.py by scripts/gen_ops.py
__all__ = ["Relaxation", "Grouping"]


# checks ---------------------------------------------------------------------------------------
# verify_chain ---------------------------------------------------------------------------------
def _check_chain(target_probs, draft_tokens, draft_probs, num_draft, seed, offset, relax, greedy,
                 uniforms, block, backend) -> None:  # fmt: skip
    op = "verify_chain"
    b, k1, v = vc.check_target(op, target_probs, backend)
    dev = target_probs.device
    k = k1 - 1
    c.check_ids(op, "draft_tokens", draft_tokens, ndim=2, device=dev)
    c.check_tensor(op, "draft_tokens", draft_tokens, shape=(b, k))
    vc.check_draft_probs(op, draft_probs, b, k, v, dev)
    if num_draft is not None:
        c.check_ids(op, "num_draft", num_draft, device=dev, shape=(b,))
    greedy = vc.check_bool(op, "greedy", greedy)
    block = vc.check_bool(op, "block", block)
    nb, _ = vc.check_relax(op, relax, v, dev)
    if greedy and nb is not None:
        raise ValueError(f"specops.{op}: relax cannot be combined with greedy=True")
    if block and (greedy or nb is not None):
        raise ValueError(f"specops.{op}: block=True cannot be combined with greedy or relax")
    c.check_rng(op, seed, offset, dev, b)
    vc.check_uniforms(op, uniforms, b, k + 1, dev)
    vc.check_values(op, target_probs, draft_probs, draft_tokens, v)
    if (
        c.validating()
        and num_draft is not None
        and num_draft.numel()
        and ((num_draft < 0) | (num_draft > k)).any()
    ):
        raise ValueError(f"specops.{op}: num_draft values must be in [0, {k}]")


def _chain_reference(target_probs, draft_tokens, draft_probs, num_draft, rng, neighbors, delta,
                     codebook, group_window, group_p, group_d, image_start, greedy, uniforms,
                     block):  # fmt: skip
    relax = vc.relax_of(neighbors, delta, codebook, group_window, group_p, group_d, image_start)
    seed, offset = rng.reference(target_probs.device)
    r = rv.verify_chain(target_probs, draft_tokens, draft_probs, num_draft=num_draft, seed=seed,
                        offset=offset, relax=relax, greedy=greedy,
                        uniforms=uniforms, block=block)  # fmt: skip
    return r.tokens, r.num_accepted


CHAIN = OpDecl(
    "verify_chain",
    args=(
        vc.target_probs("B N V"),
        Ten("draft_tokens", "B K", form=vc.id_rows),
        vc.draft_probs("B K V"),
        Ten("num_draft", "B", optional=True, form=vc.counts),
        RngArg(batch="target_probs"),
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


CHAIN.public(
    rv.verify_chain,
    result=lambda r: ChainResult(*r),
    doc="""Chain speculative sampling: verify K drafts per request against the target, lossless.

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
    relax : Relaxation, Grouping or None
        LANTERN relaxed acceptance, or GSD grouped acceptance (both lossy); None: exact.
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
    ``specops.reference.verify_chain`` except on exact rounding ties of the float64 sums.""",
)

register_decl(CHAIN)


# verify_tree ----------------------------------------------------------------------------------
def _check_tree_op(target_probs, tree, draft_tokens, draft_probs, without_replacement, seed,
                   offset, relax, greedy, uniforms, backend) -> None:  # fmt: skip
    op = "verify_tree"
    b, n, v, dev = vc.check_tree_rows(op, target_probs, tree, draft_tokens, draft_probs, backend)
    vc.check_bool(op, "without_replacement", without_replacement)
    greedy = vc.check_bool(op, "greedy", greedy)
    nb, _ = vc.check_relax(op, relax, v, dev)
    if greedy and nb is not None:
        raise ValueError(f"specops.{op}: relax cannot be combined with greedy=True")
    c.check_rng(op, seed, offset, dev, b)
    vc.check_uniforms(op, uniforms, b, n, dev)
    vc.check_values(op, target_probs, draft_probs, draft_tokens, v, tree=True)


def _tree_reference(target_probs, first_child, next_sibling, width, draft_tokens, draft_probs,
                    without_replacement, rng, neighbors, delta, codebook, group_window, group_p,
                    group_d, image_start, greedy, uniforms):  # fmt: skip
    relax = vc.relax_of(neighbors, delta, codebook, group_window, group_p, group_d, image_start)
    seed, offset = rng.reference(target_probs.device)
    r = rv.verify_tree(target_probs, vc.TreeArrays(first_child, next_sibling), draft_tokens,
                       draft_probs, without_replacement=without_replacement, seed=seed,
                       offset=offset, relax=relax, greedy=greedy,
                       uniforms=uniforms, width=width)  # fmt: skip
    return r.path, r.tokens, r.num_accepted


TREE = OpDecl(
    "verify_tree",
    args=(
        vc.target_probs("B N V"),
        TreeArg(("first_child", "next_sibling"), (("width", "path_width"),), form=vc.tree_array),
        Ten("draft_tokens", "B N", form=vc.id_rows),
        vc.draft_probs("B N V"),
        Scalar("without_replacement", "bool"),
        RngArg(batch="target_probs"),
        RelaxArg(),
        Scalar("greedy", "bool"),
        Ten("uniforms", "B N", optional=True),
    ),
    outs=(Out("path", "B, width"), Out("tokens", "B, width"), Out("num_accepted", "B")),
    backends=("cuda", "cpu", "reference"),
    check=_check_tree_op,
    reference=_tree_reference,
)


TREE.public(
    rv.verify_tree,
    result=lambda r: TreeResult(*r),
    doc="""Tree speculative sampling (recursive rejection sampling, siblings in index order).

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
    relax : Relaxation, Grouping or None
        LANTERN relaxed acceptance, or GSD grouped acceptance (both lossy); None: exact.
    greedy : bool
        Argmax verification.
    uniforms : [B, N] float32 or None
        Replaces the draws: draw n - 1 tests node n, draw N - 1 is the final sample.
    backend : str
        "auto", "cuda", "cpu" (the C++ twin) or "reference".
    out : (path, tokens, num_accepted) or None
        Preallocated contiguous outputs.

    Returns ``TreeResult(path, tokens [B, D+1] int32, num_accepted [B] int32)``.  Exact
    semantics: ``specops.reference.verify_tree``.""",
)

register_decl(TREE)


# path_acceptance ------------------------------------------------------------------------------
def _check_paths(target_probs, draft_probs, tree, draft_tokens, backend) -> None:
    op = "path_acceptance"
    _, _, v, _ = vc.check_tree_rows(op, target_probs, tree, draft_tokens, draft_probs, backend)
    vc.check_values(op, target_probs, draft_probs, draft_tokens, v, tree=True)


def _paths_reference(target_probs, draft_probs, parents, num_paths, draft_tokens):
    return rv._path_acceptance(target_probs, draft_probs, parents, draft_tokens, num_paths)


PATHS = OpDecl(
    "path_acceptance",
    args=(
        vc.target_probs("B N V"),
        vc.draft_probs("B N V"),
        TreeArg(("parents",), (("num_paths", "num_leaves"),), form=vc.tree_array),
        Ten("draft_tokens", "B N", form=vc.id_rows),
    ),
    outs=(
        Out("kappa", "B, num_paths", torch.float32),
        Out("expected_len", "B, num_paths", torch.float32),
    ),  # fmt: skip
    backends=("cuda", "cpu", "reference"),
    check=_check_paths,
    reference=_paths_reference,
)


PATHS.public(
    rv.path_acceptance,
    doc="""VSD path acceptance: per root-to-leaf path, kappa = prod_i min(1, p_i/q_i) and
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
    fewer leaves padded with 0.""",
)

register_decl(PATHS)
