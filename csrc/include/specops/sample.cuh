// CUDA multinomial sampling: one block per row, two passes over the row (total, then a block
// scan that stops at the tile holding the target).  Same maths as the CPU twin (csrc/sample.cpp).
#pragma once
#include <cuda_runtime.h>

#include "specops/block_sample.cuh"
#include "specops/common.h"
#include "specops/mass.h"

namespace specops {

struct NonNegative {  // mass(p): NaN, negative and +inf entries count as 0
  const float* p;
  __device__ float operator()(int64_t i) const { return mass(p[i]); }
};

template <int BLOCK>
__global__ void sample_kernel(const float* __restrict__ probs, int64_t vocab, int64_t row_stride,
                              RngArgs rng, int32_t* __restrict__ out) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  const int64_t row = blockIdx.x;
  BlockSampler<BLOCK> sampler(tmp);
  const int tok = sampler.draw(NonNegative{probs + row * row_stride}, vocab, rng.uniform(row, 0));
  if (threadIdx.x == 0) out[row] = tok;
}

}  // namespace specops
