// Host-side wrappers that turn CUDA errors into strings for the (CUDA-free) bindings.
#include <string>

#include "cuda_bindings.h"
#include "specops/sample.cuh"

namespace specops {

static std::string error_text(cudaError_t err) {
  return err == cudaSuccess ? std::string() : std::string(cudaGetErrorString(err));
}

std::string launch_sample_cuda(const float* probs, int64_t rows, int64_t vocab,
                               int64_t row_stride, RngArgs rng, int32_t* out, void* stream) {
  return error_text(
      sample_cuda(probs, rows, vocab, row_stride, rng, out, static_cast<cudaStream_t>(stream)));
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace specops
