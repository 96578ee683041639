"""Triton multinomial sampling: one program per row, inverse CDF with float64 sums
(see specops/reference/sampling.py)."""

import torch
import triton
import triton.language as tl
from specops.triton_kernels._args import Strided, launch, out_buffer, unit_rows, vec
from specops.triton_kernels.philox import philox_key, philox_uniform, rng_args
from specops.triton_kernels.verify import _inverse_cdf


@triton.jit
def _sample_kernel(
    probs,
    row_stride,
    vocab,
    rng,
    uniforms,
    u_stride,
    out,
    HAS_SEED_PTR: tl.constexpr,
    HAS_OFFSET_PTR: tl.constexpr,
    HAS_UNIFORMS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    p_row = probs + row * row_stride
    if HAS_UNIFORMS:
        u = tl.load(uniforms + row * u_stride)
    else:
        seed, offset = philox_key(rng, row, HAS_SEED_PTR, HAS_OFFSET_PTR)
        u = tl.sum(
            philox_uniform(seed, offset, row + tl.zeros([1], tl.int64), tl.zeros([1], tl.int32)),
            axis=0,
        )
    # first i with cumsum of mass(p) > u * total, among positive entries; else the last
    # positive entry, else 0 (the inverse CDF verify_chain draws its final token with, weight
    # mode 0; NaN, negative and +inf entries count as 0)
    none = -1 + 0 * row  # no draft token: mode 0 reads neither q nor x
    zero = u.to(tl.float64) * 0.0
    tok = _inverse_cdf(p_row, p_row, none, zero, zero, u, vocab, 0, False, BLOCK)
    tl.store(out + row, tok.to(tl.int32))


def sample_triton(p, rng, uniforms, out):
    """p [rows, V], out int32 with ``rows`` elements (row-major; a non-contiguous out is written
    through a temporary); ``rng`` the random stream as ``rng_args`` takes it (seed [1] / [n]:
    row r reads entry r // (rows // n)); uniforms with ``rows`` elements (row-major), any
    strides."""
    rows, vocab = p.shape
    if rows == 0:
        return out
    res, back = out_buffer("sample", "out", out)
    p = unit_rows(p)
    block = min(4096, triton.next_power_of_2(vocab))
    rng, flags = rng_args(rng, rows, p)
    u, u_stride = vec(uniforms, p)
    launch(
        _sample_kernel,
        (rows,),
        Strided(p),
        p.stride(0),
        vocab,
        rng,
        u,
        u_stride,
        res,
        **flags,
        HAS_UNIFORMS=uniforms is not None,
        BLOCK=block,
    )
    if back is not None:
        back.copy_(res)
    return out


__all__ = ["sample_triton", "torch"]
