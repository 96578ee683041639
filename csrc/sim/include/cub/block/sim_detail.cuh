// Helpers of the cuda_sim cub shims.
#pragma once
#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace cub {
namespace sim_detail {

struct Plus {
  template <typename T>
  T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

// The caller's rank; the block must have exactly BLOCK threads (cub's template argument).
template <int BLOCK>
int thread_rank() {
  const ::cuda_sim::ThreadCtx& c = ::cuda_sim::ctx();
  if (static_cast<int>(c.block_dim.x * c.block_dim.y * c.block_dim.z) != BLOCK)
    ::cuda_sim::fault("cub block primitive of " + std::to_string(BLOCK) +
                      " threads used in a block of " +
                      std::to_string(c.block_dim.x * c.block_dim.y * c.block_dim.z));
  return c.tid;
}

// What a thread other than 0 gets from a reduction: NaN for floating point, a large
// odd-looking value otherwise (bytes 0xA5).
template <typename T>
T poison() {
  if constexpr (std::is_floating_point<T>::value) {
    return std::numeric_limits<T>::quiet_NaN();
  } else {
    T v;
    std::memset(static_cast<void*>(&v), 0xA5, sizeof(T));
    return v;
  }
}

// cub's BLOCK_REDUCE_WARP_REDUCTIONS order: within each warp of 32 a shuffle-down tree
// (offsets 1, 2, 4, 8, 16: lane i folds in lane i + offset), then the warps' results in order.
template <typename T, typename Op>
T tree_reduce(const T* v, int n, Op op) {
  T total = v[0];
  for (int base = 0; base < n; base += 32) {
    const int len = n - base < 32 ? n - base : 32;
    T lane[32];
    for (int i = 0; i < len; ++i) lane[i] = v[base + i];
    for (int off = 1; off < 32; off *= 2)
      for (int i = 0; i + off < len; i += 2 * off) lane[i] = op(lane[i], lane[i + off]);
    total = base == 0 ? lane[0] : op(total, lane[0]);
  }
  return total;
}

}  // namespace sim_detail
}  // namespace cub
