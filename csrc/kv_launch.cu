// Host-side wrapper that turns CUDA errors into strings for the (CUDA-free) bindings.
#include "kv_launch.h"
#include "specops/kv.cuh"

namespace specops {

std::string launch_commit_kv_cuda(const CommitKVArgs& a, int vec_bytes, int32_t* counters,
                                  void* stream) {
  const cudaError_t err = commit_kv_cuda(a, vec_bytes, counters, static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? std::string() : std::string(cudaGetErrorString(err));
}

}  // namespace specops
