// Vectorised host passes over a probability row (AVX-512 where the CPU has it, checked at run
// time; the same maths scalar otherwise).  Used by the C++ CPU twins' hot loops; results equal the
// scalar functors' (specops/verify.h) entry by entry, and sums differ only by summation order
// (float64, 1e-16 level, as between any two backends).
//   r_v      = max(mass(p_v) - mass(q_v), 0)      (q == nullptr: q = one-hot(x))
//   n_v      = float32(float64(r_v) / s)          (normalised residual)
#pragma once
#include <stdint.h>

namespace specops {

// sum over v in [lo, hi) of float64(r_v)
double resid_sum_host(const float* p, const float* q, int64_t x, int64_t lo, int64_t hi);
// sum over v in [lo, hi) of float64(n_v)
double norm_resid_sum_host(const float* p, const float* q, int64_t x, double s, int64_t lo,
                           int64_t hi);
// sum over v in [lo, hi) of float64(mass(p_v))
double mass_sum_host(const float* p, int64_t lo, int64_t hi);
// The entries of [lo, hi) with mass(p_v) > 0, in order: idx[j] = v, pos[j] = mass(p_v); returns
// their count (idx/pos hold hi - lo entries).
int64_t compact_positive_host(const float* p, int64_t lo, int64_t hi, int32_t* idx, float* pos);

}  // namespace specops
