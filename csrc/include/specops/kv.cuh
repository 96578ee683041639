// CUDA commit_kv: one launch for every layer, K and V, and request (maths and the alias-safety
// argument in kv.h).
//
// Grid (row chunks, 2 * layers, batch); a block owns one (request, layer, K/V) slab and a
// contiguous chunk of blockDim.x vectors of Vec (16/8/4/2/1 bytes) of the row.
//   1. thread 0 reads cs = seqlens[b]; the threads check the entries in parallel
//      (commit_entry), m = the first invalid index (shared atomicMin); the source and
//      destination byte offsets of every entry go to shared memory.
//   2. request b's seqlens advances once every block of b has read cs: each block's thread 0
//      bumps counters[b] after a fence; the last one writes cs + m and resets the counter to 0
//      (so the workspace is zero again for the next launch on the stream).
//   3. each thread moves its vector of the row for i = 0 .. m-1, TILE moves at a time: all
//      TILE loads, then all TILE stores (loads in flight together; tile order is what makes
//      overlapping moves safe).
#pragma once
#include <cuda_runtime.h>

#include "specops/kv.h"
#include "specops/launch.cuh"

namespace specops {

template <typename Vec, int TILE>
__global__ void commit_kv_kernel(CommitKVArgs a, int32_t* __restrict__ counters,
                                 int32_t blocks_per_request) {
  SPECOPS_DYNAMIC_SMEM(int64_t, s_off);  // [2 * max_moves]: source offsets, then destinations
  __shared__ int64_t s_cs;
  __shared__ int s_m;
  const int64_t b = blockIdx.z;
  const int64_t layer = blockIdx.y >> 1;
  const int kv = static_cast<int>(blockIdx.y & 1);
  const int64_t n = a.max_moves;

  if (threadIdx.x == 0) {
    s_cs = a.seqlens[b];
    s_m = static_cast<int>(n);
  }
  __syncthreads();
  const int64_t cs = s_cs;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t so, d;
    if (!commit_entry(a, b, cs, i, &so, &d)) atomicMin(&s_m, static_cast<int>(i));
    s_off[i] = so;
    s_off[n + i] = d;
  }
  __syncthreads();
  const int m = s_m;

  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&counters[b], 1) == blocks_per_request - 1) {
      a.seqlens[b] = static_cast<int32_t>(cs + m);
      atomicExch(&counters[b], 0);
    }
  }

  const int64_t lane = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (lane * static_cast<int64_t>(sizeof(Vec)) >= a.row_bytes) return;
  char* slab = commit_slab(a, layer, kv) + lane * static_cast<int64_t>(sizeof(Vec));
  for (int i0 = 0; i0 < m; i0 += TILE) {
    Vec v[TILE];
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
      const int i = i0 + t;
      if (i < m && s_off[i] != s_off[n + i]) v[t] = *reinterpret_cast<const Vec*>(slab + s_off[i]);
    }
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
      const int i = i0 + t;
      if (i < m && s_off[i] != s_off[n + i]) *reinterpret_cast<Vec*>(slab + s_off[n + i]) = v[t];
    }
  }
}

}  // namespace specops
