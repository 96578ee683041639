// Small pieces every kernel shares: the per-row random stream and the argument structs.
#pragma once
#include <stdint.h>

#include "specops/philox.h"

namespace specops {

// Where a row's seed and offset come from: a device/host pointer when the caller passed
// tensors (CUDA-graph friendly), otherwise the plain values.  Row r uses
// seed[(r / rows_per_seed) * seed_stride]; a uniform is read with its tensor's strides, so sliced
// and expanded (stride 0) seed and uniforms tensors are read as they are.
struct RngArgs {
  const int64_t* seed_ptr;    // [num_seeds] or nullptr
  int64_t seed_stride;        // elements between consecutive seeds (0: one seed for all rows)
  int64_t seed_value;         // used when seed_ptr is nullptr
  int64_t rows_per_seed;      // rows sharing one seed (one request's rows)
  const int64_t* offset_ptr;  // [1] or nullptr
  int64_t offset_value;       // used when offset_ptr is nullptr
  const float* uniforms;      // caller-supplied uniforms [rows, draws_per_row] or nullptr
  int64_t uniforms_s0, uniforms_s1;  // their strides (elements) along rows and draws
  int64_t draws_per_row;             // width of `uniforms` (the draws a row may ask for)

  SPECOPS_HD uint64_t seed_of(int64_t row) const {
    return static_cast<uint64_t>(seed_ptr ? seed_ptr[(row / rows_per_seed) * seed_stride]
                                          : seed_value);
  }
  SPECOPS_HD uint64_t offset() const {
    return static_cast<uint64_t>(offset_ptr ? offset_ptr[0] : offset_value);
  }
  // The draw-th uniform of a row, in (0, 1).
  SPECOPS_HD float uniform(int64_t row, int64_t draw) const {
    if (uniforms) return uniforms[row * uniforms_s0 + draw * uniforms_s1];
    return philox_uniform(seed_of(row), offset(), static_cast<uint32_t>(row),
                          static_cast<uint32_t>(draw));
  }
};

}  // namespace specops
