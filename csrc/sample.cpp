#include "specops/sample.h"

namespace specops {

void sample_host(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride, RngArgs rng,
                 int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = sample_row_host(probs + r * row_stride, vocab, rng.uniform(r, 0));
  }
}

}  // namespace specops
