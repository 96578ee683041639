"""specops.sample: one multinomial draw per row of a probability tensor."""

from __future__ import annotations

import torch

from specops import reference
from specops.ops import _common as c
from specops.ops._decl import OpDecl, Out, RngArg, Scalar, Ten, register_decl
from specops.ops._verify_checks import f32_rows

# the public functions sample and sample_without_replacement: written from these declarations
# to specops/ops/_generated_sample.py by scripts/gen_ops.py
__all__: list[str] = []


def _check(probs, seed, offset, uniforms, backend) -> None:
    c.check_probs("sample", "probs", probs, ndim=range(1, 8), backend=backend)
    dev = probs.device
    if probs.shape[-1] == 0:
        raise ValueError(
            f"specops.sample: probs must have a non-empty last dim, got {tuple(probs.shape)}"
        )
    lead = tuple(probs.shape[:-1])
    c.check_rng("sample", seed, offset, dev, lead[0] if lead else 1)
    if uniforms is not None:
        c.check_tensor(
            "sample", "uniforms", uniforms, dtypes=(torch.float32,), device=dev, shape=lead
        )
    c.check_values_probs("sample", "probs", probs)


def _reference(probs, rng, uniforms):
    seed, offset = rng.reference(probs.device)
    return (reference.sample(probs, seed=seed, offset=offset, uniforms=uniforms),)


def _kernel(be, a, out):
    """Triton and the compiled kernels read [rows, V] float32 rows and write [rows] int32 (a
    strided ``out`` through a contiguous temporary)."""
    probs, uniforms, rng = a.probs, a.uniforms, a.rng
    lead, v = tuple(probs.shape[:-1]), probs.shape[-1]
    res = out[0] if out is not None else torch.empty(lead, dtype=torch.int32, device=probs.device)
    p = f32_rows(probs.reshape(-1, v))
    rows = p.shape[0]
    if rows == 0:
        return (res,)
    dst = res if res.is_contiguous() else torch.empty(lead, dtype=torch.int32, device=res.device)
    if be == "triton":
        SAMPLE.triton_kernel()(p, rng, uniforms, dst)
    else:
        u = uniforms.reshape(rows, 1) if uniforms is not None else None
        SAMPLE.launch(be, *a._replace(probs=p, uniforms=u), out=(dst.view(-1),))
    if dst is not res:
        res.copy_(dst)
    return (res,)


# Fastest first as the last GPU rows measured: Triton ahead of CUDA at every sample shape of
# bench/results/h200-940f467.csv, so "auto" takes Triton on a GPU.  The CUDA kernel has changed
# since (bench/ledger.json, entry cuda-row-split): the next lease's rows decide again.
SAMPLE = OpDecl(
    "sample",
    args=(
        Ten("probs", "... V", fast_rank=2),
        RngArg(batch="probs"),
        Ten("uniforms", "...", optional=True),
    ),
    outs=(Out("tokens", "...", contiguous=False),),
    backends=("triton", "cuda", "cpu", "reference"),
    check=_check,
    reference=_reference,
    kernel=_kernel,
    triton="sample:sample_triton",
    fast_when=lambda uniforms: uniforms is None,  # the binding takes them [rows, 1]
)


SAMPLE.public(
    reference.sample,
    doc="""One token per row of ``probs`` -> [...] int32.

    Parameters
    ----------
    probs : [..., V] float32/float16/bfloat16
        Non-negative weights; need not sum to 1.
    seed : int or [] / [1] / [B] int64
        Philox key; a tensor [B] gives one per request along dim 0.
    offset : int or [] / [1] int64
        Philox counter offset.
    uniforms : [...] float32 or None
        Replaces the Philox draws, one per row.
    backend : str
        "auto" (triton on CUDA, cpu on CPU), "triton", "cuda", "cpu" (the C++ twin) or
        "reference".
    out : [...] int32 or None
        A preallocated output (CUDA graphs).

    Inverse CDF with one uniform per row: token = min{i : cumsum(p)_i > u * sum(p)}; in fast
    mode NaN, negative and +inf entries count as 0 (never drawn), and a row with no positive
    finite mass gives token 0.""",
)

register_decl(SAMPLE)


def _check_wor(probs, k, seed, offset, uniforms, backend) -> None:
    op = "sample_without_replacement"
    c.check_probs(op, "probs", probs, ndim=range(1, 8), backend=backend)
    dev = probs.device
    if probs.shape[-1] == 0:
        raise ValueError(
            f"specops.{op}: probs must have a non-empty last dim, got {tuple(probs.shape)}"
        )
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"specops.{op}: k must be an int, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"specops.{op}: k must be >= 1, got {k}")
    c.check_rng(op, seed, offset, dev, probs.shape[0] if probs.dim() > 1 else 1)
    if uniforms is not None:
        c.check_tensor(
            op, "uniforms", uniforms, dtypes=(torch.float32,), device=dev, shape=tuple(probs.shape)
        )
        if c.validating() and not ((uniforms >= 0) & (uniforms <= 1)).all():
            raise ValueError(f"specops.{op}: uniforms must be in [0, 1] (NaN and +-inf are not)")
    c.check_values_probs(op, "probs", probs)


def _wor_reference(probs, k, rng, uniforms):
    seed, offset = rng.reference(probs.device)
    return (reference.sample_without_replacement(probs, k, seed=seed, offset=offset,
                                                 uniforms=uniforms),)  # fmt: skip


def _wor_kernel(be, a, out):
    """The compiled kernels read [rows, V] float32 rows and write [rows, k]."""
    probs, k, uniforms = a.probs, a.k, a.uniforms
    v = probs.shape[-1]
    lead = tuple(probs.shape[:-1])
    p = f32_rows(probs.reshape(-1, v))
    rows = p.shape[0]
    given = out[0] if out is not None else None  # [..., k] contiguous (checked by run)
    u = uniforms.reshape(rows, v) if uniforms is not None else None
    (res,) = WOR.launch(
        be,
        *a._replace(probs=p, uniforms=u),
        out=(given.view(rows, k) if given is not None else None,),
    )
    return (given if given is not None else res.view(*lead, k),)


WOR = OpDecl(
    "sample_without_replacement",
    args=(
        Ten("probs", "... V", fast_rank=2),
        Scalar("k", "int"),
        RngArg(batch="probs"),
        Ten("uniforms", "... V", optional=True),
    ),
    outs=(Out("tokens", "..., k"),),
    backends=("cuda", "cpu", "reference"),
    check=_check_wor,
    reference=_wor_reference,
    kernel=_wor_kernel,
)


WOR.public(
    reference.sample_without_replacement,
    doc="""k distinct tokens per row of ``probs``, in the order of sequential sampling without
    replacement -> [..., k] int32.

    Parameters
    ----------
    probs : [..., V] float32/float16/bfloat16
        Non-negative weights; need not sum to 1.
    k : int
        Tokens per row, >= 1.
    seed : int or [] / [B] int64
        Philox key; a tensor [B] gives one per request along dim 0 (flat row r, draw v =
        entry v).
    offset : int or [] / [1] int64
        Philox counter offset.
    uniforms : [..., V] float32 or None
        Replaces the draws; in [0, 1] (validation mode checks it; in fast mode every backend
        clamps them to [2^-24, 1], NaN counting as 2^-24).
    backend : str
        "auto", "cuda", "cpu" (the C++ twin) or "reference".
    out : [..., k] int32 or None
        A preallocated contiguous output.

    Gumbel top-k: key_v = log(p_v) - log(-log(u_v)) with one uniform per entry; the k largest
    keys, largest first.  Zero-probability entries (and, in fast mode, NaN, negative and +inf
    ones) are never chosen: a row with fewer than k positive finite entries is padded with -1.
    Exact semantics: ``specops.reference.sample_without_replacement``; the keys' float32 logs
    may differ in the last bit between torch.log and the kernels' logf, so ids agree except
    where two keys tie within a few ulps.""",
)

register_decl(WOR)
