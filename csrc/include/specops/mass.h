// The NaN policy (DESIGN.md, "Rules for every op"), shared by every kernel that reads
// probabilities: an entry counts as probability mass only when it is positive and finite.
// NaN, negative, -0.0 and +inf entries count as 0 in every sum, acceptance test, residual,
// inverse CDF, argmax, Gumbel key and LANTERN pool (reference: specops.reference.sampling.mass).
#pragma once
#include <float.h>
#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
#include <xmmintrin.h>
#endif

#include "specops/philox.h"  // SPECOPS_HD

namespace specops {

// x if 0 < x <= FLT_MAX, else 0 (NaN compares false).  Branch-free on the x86 host: the ternary
// feeding a sum otherwise becomes a jump that mispredicts on rows of mixed sign.
SPECOPS_HD float mass(float x) {
#if defined(__CUDA_ARCH__)
  return (x > 0.f && x <= FLT_MAX) ? x : 0.f;
#elif defined(__x86_64__) || defined(_M_X64)
  const __m128 v = _mm_set_ss(x);
  const __m128 ok =
      _mm_and_ps(_mm_cmpgt_ss(v, _mm_setzero_ps()), _mm_cmple_ss(v, _mm_set_ss(FLT_MAX)));
  return _mm_cvtss_f32(_mm_and_ps(ok, v));
#else
  return (x > 0.f && x <= FLT_MAX) ? x : 0.f;
#endif
}

}  // namespace specops
