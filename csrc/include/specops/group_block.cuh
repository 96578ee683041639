// GSD's grouped acceptance test with the vocabulary pass split over a block (prob_math.h
// group_sums runs it on one thread): each thread keeps the window of the entries it reads
// (y = thread, thread + BLOCK, ...: coalesced), the warps merge their lanes' windows, warp 0
// merges the warps', its first 2w lanes test one window entry each for membership (the code
// distance, c in order) and thread 0 adds the members in group_sums' order.  Same window, same
// members, same float64 sums: the same decision as the CPU twin, bit for bit.
#pragma once
#include <cuda_runtime.h>

#include "specops/launch.cuh"  // SmemArray
#include "specops/prob_math.h"

namespace specops {

// A window entry as one int64 score: key (w(y), y) = float bits of w >= 0 (monotone as
// integers) above the id, taken as is below x (larger = nearer) and negated above (larger =
// nearer), so both sides merge by a maximum; kNoEntry lies below every score.
constexpr int64_t kNoEntry = INT64_MIN;

__device__ __forceinline__ int64_t group_score(float w, int64_t y, bool below) {
  uint32_t bits;
  memcpy(&bits, &w, 4);
  const int64_t key = (static_cast<int64_t>(bits) << 32) | static_cast<int64_t>(y & 0xffffffff);
  return below ? key : -key;
}

__device__ __forceinline__ void group_unscore(int64_t score, bool below, float* w, int64_t* y) {
  const int64_t key = below ? score : -score;
  const uint32_t bits = static_cast<uint32_t>(key >> 32);
  memcpy(w, &bits, 4);
  *y = key & 0xffffffff;
}

__device__ __forceinline__ int64_t warp_max_i64(int64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}

template <int BLOCK>
struct GroupSmem {
  static constexpr int kWarps = BLOCK / 32;
  SmemArray<int64_t, kWarps * kMaxGroupWindow> warp_best;  // each warp's n best, best first
  SmemArray<int64_t, 2 * kMaxGroupWindow> best;            // the block's: below (n), then above (n)
  SmemArray<int, 2 * kMaxGroupWindow> member;
  bool accepted;
};

// The n best scores of one side over the block, best first, into sm.best[side * n ...] (every
// thread calls it; the lists are each thread's GroupWindow side, already best first).
template <int BLOCK>
__device__ void group_merge(const GroupWindow& g, bool below, GroupSmem<BLOCK>& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = g.n;
  const int m = below ? g.nlo : g.nhi;
  int at = 0;
  for (int j = 0; j < n; ++j) {  // n rounds: the lane holding the warp's best moves on
    const int64_t mine = at < m ? group_score(below ? g.lo_w[at] : g.hi_w[at],
                                              below ? g.lo_id[at] : g.hi_id[at], below)
                                : kNoEntry;
    const int64_t best = warp_max_i64(mine);
    if (mine == best && best != kNoEntry) ++at;  // scores are unique (the id)
    if (lane == 0) sm.warp_best[warp * kMaxGroupWindow + j] = best;
  }
  __syncthreads();
  if (warp == 0) {  // lane l walks warp l's list
    at = 0;
    for (int j = 0; j < n; ++j) {
      const int64_t mine = lane < GroupSmem<BLOCK>::kWarps && at < n
                               ? sm.warp_best[lane * kMaxGroupWindow + at]
                               : kNoEntry;
      const int64_t best = warp_max_i64(mine);
      if (mine == best && best != kNoEntry) ++at;
      if (lane == 0) sm.best[(below ? 0 : n) + j] = best;
    }
  }
  __syncthreads();
}

// accept x iff u * Q < P over x's group (prob_math.h group_sums), the pass over p's row split
// over the block; q == nullptr: Q's terms are 1 and 0.  Every thread calls it with the same
// arguments; the decision is returned to every thread.
template <int BLOCK>
__device__ bool block_group_accept(float u, const float* p, const float* q, int64_t vocab,
                                   int64_t x, const RelaxArgs& r, GroupSmem<BLOCK>& sm) {
  if (x < 0 || x >= vocab) return false;  // P = Q = 0
  GroupWindow g(mass(p[x]), x, r.window);
  for (int64_t y = threadIdx.x; y < vocab; y += BLOCK) g.add(mass(p[y]), y);
  group_merge<BLOCK>(g, true, sm);
  group_merge<BLOCK>(g, false, sm);
  const int n = g.n;
  const GroupCode c = group_code(r, x);
  if (threadIdx.x < 2 * n) {  // one window entry a thread
    const int j = threadIdx.x;
    const int64_t s = sm.best[j];
    bool in = false;
    if (s != kNoEntry) {
      float py;
      int64_t y;
      group_unscore(s, j < n, &py, &y);
      in = group_member(r, g.px, c, py, y);
    }
    sm.member[j] = in;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // (a non-member may be kNoEntry: never unscored)
    const auto entry = [&](int j, float* py, int64_t* y) {
      if (!sm.member[j]) return false;
      group_unscore(sm.best[j], j < n, py, y);
      return true;
    };
    const auto qw = [q](int64_t y) { return mass(q[y]); };
    float big_p, big_q;
    group_total(g.px, x, 2 * n, entry, qw, q != nullptr, &big_p, &big_q);
    sm.accepted = u * big_q < big_p;
  }
  __syncthreads();
  return sm.accepted;
}

}  // namespace specops
