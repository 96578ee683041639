// CUDA entry points of the kv family, declared without CUDA headers so that bind_kv.cpp
// compiles with the host compiler alone.
#pragma once
#include <stdint.h>

#include <string>

#include "specops/kv.h"

namespace specops {
// Empty string on success, else the CUDA error text.
std::string launch_commit_kv_cuda(const CommitKVArgs& a, int vec_bytes, int32_t* counters,
                                  void* stream);
}  // namespace specops
