"""Philox-4x32-10 as a Triton device function: the stream of csrc/include/specops/philox.h, and
the key and offset every sampling kernel reads (one tuple argument, ``rng``)."""

import triton
import triton.language as tl
from specops.triton_kernels._args import vec

# rng = (seed_ptr, seed_stride, seed_value, rows_per_seed, offset_ptr, offset_value): the types
# the kernels are compiled with (the ahead-of-time tests' signatures)
RNG_SIGNATURE = ("*i64", "i32", "i64", "i32", "*i64", "i64")


def rng_args(stream, rows, dummy):
    """``(rng, flags)`` for a launch over ``rows`` rows: ``rng`` the kernels' tuple argument,
    ``flags`` their HAS_SEED_PTR / HAS_OFFSET_PTR.  ``stream``: the call's random stream as one
    object, (seed, seed_value, offset, offset_value) (specops.ops ``Rng``): ``seed`` [1] / [n]
    int64 (row r reads entry r // (rows // n)) or None with the int ``seed_value``; ``offset``
    [1] or None with the int ``offset_value``; ``dummy`` stands for an absent tensor (never
    read)."""
    seed, seed_value, offset, offset_value = stream
    seed_ptr, seed_stride = vec(seed, dummy)
    offset_ptr, _ = vec(offset, dummy)  # one element, read at its address
    rows_per_seed = max(rows // seed.numel() if seed is not None else rows, 1)
    rng = (seed_ptr, seed_stride, _i64(seed_value), rows_per_seed, offset_ptr, _i64(offset_value))
    return rng, {"HAS_SEED_PTR": seed is not None, "HAS_OFFSET_PTR": offset is not None}


def _i64(v: int) -> int:
    """A Python int as the signed 64-bit value with the same low 64 bits (seeds may be given
    modulo 2^64)."""
    return (int(v) + 2**63) % 2**64 - 2**63


@triton.jit
def philox_key(rng, row, HAS_SEED_PTR: tl.constexpr, HAS_OFFSET_PTR: tl.constexpr):
    """(seed, offset) int64 of row ``row`` (an int64 scalar): the seed tensor's entry
    row // rows_per_seed or the seed value, the offset tensor's one element or the offset
    value (``rng`` as ``rng_args`` packs it)."""
    seed_ptr, seed_stride, seed_value, rows_per_seed, offset_ptr, offset_value = rng
    if HAS_SEED_PTR:
        seed = tl.load(seed_ptr + (row // rows_per_seed) * seed_stride)
    else:
        seed = seed_value + 0 * row
    if HAS_OFFSET_PTR:
        offset = tl.load(offset_ptr)
    else:
        offset = offset_value + 0 * row
    return seed.to(tl.int64), offset.to(tl.int64)


@triton.jit
def philox_uniform(seed, offset, row, draw):
    """float32 uniforms in (0, 1) for (seed, offset, row, draw); seed/offset are int64 scalars or
    tensors, row/draw integer tensors (broadcast)."""
    seed = seed.to(tl.int64)
    offset = offset.to(tl.int64)
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = draw.to(tl.uint32)
    c1 = row.to(tl.uint32)
    c2 = (offset & 0xFFFFFFFF).to(tl.uint32)
    c3 = ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    # broadcast all lanes to one shape
    zero = (c0 * 0) + (c1 * 0)
    c0 = c0 + zero
    c1 = c1 + zero
    c2 = c2 + zero
    c3 = c3 + zero
    k0 = k0 + zero
    k1 = k1 + zero
    M0: tl.constexpr = 0xD2511F53
    M1: tl.constexpr = 0xCD9E8D57
    W0: tl.constexpr = 0x9E3779B9
    W1: tl.constexpr = 0xBB67AE85
    for _ in tl.static_range(10):
        a0 = c0
        a2 = c2
        hi0 = tl.umulhi(a0, M0)
        lo0 = a0 * M0
        hi1 = tl.umulhi(a2, M1)
        lo1 = a2 * M1
        c0 = hi1 ^ c1 ^ k0
        c2 = hi0 ^ c3 ^ k1
        c1 = lo1
        c3 = lo0
        k0 = k0 + W0
        k1 = k1 + W1
    return ((c0 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
