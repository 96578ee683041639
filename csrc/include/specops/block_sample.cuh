// Block-wide pieces shared by the CUDA sampling and verification kernels: float64 sums and the
// inverse-CDF draw  token = min{i : w_0 + ... + w_i > u * total}  over a weight functor w(i),
// in tiles of BLOCK entries in index order.  Same maths as draw_in_chunks (specops/prob_math.h)
// and reference.inverse_cdf; sums in double, so summation order only matters on ~1e-16 ties.
#pragma once
#include <stdint.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "specops/common.h"

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

// An argmax's (max, id) before any entry: every id is below it.
constexpr float kNoArg = 2147483647.f;

// The id of an argmax's (max, id), 0 for a row without an entry.
__device__ inline int arg_id(float2 r) { return r.y < kNoArg ? static_cast<int>(r.y) : 0; }

// Where a split draw's scan starts (BlockSampler::split_locate).
struct SplitStart {
  int64_t begin, until;  // the chunk holding the target: [begin, until)
  double before;         // the sum of the chunks before it
  double target, total;  // u * total, and the row's total
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

  // sum of w(i) >= 0 over [begin, end), in double; the result is valid on every thread.  Lanes
  // read consecutive entries (a warp's request: 128 bytes, 4 sectors).
  template <typename W>
  __device__ double sum(W w, int64_t begin, int64_t end) {
    __shared__ double s_total;
    double local = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += BLOCK) local += static_cast<double>(w(i));
    __syncthreads();
    const double total = Reduce(tmp.reduce).Sum(local);
    if (threadIdx.x == 0) s_total = total;
    __syncthreads();
    return s_total;
  }
  template <typename W>
  __device__ double sum(W w, int64_t vocab) {
    return sum(w, 0, vocab);
  }

  // min{i >= begin : running + w_begin + ... + w_i > target, w_i > 0}; else the last i >= begin
  // with w_i > 0; else 0.  Tiles of BLOCK * ITEMS entries: each tile's sum first (lanes read
  // consecutive entries: coalesced), and only in the tile where the running sum passes the
  // target a second read (from L1) with ITEMS consecutive entries per thread for the block scan;
  // nothing past that tile is read.  The running sum is the sum of the tile sums (double).
  // `until`: a tile boundary (the end of a split chunk): no tile straddles it.
  template <typename W>
  __device__ int inverse_cdf(W w, int64_t vocab, double target, int64_t begin = 0,
                             double running = 0.0, int64_t until = 0) {
    constexpr int ITEMS = 8;
    constexpr int64_t TILE = static_cast<int64_t>(BLOCK) * ITEMS;
    __shared__ int s_found, s_last;
    __shared__ double s_tile;
    if (threadIdx.x == 0) {
      s_found = -1;
      s_last = 0;
    }
    __syncthreads();
    int my_last = -1;
    for (int64_t base = begin, end; base < vocab; base = end) {
      end = base + TILE < vocab ? base + TILE : vocab;
      if (base < until && end > until) end = until;
      double local = 0.0;
#pragma unroll
      for (int e = 0; e < ITEMS; ++e) {
        const int64_t i = base + static_cast<int64_t>(e) * BLOCK + threadIdx.x;
        const double wi = i < end ? static_cast<double>(w(i)) : 0.0;
        local += wi;
        if (wi > 0.0) my_last = static_cast<int>(i);
      }
      __syncthreads();
      const double tile = Reduce(tmp.reduce).Sum(local);
      if (threadIdx.x == 0) s_tile = tile;
      __syncthreads();
      const double tile_sum = s_tile;  // the same on every thread: uniform branches below
      if (running + tile_sum > target) {
        const int64_t i0 = base + static_cast<int64_t>(threadIdx.x) * ITEMS;
        double wi[ITEMS];
        double mine = 0.0;
#pragma unroll
        for (int e = 0; e < ITEMS; ++e) {
          wi[e] = i0 + e < end ? static_cast<double>(w(i0 + e)) : 0.0;
          mine += wi[e];
        }
        double before;
        __syncthreads();
        Scan(tmp.scan).ExclusiveSum(mine, before);
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

  // A split draw's second pass (RowSplit, specops/common.h): from the row's chunk sums (one
  // per thread; chunks <= BLOCK) the total, target = u * total, and where the scan starts: the
  // first chunk whose inclusive prefix passes the target (else the last chunk with mass, else
  // chunk 0), with the exclusive prefix before it and the chunk's end (inverse_cdf's `until`).
  // Valid on every thread.
  __device__ SplitStart split_locate(const RowSplit& s, int64_t row, float u) {
    __shared__ int s_chunk;
    __shared__ double s_before, s_sum;
    const int j = threadIdx.x;
    const double x = j < s.chunks ? s.sums[row * s.chunks + j] : 0.0;
    double before, total;
    __syncthreads();
    Scan(tmp.scan).ExclusiveSum(x, before, total);
    const double t = static_cast<double>(u) * total;
    __syncthreads();
    const int hit =
        ReduceInt(tmp.reduce_int).Reduce(x > 0.0 && before + x > t ? j : INT32_MAX, MinOp());
    __syncthreads();
    const int last = ReduceInt(tmp.reduce_int).Reduce(x > 0.0 ? j : -1, MaxOp());
    if (j == 0) {
      s_chunk = hit != INT32_MAX ? hit : (last >= 0 ? last : 0);
      s_sum = total;
    }
    __syncthreads();
    if (j == s_chunk) s_before = before;
    __syncthreads();
    const SplitStart r{s.lo(s_chunk), s.lo(s_chunk) + s.chunk, s_before,
                       static_cast<double>(u) * s_sum, s_sum};
    __syncthreads();
    return r;
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
    return argmax_id(argmax_in(w, 0, vocab));
  }

  // (max, first maximal id) of w over [lo, hi), valid on thread 0; (-inf, kNoArg) when empty.
  template <typename W>
  __device__ float2 argmax_in(W w, int64_t lo, int64_t hi) {
    float2 best = make_float2(-INFINITY, kNoArg);
    for (int64_t i = lo + threadIdx.x; i < hi; i += BLOCK) {
      const float v = w(i);
      if (v > best.x) best = make_float2(v, static_cast<float>(i));
    }
    __syncthreads();
    return ReduceArg(tmp.reduce_arg).Reduce(best, MaxFloatIdx());
  }

  // The id of argmax_in's thread-0 result (0 for a row without an entry), on every thread.
  __device__ int argmax_id(float2 r) {
    __shared__ int s_arg;
    if (threadIdx.x == 0) s_arg = arg_id(r);
    __syncthreads();
    return s_arg;
  }
};

}  // namespace specops
