// The CUDA launchers, declared without CUDA headers for the (host-compiled) bindings.  Each .cu
// file builds twice: by nvcc into specops::gpu (the GPU kernels) and, as host C++ over the SIMT
// emulation of csrc/sim, into specops::sim (backend "cuda_sim": the same device code run on the
// CPU).  Each returns an empty string on success, else the error text.
#pragma once
#include <stdint.h>

#include <string>

#include "specops/common.h"
#include "specops/jacobi.h"
#include "specops/kv.h"
#include "specops/path_acceptance.h"
#include "specops/sample.h"
#include "specops/verify.h"

#define SPECOPS_DECLARE_LAUNCHERS                                                                \
  /* split: RowSplit (specops/common.h); chunks > 1 needs split.sums [rows, chunks].    */       \
  std::string launch_sample(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride, \
                            RngArgs rng, RowSplit split, int32_t* out, void* stream);            \
  std::string launch_sample_wor(const SampleWorArgs& args, void* stream);                        \
  std::string launch_verify_chain(const VerifyChainArgs& args, void* stream);                    \
  std::string launch_verify_tree(const VerifyTreeArgs& args, void* stream);                      \
  std::string launch_path_acceptance(const PathAcceptanceArgs& args, void* stream);              \
  std::string launch_verify_jacobi(const JacobiArgs& args, void* stream);                        \
  /* vec_bytes: 16, 8, 4, 2 or 1, dividing row_bytes, every stride and slab address;     */      \
  /* counters: [batch] int32 zeros (left zero again).                                    */      \
  std::string launch_commit_kv(const CommitKVArgs& a, int vec_bytes, int32_t* counters,          \
                               void* stream);

namespace specops {
namespace gpu {
SPECOPS_DECLARE_LAUNCHERS
}  // namespace gpu
namespace sim {
SPECOPS_DECLARE_LAUNCHERS
}  // namespace sim
}  // namespace specops

#undef SPECOPS_DECLARE_LAUNCHERS
