// What lets one kernel source build two ways: by nvcc for the GPU, and as host C++ over the SIMT
// emulation of csrc/sim (SPECOPS_CUDA_SIM: backend "cuda_sim", which runs the same device code
// on the CPU in CI).  The launchers (csrc/*.cu) compute grid, block and shared memory once and
// launch through launch_kernel, so both builds run the same launch configuration.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <string>

// The launchers' namespace: specops::gpu (nvcc) or specops::sim (cuda_sim); csrc/launchers.h
// declares both.
#ifdef SPECOPS_CUDA_SIM
#define SPECOPS_LAUNCH_NS sim
#else
#define SPECOPS_LAUNCH_NS gpu
#endif

// A kernel's dynamic shared memory as a T* named `name` (16-byte aligned).  cuda_sim fills it
// with 0xff bytes per block and checks that nothing was written past the launch's size.
#ifdef SPECOPS_CUDA_SIM
#define SPECOPS_DYNAMIC_SMEM(T, name) T* name = ::cuda_sim::dynamic_smem<T>()
#else
#define SPECOPS_DYNAMIC_SMEM(T, name) extern __shared__ __align__(16) T name[]
#endif

namespace specops {

// A fixed-size shared-memory array; its index is bounds-checked under cuda_sim.
template <typename T, int N>
struct SmemArray {
  T data[N];
  __device__ __forceinline__ T& operator[](int64_t i) {
#ifdef SPECOPS_CUDA_SIM
    if (i < 0 || i >= N) ::cuda_sim::fault_index(i, N);
#endif
    return data[i];
  }
  __device__ __forceinline__ const T& operator[](int64_t i) const {
#ifdef SPECOPS_CUDA_SIM
    if (i < 0 || i >= N) ::cuda_sim::fault_index(i, N);
#endif
    return data[i];
  }
};

// The launchers' return value: "" on success, else the error's text (one per build: the two
// cudaGetErrorString differ).
namespace SPECOPS_LAUNCH_NS {
inline std::string error_text(cudaError_t err) {
  return err == cudaSuccess ? std::string() : std::string(cudaGetErrorString(err));
}
}  // namespace SPECOPS_LAUNCH_NS

// kernel<<<grid, block, smem, stream>>>(args...) on the GPU; the emulated launch under cuda_sim.
// Returns the launch's error (cudaGetLastError).
template <typename... P, typename... A>
inline cudaError_t launch_kernel(const char* name, void (*kernel)(P...), dim3 grid, dim3 block,
                                 size_t smem, cudaStream_t stream, A&&... args) {
#ifdef SPECOPS_CUDA_SIM
  (void)stream;
  ::cuda_sim::launch(name, kernel, grid, block, smem, static_cast<P>(args)...);
#else
  (void)name;
  // clang-format off
  kernel<<<grid, block, smem, stream>>>(static_cast<P>(args)...);
  // clang-format on
#endif
  return cudaGetLastError();
}

}  // namespace specops
