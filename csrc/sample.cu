#include "launchers.h"
#include "specops/launch.cuh"
#include "specops/sample.cuh"

namespace specops {
namespace SPECOPS_LAUNCH_NS {

std::string launch_sample(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride,
                          RngArgs rng, int32_t* out, void* stream) {
  if (rows == 0) return std::string();
  constexpr int kBlock = 256;
  return error_text(launch_kernel(
      "sample_kernel", sample_kernel<kBlock>, dim3(static_cast<unsigned>(rows)), dim3(kBlock), 0,
      static_cast<cudaStream_t>(stream), probs, vocab, row_stride, rng, out));
}

#ifndef SPECOPS_CUDA_SIM
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
#endif

}  // namespace SPECOPS_LAUNCH_NS
}  // namespace specops
