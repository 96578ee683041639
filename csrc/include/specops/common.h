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

// Token ids arrive as int32 or int64 tensors; read either without a conversion kernel.
struct TokenView {
  const void* data;
  bool is64;
  SPECOPS_HD int64_t operator[](int64_t i) const {
    return is64 ? static_cast<const int64_t*>(data)[i]
                : static_cast<int64_t>(static_cast<const int32_t*>(data)[i]);
  }
};

constexpr int kMaxGroupWindow = 16;  // GSD's window w (RelaxArgs::window) at most

struct RelaxArgs {
  const int32_t* neighbors;  // LANTERN: [V, k] or nullptr (exact verification)
  int64_t k;
  double delta;
  // GSD grouped acceptance (prob_math.h group_sums): codebook [code_rows, code_dim] float32
  // contiguous, the codes of ids image_start .. image_start + code_rows - 1, or nullptr.
  const float* codebook = nullptr;
  int64_t code_rows = 0, code_dim = 0;
  int window = 0;      // w in [1, kMaxGroupWindow]
  float p_thr = 0.f;   // |p(y) - p(x)| < p_thr (float32)
  double d_thr = 0.0;  // sum_c (e_x[c] - e_y[c])^2 < d_thr (float64)
  int64_t image_start = 0;
};

// A row's draw split over several CTAs (the CUDA sample and verify_chain at small batch, where one
// CTA per row would leave most SMs idle): pass 1 runs `chunks` CTAs per row, CTA c summing
// entries [c * chunk, (c + 1) * chunk) into sums[row * chunks + c]; pass 2 runs one CTA per row
// that adds the chunk sums, finds the chunk holding u * total and scans from there.
struct RowSplit {
  int64_t chunk = 0;       // entries per CTA
  int64_t chunks = 1;      // CTAs per row; 1: no split (one launch, one CTA per row)
  double* sums = nullptr;  // [rows, chunks] float64 workspace
  // chunk c of a row of `vocab` entries: [lo(c), hi(c, vocab))
  SPECOPS_HD int64_t lo(int64_t c) const { return c * chunk; }
  SPECOPS_HD int64_t hi(int64_t c, int64_t vocab) const {
    return lo(c) + chunk < vocab ? lo(c) + chunk : vocab;
  }
};

// The split geometry: about kSplitCtas CTAs in pass 1 (two per SM of a 132-SM H100/H200: a
// fixed number, so the geometry, and with it every sum's order, is the same on every GPU and
// under cuda_sim), chunks of at least kSplitMinChunk entries (a CTA's work must pay for its
// launch slot), at most kSplitMaxChunks a row (pass 2 reads one chunk sum per thread).
constexpr int64_t kSplitCtas = 264;
constexpr int64_t kSplitMinChunk = 2048;
constexpr int64_t kSplitMaxChunks = 256;
SPECOPS_HD RowSplit row_split(int64_t rows, int64_t vocab) {
  RowSplit s;
  int64_t n = rows > 0 ? kSplitCtas / rows : 1;
  const int64_t by_size = vocab / kSplitMinChunk;
  n = n < by_size ? n : by_size;
  n = n < kSplitMaxChunks ? n : kSplitMaxChunks;
  if (n < 2) return s;
  s.chunk = (vocab + n - 1) / n;
  s.chunk = (s.chunk + 31) / 32 * 32;  // whole 128-byte lines per chunk
  s.chunks = (vocab + s.chunk - 1) / s.chunk;
  return s;
}

}  // namespace specops
