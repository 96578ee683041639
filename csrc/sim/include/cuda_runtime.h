// The <cuda_runtime.h> of the cuda_sim build: CUDA's keywords, built-in variables, vector types,
// intrinsics and the few runtime calls the launchers make, mapped onto the host SIMT layer
// (csrc/sim/cuda_sim.h).  Only what specops's kernels use; anything else fails to compile.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "cuda_sim.h"

#ifndef SPECOPS_CUDA_SIM
#error "the cuda_sim <cuda_runtime.h> is only for SPECOPS_CUDA_SIM builds"
#endif

// static: the emulated kernels get internal linkage, so they never merge with the nvcc build's
// host stubs of the same name (weak in CUDA 12's nvcc) in the one module.
#define __global__ static
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// One copy per block: blocks run one after another, so a static is the block's shared memory.
#define __shared__ static

#define threadIdx (::cuda_sim::ctx().thread_idx)
#define blockIdx (::cuda_sim::ctx().block_idx)
#define blockDim (::cuda_sim::ctx().block_dim)
#define gridDim (::cuda_sim::ctx().grid_dim)
#define warpSize 32

#define __syncthreads() ::cuda_sim::syncthreads(__FILE__, __LINE__)
#define __syncthreads_or(pred) ::cuda_sim::syncthreads_or((pred) ? 1 : 0, __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, lane_mask) ::cuda_sim::shfl_xor((mask), (v), (lane_mask))

using dim3 = ::cuda_sim::Dim3;

struct float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) double2 {
  double x, y;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline double2 make_double2(double x, double y) { return double2{x, y}; }

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

// Memory order: every fence is sequentially consistent (stronger than the GPU's, which is fine
// for kernels that are correct on the GPU).
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Atomics through the compiler's builtins: atomic across OS threads (SPECOPS_SIM_THREADS=os),
// relaxed like CUDA's (ordering comes from __threadfence and barriers, as on the GPU), so
// ThreadSanitizer sees no synchronisation the GPU would not give.
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
inline int atomicMin(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < old &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

// Runtime API.
using cudaStream_t = void*;
enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719,
};
enum cudaFuncAttribute : int { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline cudaError_t cudaGetLastError() {
  return static_cast<cudaError_t>(::cuda_sim::take_last_error());
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return ::cuda_sim::error_string(static_cast<::cuda_sim::Error>(e));
}
template <typename K>
inline cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  if (value < 0 || value > 227 * 1024) return cudaErrorInvalidValue;  // sm_90's opt-in limit
  ::cuda_sim::set_max_dynamic_smem(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}
