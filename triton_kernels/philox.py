"""Philox-4x32-10 as a Triton device function: the stream of csrc/include/specops/philox.h."""

import triton
import triton.language as tl


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
