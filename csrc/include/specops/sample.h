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

// ---- sampling without replacement (Gumbel top-k) ----------------------------------------------
// key_v = log(p_v) - log(-log(u_v)) in float32 (entries with mass(p_v) = 0 never chosen); the
// k largest keys, largest first, ties to the lower id.
struct KeyId {
  float key;
  int32_t id;
};

// The uniform a Gumbel key uses: Philox's lie in [2^-24, 1 - 2^-24]; a caller's is clamped to
// [2^-24, 1]: below 2^-24 (0 and NaN included) counts as 2^-24, so an entry with mass always has
// a key > -inf and can be chosen, and above 1 (+inf included) counts as 1, whose key is +inf
// (first; ties to the lower id), never NaN.  The same rule in
// reference.sample_without_replacement.
SPECOPS_HD float gumbel_uniform(float u) { return u > 0x1p-24f ? (u < 1.f ? u : 1.f) : 0x1p-24f; }

// a ranks strictly before b: larger key, or equal key and lower id.
SPECOPS_HD bool key_before(KeyId a, KeyId b) {
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}

struct SampleWorArgs {
  const float* probs;  // [R, V], last dim contiguous
  int64_t row_stride, rows, vocab, k;
  RngArgs rng;   // row r = flat row r; draw v = entry v (draws_per_row = V)
  int32_t* out;  // [R, k]
};

// Gumbel top-k of one row: out[0..k) (-1 padded), uniforms at draws draw0 + v of `row`.
void gumbel_topk_host(const float* p, int64_t vocab, const RngArgs& rng, int64_t row, int64_t draw0,
                      int64_t k, int32_t* out);
void sample_wor_host(const SampleWorArgs& args);

}  // namespace specops
