// CUDA multinomial sampling: one block per row, two passes over the row (total, then a block
// scan that stops at the first tile containing the target).  Same maths as sample_row_host.
#pragma once
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include "specops/common.h"

namespace specops {

struct MinOp {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

template <int BLOCK>
__global__ void sample_kernel(const float* __restrict__ probs, int64_t vocab, int64_t row_stride,
                              RngArgs rng, int32_t* __restrict__ out) {
  using Reduce = cub::BlockReduce<double, BLOCK>;
  using Scan = cub::BlockScan<double, BLOCK>;
  using ReduceInt = cub::BlockReduce<int, BLOCK>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
    typename ReduceInt::TempStorage reduce_int;
  } tmp;
  __shared__ double s_total;
  __shared__ int s_found;
  __shared__ int s_last;

  const int64_t row = blockIdx.x;
  const float* p = probs + row * row_stride;

  double local = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += BLOCK) local += fmaxf(p[i], 0.f);
  const double total = Reduce(tmp.reduce).Sum(local);
  if (threadIdx.x == 0) {
    s_total = total;
    s_found = -1;
    s_last = 0;
  }
  __syncthreads();
  const double target = static_cast<double>(rng.uniform(row, 0)) * s_total;

  // Tiles of BLOCK elements in index order; each thread owns one element of a tile.
  double running = 0.0;
  for (int64_t base = 0; base < vocab; base += BLOCK) {
    const int64_t i = base + threadIdx.x;
    const double pi = i < vocab ? fmaxf(p[i], 0.f) : 0.f;
    double inclusive, tile_sum;
    __syncthreads();
    Scan(tmp.scan).InclusiveSum(pi, inclusive, tile_sum);
    const int hit = (pi > 0.f && running + inclusive > target) ? static_cast<int>(i) : INT32_MAX;
    const int last = pi > 0.f ? static_cast<int>(i) : -1;
    __syncthreads();
    const int first_hit = ReduceInt(tmp.reduce_int).Reduce(hit, MinOp());
    __syncthreads();
    const int tile_last = ReduceInt(tmp.reduce_int).Reduce(last, MaxOp());
    if (threadIdx.x == 0) {
      if (first_hit != INT32_MAX) s_found = first_hit;
      if (tile_last >= 0) s_last = tile_last;
    }
    __syncthreads();
    if (s_found >= 0) break;
    running += tile_sum;
  }
  if (threadIdx.x == 0) out[row] = s_found >= 0 ? s_found : s_last;
}

cudaError_t sample_cuda(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride,
                        RngArgs rng, int32_t* out, cudaStream_t stream);

}  // namespace specops
