#include "launchers.h"
#include "specops/launch.cuh"
#include "specops/sample.cuh"
#include "specops/sample_wor.cuh"

namespace specops {
namespace SPECOPS_LAUNCH_NS {

std::string launch_sample(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride,
                          RngArgs rng, RowSplit split, int32_t* out, void* stream) {
  if (rows == 0) return std::string();
  constexpr int kBlock = 256;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (split.chunks <= 1)
    return error_text(launch_kernel("sample_kernel", sample_kernel<kBlock>,
                                    dim3(static_cast<unsigned>(rows)), dim3(kBlock), 0, s, probs,
                                    vocab, row_stride, rng, out));
  const cudaError_t err = launch_kernel("sample_split_sum_kernel", sample_split_sum_kernel<kBlock>,
                                        dim3(static_cast<unsigned>(rows * split.chunks)),
                                        dim3(kBlock), 0, s, probs, vocab, row_stride, split);
  if (err != cudaSuccess) return error_text(err);
  return error_text(launch_kernel("sample_split_draw_kernel", sample_split_draw_kernel<kBlock>,
                                  dim3(static_cast<unsigned>(rows)), dim3(kBlock), 0, s, probs,
                                  vocab, row_stride, rng, split, out));
}

std::string launch_sample_wor(const SampleWorArgs& args, void* stream) {
  if (args.rows == 0 || args.k == 0) return std::string();
  constexpr int kBlock = 256;
  return error_text(launch_kernel("sample_wor_kernel", sample_wor_kernel<kBlock, 8>,
                                  dim3(static_cast<unsigned>(args.rows)), dim3(kBlock), 0,
                                  static_cast<cudaStream_t>(stream), args));
}

}  // namespace SPECOPS_LAUNCH_NS
}  // namespace specops
