// CUDA launchers of the verification kernels, declared without CUDA headers for the bindings.
// Each returns an empty string on success, else the CUDA error text.
#pragma once
#include <string>

#include "specops/path_acceptance.h"
#include "specops/verify.h"

namespace specops {
std::string launch_verify_chain_cuda(const VerifyChainArgs& args, void* stream);
std::string launch_verify_tree_cuda(const VerifyTreeArgs& args, void* stream);
std::string launch_sample_wor_cuda(const SampleWorArgs& args, void* stream);
std::string launch_path_acceptance_cuda(const PathAcceptanceArgs& args, void* stream);
}  // namespace specops
