// Planted kernels with known global-memory traffic, used only by tests/test_traffic_cuda.py to
// prove that the traffic counters (csrc/sim/traffic/traffic.cpp) count what a GPU's l1tex counts.
// BLOCK = 256 threads, float32 src and dst of n entries (n a multiple of 4 * BLOCK):
//   vec16     dst = src as float4: a warp request moves 32 x 16 B = 512 B = 16 sectors
//   scalar4   dst = src as float: 32 x 4 B = 128 B = 4 sectors a request
//   stride32  dst[g] = src[32 g] for g < n / 32: 32 lanes 128 B apart, 32 sectors a load request
//   twice     the scalar4 pass done twice (bytes and requests double)
//   one_cta   block 0 does the scalar4 pass alone, the others return at once
//   tail      the scalar4 pass over n - 40 entries: the last warp's request has 24 active lanes
//             (3 sectors), the warp after it none (no request)
//   barrier   a tile of 256 entries a block through shared memory, reversed: load, barrier,
//             store, barrier; global traffic as scalar4, two barriers a tile
//   atomic    every thread adds 1 to ((unsigned*)dst)[i % 32] with atomicAdd after reading
//             src[i]: a load request of 4 sectors, then the atomic as a read and a write request
//             of the same 4 sectors (32 lanes, 32 consecutive words)
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "bind.h"
// after pybind11 and the Python headers: the SIMT layer's keyword macros
#include <cuda_runtime.h>

#include "specops/launch.cuh"

namespace specops {
namespace {

constexpr int kBlock = 256;

__global__ void vec16_kernel(const float4* src, float4* dst, int64_t n4) {
  for (int64_t i = blockIdx.x * kBlock + threadIdx.x; i < n4; i += gridDim.x * kBlock)
    dst[i] = src[i];
}

__global__ void scalar4_kernel(const float* src, float* dst, int64_t n, int passes, int only) {
  if (only >= 0 && static_cast<int>(blockIdx.x) != only) return;
  const int64_t first = only >= 0 ? threadIdx.x : blockIdx.x * kBlock + threadIdx.x;
  const int64_t step = only >= 0 ? kBlock : gridDim.x * kBlock;
  for (int r = 0; r < passes; ++r)
    for (int64_t i = first; i < n; i += step) dst[i] = src[i] + static_cast<float>(r);
}

__global__ void barrier_kernel(const float* src, float* dst, int64_t n) {
  __shared__ float tile[kBlock];
  for (int64_t base = blockIdx.x * kBlock; base < n; base += gridDim.x * kBlock) {
    tile[threadIdx.x] = src[base + threadIdx.x];
    __syncthreads();
    dst[base + threadIdx.x] = tile[kBlock - 1 - threadIdx.x];
    __syncthreads();
  }
}

__global__ void atomic_kernel(const float* src, unsigned* counts, int64_t n) {
  for (int64_t i = blockIdx.x * kBlock + threadIdx.x; i < n; i += gridDim.x * kBlock)
    if (src[i] >= 0.0f) atomicAdd(&counts[i % 32], 1u);
}

__global__ void stride32_kernel(const float* src, float* dst, int64_t n) {
  for (int64_t g = blockIdx.x * kBlock + threadIdx.x; g < n / 32; g += gridDim.x * kBlock)
    dst[g] = src[32 * g];
}

void run(const std::string& kind, const TensorArg& src, const TensorArg& dst, unsigned grid) {
  const ArgCheck c{"cuda_sim_traffic_planted", false};
  c.contiguous(c.need(src, "src", DType::f32, 1), "src");
  const int64_t n = src.size[0];
  c.contiguous(c.need(dst, "dst", DType::f32, 1, {n}), "dst");
  if (n % (4 * kBlock) != 0) c.fail("src", "must have a multiple of 1024 entries");
  const float* s = src.as<const float>();
  float* d = dst.as<float>();
  cudaError_t err;
  if (kind == "vec16")
    err = launch_kernel("vec16_kernel", vec16_kernel, dim3(grid), dim3(kBlock), 0, nullptr,
                        reinterpret_cast<const float4*>(s), reinterpret_cast<float4*>(d), n / 4);
  else if (kind == "scalar4" || kind == "twice" || kind == "one_cta" || kind == "tail")
    err = launch_kernel("scalar4_kernel", scalar4_kernel, dim3(grid), dim3(kBlock), 0, nullptr, s,
                        d, kind == "tail" ? n - 40 : n, kind == "twice" ? 2 : 1,
                        kind == "one_cta" ? 0 : -1);
  else if (kind == "barrier")
    err = launch_kernel("barrier_kernel", barrier_kernel, dim3(grid), dim3(kBlock), 0, nullptr, s,
                        d, n);
  else if (kind == "atomic")
    err = launch_kernel("atomic_kernel", atomic_kernel, dim3(grid), dim3(kBlock), 0, nullptr, s,
                        reinterpret_cast<unsigned*>(d), n);
  else if (kind == "stride32")
    err = launch_kernel("stride32_kernel", stride32_kernel, dim3(grid), dim3(kBlock), 0, nullptr, s,
                        d, n);
  else
    throw std::invalid_argument("cuda_sim_traffic_planted: unknown kind " + kind);
  if (err != cudaSuccess) throw std::runtime_error(cudaGetErrorString(err));
}

}  // namespace

void bind_traffic_planted(pybind11::module_& m) {
  m.def(
      "cuda_sim_traffic_planted",
      [](const std::string& kind, const TensorArg& src, const TensorArg& dst, unsigned grid) {
        Outputs outs;  // records src and dst: the counters' global memory
        pybind11::gil_scoped_release release;
        run(kind, src, dst, grid);
      },
      "Run a planted kernel of known traffic on float32 CPU tensors (tests only).");
}

}  // namespace specops
