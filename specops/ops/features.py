"""Public features ops: row gathers, the drafter input, VVS's feature cache and path similarity.

Semantics in specops/reference/features.py; fast kernels in triton_kernels/features.py."""

from __future__ import annotations

import math
import numbers

import torch

from specops import _build, reference
from specops.ops import _common as c
from specops.ops._decl import OpDecl, Out, Ten, Value, register_decl

# the public functions gather_rows, drafter_inputs and path_similarity (and feature_cache_write,
# which FeatureCache.write runs, specops/ops/feature_cache.py): written from these declarations
# to specops/ops/_generated_features.py by scripts/gen_ops.py
__all__: list[str] = []

_BACKENDS = c.declare_backends(
    ("triton", "cpu", "reference"),
    "gather_rows",
    "drafter_inputs",
    "path_similarity",
    "FeatureCache",  # the class (resolve_backend("FeatureCache")); its write: feature_cache_write
)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_MAX_PATHS = 1024  # one program holds all P paths of a position


def _check_index_values(op, name, index, bound, what="index") -> None:
    """Validation mode: entries in [-1, bound)."""
    if c.validating() and index.numel() and ((index < -1) | (index >= bound)).any():
        bad = index[(index < -1) | (index >= bound)][0]
        raise ValueError(f"specops.{op}: {name} holds {what} {int(bad)} outside [-1, {bound})")


# gather_rows ----------------------------------------------------------------------------
def _check_gather(src, index, backend) -> None:
    c.check_tensor("gather_rows", "src", src, ndim=3, dtypes=_FLOATS)
    c.check_ids("gather_rows", "index", index, ndim=2, device=src.device)
    if index.shape[0] != src.shape[0]:
        raise ValueError(
            f"specops.gather_rows: index must have shape [{src.shape[0]}, M] (B from src), got "
            f"{tuple(index.shape)}"
        )
    _check_index_values("gather_rows", "index", index, src.shape[1])


def _triton_into(d: OpDecl, a, out) -> tuple:
    """The Triton entry ``d`` names (triton_kernels/features.py), which takes the flat
    arguments ``a`` in the declared order and writes a given output.  (The C++ twins' bindings
    make the output when not given: ``d.launch``.)"""
    if out is not None:
        (res,) = out
    else:
        (shape,) = d.out_shapes(a)
        res = a[0].new_empty(shape, dtype=d.out_dtype(a))
    d.triton_kernel()(*a, res)
    return (res,)


def _gather_kernel(be, a, out):
    return GATHER.launch(be, *a, out=out) if be != "triton" else _triton_into(GATHER, a, out)


GATHER = OpDecl(
    "gather_rows",
    args=(Ten("src", "B N H"), Ten("index", "B M")),
    outs=(Out("out", "B, M, H", dtype="src"),),
    backends=_BACKENDS,
    check=_check_gather,
    reference=lambda src, index: (reference.gather_rows(src, index),),
    kernel=_gather_kernel,
    triton="features:gather_rows_triton",
)
GATHER.public(
    reference.gather_rows,
    doc="""Rows gathered per request: out[b, j] = src[b, index[b, j]] -> [B, M, H].

    Parameters
    ----------
    src : [B, N, H] float32/float16/bfloat16
        The rows to read.
    index : [B, M] int32/int64
        The row of ``src`` for each output row; -1 reads as a zero row.
    backend : str
        "auto" (triton on CUDA, cpu on CPU), "triton", "cpu" (the C++ twin) or "reference".
    out : [B, M, H] src's dtype or None
        A preallocated output.

    Validation mode raises on out-of-range indices other than -1; fast mode reads them as
    zeros.""",
)


register_decl(GATHER)


# drafter_inputs -------------------------------------------------------------------------
def _check_drafter(embedding, tokens, features, step_embedding, backend) -> None:
    op = "drafter_inputs"
    c.check_probs(op, "embedding", embedding, ndim=2)
    dev, dt = embedding.device, embedding.dtype
    c.check_ids(op, "tokens", tokens, ndim=2, device=dev)
    b, m = tokens.shape
    c.check_tensor(op, "features", features, ndim=3, dtypes=(dt,), device=dev)
    if features.shape[:2] != (b, m):
        raise ValueError(
            f"specops.drafter_inputs: features must have shape [{b}, {m}, H] (B, M from tokens), "
            f"got {tuple(features.shape)}"
        )
    if step_embedding is not None:
        c.check_tensor(op, "step_embedding", step_embedding, ndim=(1, 3), dtypes=(dt,), device=dev)
        if step_embedding.dim() == 3 and step_embedding.shape[:2] != (b, m):
            raise ValueError(
                f"specops.drafter_inputs: step_embedding must have shape [S] or [{b}, {m}, S], "
                f"got {tuple(step_embedding.shape)}"
            )
    _check_index_values(op, "tokens", tokens, embedding.shape[0], "token id")


def _drafter_kernel(be, a, out):
    return DRAFTER.launch(be, *a, out=out) if be != "triton" else _triton_into(DRAFTER, a, out)


DRAFTER = OpDecl(
    "drafter_inputs",
    args=(
        Ten("embedding", "V E"),
        Ten("tokens", "B M"),
        Ten("features", "B M H"),
        Ten("step_embedding", "... S", optional=True),
    ),
    outs=(Out("out", "B, M, O", dtype="embedding"),),
    # O: the embedding, the features and the step embedding side by side
    sizes={
        "O": lambda E, H, step_embedding: (
            E + H + (0 if step_embedding is None else step_embedding.shape[-1])
        )
    },
    backends=_BACKENDS,
    check=_check_drafter,
    reference=lambda embedding, tokens, features, step_embedding: (
        reference.drafter_inputs(embedding, tokens, features, step_embedding),
    ),
    kernel=_drafter_kernel,
    triton="features:drafter_inputs_triton",
)
DRAFTER.public(
    reference.drafter_inputs,
    doc="""The EAGLE/HiViS drafter input in one kernel -> [B, M, E + H (+ S)].

    Parameters
    ----------
    embedding : [V, E] float32/float16/bfloat16
        The token embedding table.
    tokens : [B, M] int32/int64
        The tokens to embed; -1 padding gives a zero embedding row.
    features : [B, M, H] embedding's dtype
        The features concatenated after the embeddings.
    step_embedding : [S] or [B, M, S] embedding's dtype, or None
        Concatenated last; [S] is broadcast to every row.
    backend : str
        "auto" (triton on CUDA, cpu on CPU), "triton", "cpu" (the C++ twin) or "reference".
    out : [B, M, E + H (+ S)] embedding's dtype or None
        A preallocated output.

    The output is cat([embedding[tokens], features, step_embedding], -1).  All float tensors
    share one dtype (float32, float16 or bfloat16), which the output has.  Token ids outside
    [0, V) other than -1 raise in validation mode and give zero rows in fast mode.""",
)


register_decl(DRAFTER)


# path_similarity ------------------------------------------------------------------------
def _check_path_similarity(paths, codebook, alpha, stride, backend) -> None:
    op = "path_similarity"
    c.check_ids(op, "paths", paths, ndim=3)
    c.check_probs(op, "codebook", codebook, ndim=2, device=paths.device)
    b, p, length = paths.shape
    if p < 1 or length < 1 or p > _MAX_PATHS:
        raise ValueError(
            f"specops.path_similarity: paths must have shape [B, P, L] with 1 <= P <= "
            f"{_MAX_PATHS} and L >= 1, got {tuple(paths.shape)}"
        )
    if isinstance(stride, bool) or not isinstance(stride, numbers.Integral):
        raise TypeError(
            f"specops.path_similarity: stride must be an int >= 1, got {type(stride).__name__} "
            f"{stride!r}"
        )
    if stride < 1:
        raise ValueError(f"specops.path_similarity: stride must be an int >= 1, got {stride}")
    stride = min(int(stride), length)  # (as lowered: see PATH_SIMILARITY)
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(  # a tensor would need a host read; the op takes a Python float
            f"specops.path_similarity: alpha must be a float, got {type(alpha).__name__} {alpha!r}"
        )
    try:
        alpha = float(alpha)
    except OverflowError:
        raise ValueError(
            f"specops.path_similarity: alpha must be finite and >= 0, got {alpha!r}"
        ) from None
    if not (alpha >= 0.0 and alpha < float("inf")):
        raise ValueError(f"specops.path_similarity: alpha must be finite and >= 0, got {alpha}")
    last = (length - 1) // stride * stride  # the weights are alpha^l, l <= last, and alpha^stride
    if alpha > 1.0 and max(last, stride) * math.log(alpha) >= math.log(1.7e308):
        raise ValueError(
            f"specops.path_similarity: alpha must keep the weights alpha^l (l up to "
            f"{max(last, stride)} for L = {length}, stride = {stride}) finite in float64, "
            f"got {alpha}"
        )
    if c.validating() and paths.numel() and ((paths < 0) | (paths >= codebook.shape[0])).any():
        bad = paths[(paths < 0) | (paths >= codebook.shape[0])][0]
        raise ValueError(
            f"specops.path_similarity: paths holds token id {int(bad)} outside "
            f"[0, {codebook.shape[0]})"
        )


def _path_similarity_kernel(be, a, out):
    if a.paths.shape[1] < 2:  # P = 1 is the constant 1.0 on every backend (no kernel to run)
        res = reference.path_similarity(a.paths, a.codebook, alpha=a.alpha, stride=a.stride)
        return c.write_outs(out, (res,))
    if be != "triton":
        return PATH_SIMILARITY.launch(be, *a, out=out)
    return _triton_into(PATH_SIMILARITY, a, out)


PATH_SIMILARITY = OpDecl(
    "path_similarity",
    args=(
        Ten("paths", "B P L", fast_rank=3),
        Ten("codebook", "V C"),
        # fast path: alpha <= 1 (its powers cannot overflow), P >= 2 (P = 1 is the constant 1.0)
        Value(
            "alpha",
            (("alpha", "float"),),
            lower=lambda alpha: float(alpha),
            fast_if=lambda alpha: type(alpha) is float and 0.0 <= alpha <= 1.0,
            fast=lambda alpha: alpha,
        ),
        # every stride >= L reads position 0 alone: the same result, and no int64 overflow
        Value(
            "stride",
            (("stride", "SymInt"),),
            lower=lambda stride, paths: min(int(stride), paths.shape[2]),
            fast_if=lambda stride: type(stride) is int and stride >= 1,
            fast=lambda stride, paths: min(stride, paths.shape[2]),
        ),
    ),
    outs=(Out("out", "B", torch.float32),),
    backends=_BACKENDS,
    check=_check_path_similarity,
    reference=lambda paths, codebook, alpha, stride: (
        reference.path_similarity(paths, codebook, alpha=alpha, stride=stride),
    ),
    kernel=_path_similarity_kernel,
    triton="features:path_similarity_triton",
    fast_when=lambda paths: 2 <= paths.shape[1] <= _MAX_PATHS and paths.shape[2] >= 1,
)
PATH_SIMILARITY.public(
    reference.path_similarity,
    doc="""VVS's skip decision (Eq. 2): the weighted mean pairwise cosine similarity of paths
    -> [B].

    Parameters
    ----------
    paths : [B, P, L] int32/int64
        Token ids of P candidate paths per request, 1 <= P <= 1024, L >= 1.
    codebook : [V, C] float32/float16/bfloat16
        The VQ latent embeddings.
    alpha : float
        The base of the position weights alpha^l, finite and >= 0; alpha^l must stay finite
        in float64 for every compared l.
    stride : int
        The step between compared positions (l = 0, stride, 2 stride, ...), >= 1.
    backend : str
        "auto" (triton on CUDA, cpu on CPU), "triton", "cpu" (the C++ twin) or "reference".
    out : [B] float32 or None
        A preallocated output.

    The exponentially weighted mean pairwise cosine similarity of the P paths' codebook
    embeddings, float32.  With e = normalize(codebook[paths]) and the positions l = 0, stride,
    2 stride, ... < L: S_l = mean over ordered pairs i != j of <e_i,l, e_j,l>; result =
    sum_l alpha^l S_l / sum_l alpha^l.  P = 1 gives 1.0.  Ids outside [0, V) raise in validation
    mode and count as zero vectors in fast mode.  One program per request; float64 sums.""",
)


register_decl(PATH_SIMILARITY)


# feature cache --------------------------------------------------------------------------
def _check_positions(op, positions, batch, capacity, device) -> None:
    c.check_ids(op, "positions", positions, ndim=2, device=device)
    if positions.shape[0] != batch:
        raise ValueError(
            f"specops.{op}: positions must have shape [{batch}, M] (the cache's batch), "
            f"got {tuple(positions.shape)}"
        )
    _check_index_values(op, "positions", positions, capacity, "position")


def _check_step(op, step, batch, device) -> None:
    """``step``: an int32-range int, or an integer tensor [] / [1] / [batch]."""
    if isinstance(step, torch.Tensor):
        c.check_ids(op, "step", step, ndim=(0, 1), device=device)
        if step.numel() not in (1, batch):
            raise ValueError(
                f"specops.{op}: step must have shape [] or [{batch}], got {tuple(step.shape)}"
            )
        return
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"specops.{op}: step must be an int or an integer tensor, got {step!r}")
    if not -(2**31) <= step < 2**31:
        raise ValueError(f"specops.{op}: step must fit in int32 (|step| < 2**31), got {step}")


def _step_parts(step) -> tuple:
    """``step`` as the kernels take it: (int64-able tensor [1] / [B], 0) or (None, the int)."""
    return (step.reshape(-1), 0) if isinstance(step, torch.Tensor) else (None, step)


def _check_write(store, stamps, positions, feats, step, backend) -> None:
    op = "FeatureCache.write"
    batch, capacity, hidden = store.shape
    _check_positions(op, positions, batch, capacity, store.device)
    c.check_probs(op, "feats", feats, ndim=3, device=store.device)
    if feats.shape != (*positions.shape, hidden):
        raise ValueError(
            f"specops.{op}: feats must have shape [{positions.shape[0]}, "
            f"{positions.shape[1]}, {hidden}], got {tuple(feats.shape)}"
        )
    _check_step(op, step, batch, store.device)
    if c.validating() and positions.shape[1] > 1:
        srt = positions.sort(1).values
        if ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any():
            raise ValueError(f"specops.{op}: positions repeats a position within a row")


def _write_reference(store, stamps, positions, feats, step, step_value) -> None:
    step = step if step is not None else step_value
    reference.feature_cache_write(store, stamps, positions, feats, step)


def _write_kernel(be, a, out) -> None:
    store, stamps, positions, feats = a.store, a.stamps, a.positions, a.feats
    step_t, step_i = a.step, a.step_value
    if be == "cpu":
        if feats.dtype != store.dtype:
            feats = feats.to(store.dtype)  # the kernel moves rows of the store's dtype
        if step_t is not None and step_t.dtype != torch.int64:
            step_t = step_t.long()
        _build._C.feature_cache_write_cpu(store, stamps, positions, feats, step_t, step_i)
        return
    WRITE.triton_kernel()(store, stamps, positions, feats, step_t, step_i)


# FeatureCache.write: store[b, positions[b, j]] = feats[b, j], stamps[b, ...] = step
WRITE = OpDecl(
    "feature_cache_write",
    args=(
        Ten("store", "B C H"),
        Ten("stamps", "B C"),
        Ten("positions", "B M"),
        Ten("feats", "B M H"),
        Value(
            "step",
            (("step", "Tensor?"), ("step_value", "SymInt")),
            lower=_step_parts,
            fast_if=lambda step: type(step) is int and -2147483648 <= step < 2147483648,
            fast=lambda step: (None, step),
        ),
    ),
    outs=(),
    mutates=("store", "stamps"),
    backends=_BACKENDS,
    check=_check_write,
    reference=_write_reference,
    kernel=_write_kernel,
    triton="features:feature_cache_write_triton",
)
WRITE.public(
    reference.feature_cache_write,
    doc="""The write ``FeatureCache.write`` runs: store[b, positions[b, j]] = feats[b, j] and
    stamps[b, positions[b, j]] = step; -1 positions skipped.

    Parameters
    ----------
    store : [B, C, H] float32/float16/bfloat16
        The cache's features, written in place.
    stamps : [B, C] int32
        The step each slot was last written (-1: never), written in place.
    positions : [B, M] int32/int64
        The slots to write; -1 skips.
    feats : [B, M, H] float
        The rows to store.
    step : int or [] / [1] / [B] integer tensor
        The stamp.
    backend : str
        "auto", "triton", "cpu" (the C++ twin) or "reference".""",
)
register_decl(WRITE)
