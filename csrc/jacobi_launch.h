// CUDA launcher of verify_jacobi, declared without CUDA headers for the bindings.
// Returns an empty string on success, else the CUDA error text.
#pragma once
#include <string>

#include "specops/jacobi.h"

namespace specops {
std::string launch_verify_jacobi_cuda(const JacobiArgs& args, void* stream);
}  // namespace specops
