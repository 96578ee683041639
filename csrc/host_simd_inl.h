// AVX-512 helpers shared by csrc/host_simd.cpp and csrc/host_simd_probs.cpp (internal).
#pragma once
#include <stdint.h>

#include "host_simd.h"

#if defined(SPECOPS_HOST_AVX512)
namespace specops {
namespace simd {

// mass(x): x where 0 < x <= FLT_MAX, else 0 (NaN compares false)
SPECOPS_AVX512 inline __m512 mass16(__m512 v) {
  const __mmask16 ok = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ) &
                       _mm512_cmp_ps_mask(v, _mm512_set1_ps(3.402823466e+38f), _CMP_LE_OQ);
  return _mm512_maskz_mov_ps(ok, v);
}

// Append the ids base .. base + 15 selected by `keep` at ids[0..) (compressed in a register, then
// one full 16-wide store, so ids holds 16 spare entries: the memory form of vcompress is
// microcoded and slow on some CPUs, AMD Zen 4); returns how many were selected.  No branch on an
// empty mask: it mispredicts on sparse rows (top-k filtered).
SPECOPS_AVX512 inline int64_t append_ids16(__mmask16 keep, int64_t base, int32_t* ids) {
  const __m512i step = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  _mm512_storeu_si512(ids, _mm512_maskz_compress_epi32(
                               keep, _mm512_add_epi32(_mm512_set1_epi32(int32_t(base)), step)));
  return __builtin_popcount(keep);
}

// append_ids16, plus the selected entries of x at vals[0..) (16 spare entries likewise)
SPECOPS_AVX512 inline int64_t append16(__mmask16 keep, __m512 x, int64_t base, float* vals,
                                       int32_t* ids) {
  _mm512_storeu_ps(vals, _mm512_maskz_compress_ps(keep, x));
  return append_ids16(keep, base, ids);
}

}  // namespace simd
}  // namespace specops
#endif
