// probs_from_logits, C++ CPU twin (the GPU kernel is Triton: triton_kernels/probs.py).  Per flat
// row r of request b = r / rows_per_req, the semantics of specops/reference/probs.py:
//   l = u + s (c - u)   (float32, three roundings; -inf in c or u -> -inf; NaN s: l = c)
//   x = l / T           (NaN T: 1; T < 1e-5: one-hot of argmax l, lowest index on ties)
//   top-k (1 <= k < V): keep x >= tau_k, the k-th largest x (selection, no sort; ties kept)
//   w = exp(x - max x) on the kept entries (float32), Z = sum w (float64)
//   top-p (0 < p < 1): keep x >= tau_p = max{x_j : M(x_j) >= p Z}, M(t) = sum_{x_i >= t} w_i,
//                      found by quickselect on the mass (expected O(kept), no sort)
//   p_i = float32(float64(w_i) / sum_kept w) on kept entries, 0 elsewhere;
//   a row whose logits are all -inf: one-hot of token 0.
// Mass sums are float64 in another order than the reference's sorted cumsum: the kept set can
// differ only where M lands within rounding of p Z.
#pragma once
#include <stdint.h>

namespace specops {

struct ProbsArgs {
  const float* cond;    // [R, V], last dim contiguous
  int64_t cond_s0;      // row stride
  const float* uncond;  // [R, V] or nullptr (no CFG)
  int64_t uncond_s0;
  int64_t rows, vocab, rows_per_req;
  // per-request parameters: pointer [B] (stride in elements, 0 = one for all) or the scalar
  const float* temperature;
  int64_t temperature_s;
  float temperature_v;
  const int32_t* top_k;
  int64_t top_k_s;
  int64_t top_k_v;
  const float* top_p;
  int64_t top_p_s;
  float top_p_v;
  const float* cfg;
  int64_t cfg_s;
  float cfg_v;
  float* out;  // [R, V] contiguous
};

void probs_from_logits_host(const ProbsArgs& args);

}  // namespace specops
