#include "specops/sample.h"

#include "host_parallel.h"

namespace specops {

void sample_host(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride, RngArgs rng,
                 int32_t* out) {
  parallel_for(rows, [&](int64_t r) {  // rows are independent
    out[r] = sample_row_host(probs + r * row_stride, vocab, rng.uniform(r, 0));
  });
}

}  // namespace specops
