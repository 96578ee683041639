// cub::BlockReduce for the cuda_sim build, over the SIMT layer's barriers.  The result is valid on
// thread 0 only (as cub documents; other threads get a poison value), and the temp storage may be
// reused only after a barrier, which the kernels place and the emulation checks by running the
// threads in a shuffled order (and ThreadSanitizer, in the OS-thread stage).  Sums associate as
// cub's warp-reduction algorithm does: a shuffle tree within each warp of 32, then the warps'
// aggregates in order.
#pragma once
#include <limits>
#include <type_traits>

#include "cub/block/sim_detail.cuh"

namespace cub {

template <typename T, int BLOCK_DIM_X>
class BlockReduce {
 public:
  struct TempStorage {
    T value[BLOCK_DIM_X];
  };

  explicit BlockReduce(TempStorage& storage) : tmp_(storage) {}

  template <typename Op>
  T Reduce(T input, Op op) {
    return reduce(input, op, BLOCK_DIM_X);
  }
  template <typename Op>
  T Reduce(T input, Op op, int num_valid) {
    return reduce(input, op, num_valid);
  }
  T Sum(T input) { return reduce(input, sim_detail::Plus(), BLOCK_DIM_X); }

 private:
  template <typename Op>
  T reduce(T input, Op op, int num_valid) {
    const int tid = sim_detail::thread_rank<BLOCK_DIM_X>();
    tmp_.value[tid] = input;
    __syncthreads();
    T result = sim_detail::poison<T>();
    if (tid == 0) result = sim_detail::tree_reduce(tmp_.value, num_valid, op);
    return result;
  }

  TempStorage& tmp_;
};

}  // namespace cub
