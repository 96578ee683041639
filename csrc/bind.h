// Shared helpers of the binding files.  Each op family registers its functions from its own
// csrc/bind_<family>.cpp (bind_<family>(m)), so families never edit each other's files.
#pragma once
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "specops/common.h"

namespace specops {

template <typename T>
inline T* ptr(int64_t address) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(address));
}

inline RngArgs make_rng(int64_t seed_ptr, int64_t seed_value, int64_t rows_per_seed,
                        int64_t offset_ptr, int64_t offset_value, int64_t uniforms_ptr,
                        int64_t draws_per_row) {
  RngArgs rng;
  rng.seed_ptr = ptr<const int64_t>(seed_ptr);
  rng.seed_value = seed_value;
  rng.rows_per_seed = rows_per_seed > 0 ? rows_per_seed : 1;
  rng.offset_ptr = ptr<const int64_t>(offset_ptr);
  rng.offset_value = offset_value;
  rng.uniforms = ptr<const float>(uniforms_ptr);
  rng.draws_per_row = draws_per_row;
  return rng;
}

inline void check_cuda_error(const std::string& err, const char* op) {
  if (!err.empty()) throw std::runtime_error(std::string("specops.") + op + ": " + err);
}

// Names of the kernels compiled into the module, for specops.build_info().
std::vector<std::string>& host_kernel_names();
std::vector<std::string>& cuda_kernel_names();

void bind_sample(pybind11::module_& m);
void bind_verify(pybind11::module_& m);
void bind_kv(pybind11::module_& m);
void bind_features(pybind11::module_& m);
void bind_jacobi(pybind11::module_& m);

}  // namespace specops
