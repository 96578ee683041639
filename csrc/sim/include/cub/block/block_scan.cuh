// cub::BlockScan for the cuda_sim build (Sum scans), over the SIMT layer's barriers: each thread
// publishes its input, thread 0 scans them in thread order, every thread reads its prefix and
// the block aggregate (valid on every thread, as in cub).
#pragma once
#include "cub/block/sim_detail.cuh"

namespace cub {

template <typename T, int BLOCK_DIM_X>
class BlockScan {
 public:
  // One array, scanned in place: a later use of the storage (or of a union it shares) that a
  // missing barrier leaves unordered with this scan's reads overlaps them, as with cub.
  struct TempStorage {
    T data[BLOCK_DIM_X + 1];
  };

  explicit BlockScan(TempStorage& storage) : tmp_(storage) {}

  void InclusiveSum(T input, T& output) {
    T aggregate;
    InclusiveSum(input, output, aggregate);
  }
  void InclusiveSum(T input, T& output, T& aggregate) {
    const int tid = scan(input);
    output = tmp_.data[tid] + input;
    aggregate = tmp_.data[BLOCK_DIM_X];
  }
  void ExclusiveSum(T input, T& output) {
    T aggregate;
    ExclusiveSum(input, output, aggregate);
  }
  void ExclusiveSum(T input, T& output, T& aggregate) {
    const int tid = scan(input);
    output = tmp_.data[tid];
    aggregate = tmp_.data[BLOCK_DIM_X];
  }

 private:
  // data[i] <- exclusive prefix of the inputs (thread order), data[BLOCK] <- their total.
  int scan(T input) {
    const int tid = sim_detail::thread_rank<BLOCK_DIM_X>();
    tmp_.data[tid] = input;
    __syncthreads();
    if (tid == 0) {
      T run = T(0);
      for (int i = 0; i < BLOCK_DIM_X; ++i) {
        const T x = tmp_.data[i];
        tmp_.data[i] = run;
        run = run + x;
      }
      tmp_.data[BLOCK_DIM_X] = run;
    }
    __syncthreads();
    return tid;
  }

  TempStorage& tmp_;
};

}  // namespace cub
