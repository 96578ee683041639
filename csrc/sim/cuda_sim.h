// cuda_sim: the CUDA kernels' device code run as host C++ (backend "cuda_sim", tests only).
//
// The .cuh kernels compile unchanged against this SIMT layer (the shim <cuda_runtime.h> and
// <cub/...> headers in csrc/sim/include map the CUDA keywords here):
//   - every simulated thread runs the kernel function with its own threadIdx; a block's threads
//     are fibers on one OS thread (default) or one OS thread each (SPECOPS_SIM_THREADS=os, the
//     ThreadSanitizer stage: a missing __syncthreads is then a data race TSan sees);
//   - __shared__ is one copy per block: a static, and blocks run one after another (in a
//     shuffled order, so a kernel that depends on block order fails);
//   - __syncthreads is a real barrier of the block's threads.  A barrier that not every thread
//     reaches (some exited, some wait elsewhere, lanes wait at a warp shuffle) aborts the launch
//     with the kernel's name and the barrier's file:line, never a hang;
//   - within a block, the threads between two barriers run in a fresh pseudo-random order each
//     phase, so a read of shared memory that a missing barrier leaves unordered sees stale data;
//   - dynamic shared memory is filled with 0xff bytes at each block's start and followed by
//     a canary checked at its end (a write past the launch's size aborts the launch; under ASan
//     the buffer has no slack and ASan reports reads too); SmemArray indexes are bounds-checked;
//   - cub's BlockReduce returns its result on thread 0 only (others get a poison value).
// Faults come back as the launch's error (cudaGetLastError), which the bindings raise.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuda_sim {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct Block;

// The simulated thread that is running on this OS thread.
struct ThreadCtx {
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
  int tid = 0;  // linear thread index in the block
  Block* block = nullptr;
};

// Fiber mode (one launch at a time, on one OS thread): a plain global, which costs a load where
// a thread_local in a shared library costs a __tls_get_addr call.  OS-thread mode: per thread.
extern ThreadCtx* fiber_ctx;
extern thread_local ThreadCtx* tls_ctx;
inline ThreadCtx& ctx() { return fiber_ctx ? *fiber_ctx : *tls_ctx; }

// Barriers (called by the kernels through the shim macros).
void syncthreads(const char* file, int line);
int syncthreads_or(int pred, const char* file, int line);
// All 32 lanes of the caller's warp exchange 8 bytes: returns lane src's value.
uint64_t warp_exchange(uint64_t mine, int src_lane, const char* what);

// Abort the launch from inside a kernel: the message names the kernel, block and thread.
[[noreturn]] void fault(const std::string& what);
[[noreturn]] void fault_index(int64_t i, int64_t n);  // a SmemArray index

// The launch's dynamic shared memory (launch size bytes; nullptr for 0 bytes).
unsigned char* dynamic_smem_raw();
template <typename T>
T* dynamic_smem() {
  return reinterpret_cast<T*>(dynamic_smem_raw());
}

// Watches launches (the traffic counters, csrc/sim/traffic/traffic.cpp; nullptr otherwise): called
// on the launching OS thread, blocks in the order they run.
struct LaunchObserver {
  virtual ~LaunchObserver() = default;
  virtual void launch_begin(const char* kernel, Dim3 grid, Dim3 block) = 0;
  virtual void block_begin(Dim3 idx) = 0;
  virtual void block_end(unsigned barriers) = 0;  // the __syncthreads the block passed
  virtual void launch_end() = 0;
};
extern LaunchObserver* observer;

// Launch-time state of a kernel (cudaFuncSetAttribute).
void set_max_dynamic_smem(const void* kernel, int bytes);

enum class Error : int { success = 0, invalid_configuration = 9, invalid_value = 1, launch = 719 };

// Runs body(closure) as every thread of every block of the grid; returns the error and sets the
// thread's last error (read by cudaGetLastError / cudaGetErrorString).
Error launch_impl(const char* name, const void* kernel, Dim3 grid, Dim3 block, size_t smem,
                  void (*body)(void*), void* closure);
Error take_last_error();
const char* error_string(Error e);

template <typename... P, typename... A>
Error launch(const char* name, void (*kernel)(P...), Dim3 grid, Dim3 block, size_t smem,
             A&&... args) {
  // Kernel parameters are copied once here and passed by value to every simulated thread.
  struct Closure {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;
  } closure{kernel, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
  auto body = [](void* c) {
    Closure* cl = static_cast<Closure*>(c);
    std::apply(cl->kernel, cl->params);
  };
  return launch_impl(name, reinterpret_cast<const void*>(kernel), grid, block, smem, body,
                     &closure);
}

// Shuffle any trivially copyable value of at most 8 bytes.
template <typename T>
T shfl_xor(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shfl of a small POD");
  if (mask != 0xffffffffu) fault("__shfl_xor_sync with a partial mask is not emulated");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  const int lane = ctx().tid & 31;
  bits = warp_exchange(bits, (lane ^ lane_mask) & 31, "__shfl_xor_sync");
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace cuda_sim
