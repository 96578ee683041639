#include "specops/sample.h"

#include "host_parallel.h"
#include "host_simd.h"
#include "specops/prob_math.h"  // draw_host_chunked

namespace specops {

void sample_host(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride, RngArgs rng,
                 int32_t* out) {
  parallel_for(rows, vocab, [&](int64_t r) {  // rows are independent
    const float* p = probs + r * row_stride;
    out[r] = draw_host_chunked([p](int64_t v) { return mass(p[v]); }, vocab, rng.uniform(r, 0),
                               [p](int64_t lo, int64_t hi) { return mass_sum_host(p, lo, hi); });
  });
}

}  // namespace specops
