// Planted faults: kernels with one deliberate bug each, used only by tests/test_cuda_sim.py to
// prove that cuda_sim's detectors fire (and stay quiet on the corrected kernel):
//   removed_barrier    thread 0 publishes a block sum through shared memory and the barrier
//                      before the other threads read it is missing (BlockSampler::sum without
//                      its second __syncthreads): stale reads under the shuffled schedule, a data
//                      race under ThreadSanitizer (OS-thread mode);
//   divergent_barrier  a __syncthreads inside a branch taken by half of the block;
//   dynamic_smem_off_by_one / static_smem_off_by_one
//                      every thread writes shared slot tid + 1 of a BLOCK-entry buffer (dynamic
//                      shared memory sized by the launcher; a SmemArray);
//   divergent_shuffle  a warp shuffle that half of a warp skips.
// `ok_*` variants are the same kernels without the bug.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bind.h"
// after pybind11 and the Python headers: the SIMT layer's keyword macros
#include <cub/block/block_reduce.cuh>

#include "specops/launch.cuh"

namespace specops {
namespace {

constexpr int kBlock = 256;

// out[block * BLOCK + t] = the block's sum of (block + 1) * t, as every thread sees it.
template <bool BUG>
__global__ void broadcast_sum_kernel(int* out) {
  __shared__ typename cub::BlockReduce<int, kBlock>::TempStorage tmp;
  __shared__ int s_total;
  const int t = threadIdx.x;
  const int total = cub::BlockReduce<int, kBlock>(tmp).Sum(static_cast<int>(blockIdx.x + 1) * t);
  if (t == 0) s_total = total;
  if (!BUG) __syncthreads();
  out[blockIdx.x * kBlock + t] = s_total;
  __syncthreads();
}

template <bool BUG>
__global__ void branch_barrier_kernel(int* out) {
  __shared__ int s_x;
  if (threadIdx.x == 0) s_x = 7;
  if (!BUG || threadIdx.x < kBlock / 2) __syncthreads();
  out[threadIdx.x] = BUG ? 0 : s_x;  // (no racy read in the variant: TSan runs it too)
}

template <bool BUG>
__global__ void dynamic_smem_kernel(int* out) {
  SPECOPS_DYNAMIC_SMEM(int, buf);  // kBlock ints
  const int t = threadIdx.x;
  buf[BUG ? t + 1 : t] = t;
  __syncthreads();
  if (!BUG) out[t] = buf[kBlock - 1 - t];
}

template <bool BUG>
__global__ void static_smem_kernel(int* out) {
  __shared__ SmemArray<int, kBlock> buf;
  const int t = threadIdx.x;
  buf[BUG ? t + 1 : t] = t;
  __syncthreads();
  out[t] = buf[kBlock - 1 - t];
}

template <bool BUG>
__global__ void shuffle_kernel(int* out) {
  int v = threadIdx.x;
  if (!BUG || (threadIdx.x & 31) < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

// Each planted kernel with and without its bug; kernel names as the launch reports them.
struct Planted {
  const char* kind;
  const char* bug_name;
  const char* ok_name;
  void (*bug)(int*);
  void (*ok)(int*);
  unsigned blocks;
  size_t smem;
};
const Planted kPlanted[] = {
    {"removed_barrier", "broadcast_sum_kernel<BUG>", "broadcast_sum_kernel",
     broadcast_sum_kernel<true>, broadcast_sum_kernel<false>, 4, 0},
    {"divergent_barrier", "branch_barrier_kernel<BUG>", "branch_barrier_kernel",
     branch_barrier_kernel<true>, branch_barrier_kernel<false>, 1, 0},
    {"dynamic_smem_off_by_one", "dynamic_smem_kernel<BUG>", "dynamic_smem_kernel",
     dynamic_smem_kernel<true>, dynamic_smem_kernel<false>, 1, kBlock * sizeof(int)},
    {"static_smem_off_by_one", "static_smem_kernel<BUG>", "static_smem_kernel",
     static_smem_kernel<true>, static_smem_kernel<false>, 1, 0},
    {"divergent_shuffle", "shuffle_kernel<BUG>", "shuffle_kernel", shuffle_kernel<true>,
     shuffle_kernel<false>, 1, 0},
};

// kind: a planted kernel's name (with its bug) or "ok_" + the name (without).
std::vector<int> run(const std::string& kind) {
  const bool bug = kind.rfind("ok_", 0) != 0;
  const std::string k = bug ? kind : kind.substr(3);
  for (const Planted& p : kPlanted) {
    if (k != p.kind) continue;
    std::vector<int> out(p.blocks * kBlock, -1);
    const cudaError_t err =
        launch_kernel(bug ? p.bug_name : p.ok_name, bug ? p.bug : p.ok, dim3(p.blocks),
                      dim3(kBlock), p.smem, nullptr, out.data());
    if (err != cudaSuccess) throw std::runtime_error(cudaGetErrorString(err));
    return out;
  }
  throw std::invalid_argument("cuda_sim_planted: unknown kind " + kind);
}

}  // namespace

void bind_traffic_planted(pybind11::module_& m);  // planted_traffic.cpp

void bind_sim_checks(pybind11::module_& m) {
  bind_traffic_planted(m);
  m.def(
      "cuda_sim_planted",
      [](const std::string& kind) {
        pybind11::gil_scoped_release release;
        return run(kind);
      },
      "Run a planted-fault kernel (tests only); raises RuntimeError with cuda_sim's report.");
}

}  // namespace specops
