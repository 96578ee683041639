// Multinomial sampling by inverse CDF with one uniform per row:
//   token = min{ i : p_0 + ... + p_i > u * sum(p) }.
// Sums accumulate in double on every backend, so summation order moves the boundaries by
// ~1e-16 and backends agree except on such ties.  Rows need not be normalised; entries are read
// through mass() (NaN, negative and +inf count as 0).  A row whose scan never passes the target
// (rounding, or no positive mass) yields its last token with positive probability, or 0 if there
// is none.  The CPU twin (csrc/sample.cpp) takes float64 chunk sums in one vectorised pass and
// scans entry by entry only inside the chunk that holds u * sum(p) (draw_host_chunked).
#pragma once
#include <stdint.h>

#include "specops/common.h"
#include "specops/mass.h"

namespace specops {

void sample_host(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride, RngArgs rng,
                 int32_t* out);

}  // namespace specops
