// Block-wide pieces shared by the CUDA sampling and verification kernels: float64 sums and the
// inverse-CDF draw  token = min{i : w_0 + ... + w_i > u * total}  over a weight functor w(i),
// in tiles of BLOCK entries in index order.  Same maths as inverse_cdf_host (specops/verify.h)
// and reference.inverse_cdf; sums in double, so summation order only matters on ~1e-16 ties.
#pragma once
#include <stdint.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace specops {

struct MinOp {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};
struct MaxFloatIdx {  // (value, index) max; ties -> lower index
  __device__ float2 operator()(float2 a, float2 b) const {
    if (a.x > b.x) return a;
    if (b.x > a.x) return b;
    return a.y <= b.y ? a : b;
  }
};

template <int BLOCK>
struct BlockSampler {
  using Reduce = cub::BlockReduce<double, BLOCK>;
  using Scan = cub::BlockScan<double, BLOCK>;
  using ReduceInt = cub::BlockReduce<int, BLOCK>;
  using ReduceArg = cub::BlockReduce<float2, BLOCK>;
  union TempStorage {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
    typename ReduceInt::TempStorage reduce_int;
    typename ReduceArg::TempStorage reduce_arg;
  };

  TempStorage& tmp;
  __device__ explicit BlockSampler(TempStorage& t) : tmp(t) {}

  // sum of w(i) >= 0 over [0, vocab), in double; the result is valid on every thread.
  template <typename W>
  __device__ double sum(W w, int64_t vocab) {
    __shared__ double s_total;
    double local = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += BLOCK) local += static_cast<double>(w(i));
    __syncthreads();
    const double total = Reduce(tmp.reduce).Sum(local);
    if (threadIdx.x == 0) s_total = total;
    __syncthreads();
    return s_total;
  }

  // min{i : w_0 + ... + w_i > target, w_i > 0}; else the last i with w_i > 0; else 0.
  // Tiles of BLOCK * ITEMS entries, ITEMS consecutive ones per thread: each tile's sum first
  // (one block reduction), the scan only in the tile where the running sum passes the target,
  // and nothing past it.  The running sum is the sum of the tile sums (double).
  template <typename W>
  __device__ int inverse_cdf(W w, int64_t vocab, double target) {
    constexpr int ITEMS = 8;
    __shared__ int s_found, s_last;
    __shared__ double s_tile;
    if (threadIdx.x == 0) {
      s_found = -1;
      s_last = 0;
    }
    __syncthreads();
    double running = 0.0;
    int my_last = -1;
    for (int64_t base = 0; base < vocab; base += static_cast<int64_t>(BLOCK) * ITEMS) {
      const int64_t i0 = base + static_cast<int64_t>(threadIdx.x) * ITEMS;
      double wi[ITEMS];
      double local = 0.0;
#pragma unroll
      for (int e = 0; e < ITEMS; ++e) {
        wi[e] = i0 + e < vocab ? static_cast<double>(w(i0 + e)) : 0.0;
        local += wi[e];
        if (wi[e] > 0.0) my_last = static_cast<int>(i0 + e);
      }
      __syncthreads();
      const double tile = Reduce(tmp.reduce).Sum(local);
      if (threadIdx.x == 0) s_tile = tile;
      __syncthreads();
      const double tile_sum = s_tile;  // the same on every thread: uniform branches below
      if (running + tile_sum > target) {
        double before;
        __syncthreads();
        Scan(tmp.scan).ExclusiveSum(local, before);
        double c = running + before;
        int hit = INT32_MAX;
#pragma unroll
        for (int e = 0; e < ITEMS; ++e) {
          c += wi[e];
          if (hit == INT32_MAX && wi[e] > 0.0 && c > target) hit = static_cast<int>(i0 + e);
        }
        __syncthreads();
        const int first_hit = ReduceInt(tmp.reduce_int).Reduce(hit, MinOp());
        if (threadIdx.x == 0 && first_hit != INT32_MAX) s_found = first_hit;
        __syncthreads();
        if (s_found >= 0) break;
      }
      running += tile_sum;
    }
    if (s_found < 0) {  // rounding past the end (or no mass): the last id with w_i > 0, else 0
      __syncthreads();
      const int last = ReduceInt(tmp.reduce_int).Reduce(my_last, MaxOp());
      if (threadIdx.x == 0 && last >= 0) s_last = last;
    }
    __syncthreads();
    const int tok = s_found >= 0 ? s_found : s_last;
    __syncthreads();
    return tok;
  }

  // The draw itself: total, then the scan to u * total.
  template <typename W>
  __device__ int draw(W w, int64_t vocab, float u) {
    const double total = sum(w, vocab);
    return inverse_cdf(w, vocab, static_cast<double>(u) * total);
  }

  // argmax of w over [0, vocab), ties -> lowest index (the first maximal id).
  template <typename W>
  __device__ int argmax(W w, int64_t vocab) {
    __shared__ int s_arg;
    float2 best = make_float2(-INFINITY, 2147483647.f);
    for (int64_t i = threadIdx.x; i < vocab; i += BLOCK) {
      const float v = w(i);
      if (v > best.x) best = make_float2(v, static_cast<float>(i));
    }
    __syncthreads();
    const float2 r = ReduceArg(tmp.reduce_arg).Reduce(best, MaxFloatIdx());
    if (threadIdx.x == 0) s_arg = r.y < 2147483647.f ? static_cast<int>(r.y) : 0;
    __syncthreads();
    return s_arg;
  }
};

}  // namespace specops
