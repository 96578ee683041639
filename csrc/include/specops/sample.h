// Multinomial sampling by inverse CDF with one uniform per row:
//   token = min{ i : p_0 + ... + p_i > u * sum(p) }.
// Sums accumulate in double on every backend, so summation order moves the boundaries by
// ~1e-16 and backends agree except on such ties.  Rows need not be normalised; entries are read
// through mass() (NaN, negative and +inf count as 0).  A row whose scan never passes the target
// (rounding, or no positive mass) yields its last token with positive probability, or 0 if there
// is none.
#pragma once
#include <stdint.h>

#include "specops/common.h"
#include "specops/mass.h"

namespace specops {

// CPU twin of the CUDA kernel's per-row work.
inline int32_t sample_row_host(const float* p, int64_t vocab, float u) {
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += mass(p[i]);
  const double target = static_cast<double>(u) * total;
  double running = 0.0;
  int32_t last_positive = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float pi = mass(p[i]);
    if (pi > 0.f) {
      running += pi;
      last_positive = static_cast<int32_t>(i);
      if (running > target) return static_cast<int32_t>(i);
    }
  }
  return last_positive;
}

void sample_host(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride, RngArgs rng,
                 int32_t* out);

}  // namespace specops
