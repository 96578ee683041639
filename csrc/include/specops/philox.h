// Counter-based Philox-4x32-10 (Salmon et al., Random123) shared by every backend.
//
// Stream convention (the same in the PyTorch reference, C++, CUDA and Triton):
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (draw, row, offset & 0xffffffff, offset >> 32)
//   u       = ((word0 >> 9) + 0.5) * 2^-23, a float32 in [2^-24, 1 - 2^-24], exact.
// (23 bits: with 24, the top cell's centre 1 - 2^-25 rounds to 1.0 in float32, and u = 1 would
// make -log(-log u) infinite in Gumbel top-k.)
// `row` is the flat row an op draws for, `draw` numbers the draws within that row.
#pragma once
#include <stdint.h>

#if defined(__CUDACC__)
#define SPECOPS_HD __host__ __device__ __forceinline__
#else
#define SPECOPS_HD inline
#endif

namespace specops {

struct Philox4 {
  uint32_t x[4];
};

SPECOPS_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

SPECOPS_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                 uint32_t k1) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  const uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(M0, c0, &hi0);
    uint32_t lo1 = mulhilo32(M1, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += W0;
    k1 += W1;
  }
  Philox4 r = {{c0, c1, c2, c3}};
  return r;
}

// u in (0, 1): 23 random bits, centred in their cell so log(u) and log(1 - u) are finite.
SPECOPS_HD float uint_to_unit_float(uint32_t bits) {
  return (static_cast<float>(bits >> 9) + 0.5f) * 1.1920928955078125e-07f;  // 2^-23
}

SPECOPS_HD float philox_uniform(uint64_t seed, uint64_t offset, uint32_t row, uint32_t draw) {
  Philox4 r =
      philox4x32_10(draw, row, static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return uint_to_unit_float(r.x[0]);
}

}  // namespace specops
