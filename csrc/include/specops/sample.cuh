// CUDA multinomial sampling, same maths as the CPU twin (csrc/sample.cpp).  Large batches: one
// block per row, two passes over the row (total, then a block scan that stops at the tile
// holding the target).  Small batches (RowSplit): pass 1 spreads each row over `chunks` blocks
// that sum one chunk each; pass 2, one block per row, scans only from the chunk holding
// u * total.
#pragma once
#include <cuda_runtime.h>

#include "specops/block_sample.cuh"
#include "specops/common.h"
#include "specops/prob_math.h"  // MassW

namespace specops {

template <int BLOCK>
__global__ void sample_kernel(const float* __restrict__ probs, int64_t vocab, int64_t row_stride,
                              RngArgs rng, int32_t* __restrict__ out) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  const int64_t row = blockIdx.x;
  BlockSampler<BLOCK> sampler(tmp);
  const int tok = sampler.draw(MassW{probs + row * row_stride}, vocab, rng.uniform(row, 0));
  if (threadIdx.x == 0) out[row] = tok;
}

// Pass 1 of the split draw: block (row, c) writes sum(mass(p)) over chunk c of its row.
template <int BLOCK>
__global__ void sample_split_sum_kernel(const float* __restrict__ probs, int64_t vocab,
                                        int64_t row_stride, RowSplit split) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  const int64_t row = blockIdx.x / split.chunks, c = blockIdx.x % split.chunks;
  const double s = BlockSampler<BLOCK>(tmp).sum(MassW{probs + row * row_stride}, split.lo(c),
                                                split.hi(c, vocab));
  if (threadIdx.x == 0) split.sums[blockIdx.x] = s;
}

// Pass 2: one block per row; token = min{i : p_0 + ... + p_i > u * total}, the scan starting
// at the chunk whose prefix passes the target.
template <int BLOCK>
__global__ void sample_split_draw_kernel(const float* __restrict__ probs, int64_t vocab,
                                         int64_t row_stride, RngArgs rng, RowSplit split,
                                         int32_t* __restrict__ out) {
  static_assert(BLOCK >= kSplitMaxChunks, "pass 2 reads one chunk sum per thread");
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  const int64_t row = blockIdx.x;
  BlockSampler<BLOCK> sampler(tmp);
  const SplitStart at = sampler.split_locate(split, row, rng.uniform(row, 0));
  const int tok = sampler.inverse_cdf(MassW{probs + row * row_stride}, vocab, at.target, at.begin,
                                      at.before, at.until);
  if (threadIdx.x == 0) out[row] = tok;
}

}  // namespace specops
