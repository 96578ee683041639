// Entry points of the CUDA translation units, declared without CUDA headers so that
// bindings.cpp compiles with the host compiler alone.
#pragma once
#include <stdint.h>

#include <string>

#include "specops/common.h"

namespace specops {
// Each returns an empty string on success, else the CUDA error text.
std::string launch_sample_cuda(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride,
                               RngArgs rng, int32_t* out, void* stream);
int cuda_device_count();
}  // namespace specops
