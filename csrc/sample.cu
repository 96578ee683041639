#include "specops/sample.cuh"

namespace specops {

cudaError_t sample_cuda(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride,
                        RngArgs rng, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int kBlock = 256;
  sample_kernel<kBlock><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(probs, vocab,
                                                                             row_stride, rng, out);
  return cudaGetLastError();
}

}  // namespace specops
