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

// The probability rows and token ids of a verification struct, from the fields that _rows in
// specops/ops/_verify_kernels.py writes ("target", "target_sb", "target_s<row>", the same for
// "draft", "tokens", "tokens_is64", "tokens_sb"); `row` names the dim-1 stride, which each
// struct keeps in its own member (target_s1 / draft_s1).
template <typename A>
void read_rows(const pybind11::dict& d, const std::string& row, A& a, int64_t A::* target_s1,
               int64_t A::* draft_s1) {
  auto i64 = [&](const std::string& k) { return d[pybind11::str(k)].cast<int64_t>(); };
  a.target = ptr<const float>(i64("target"));
  a.target_sb = i64("target_sb");
  a.*target_s1 = i64("target_s" + row);
  a.draft = ptr<const float>(i64("draft"));
  a.draft_sb = i64("draft_sb");
  a.*draft_s1 = i64("draft_s" + row);
  a.tokens = {ptr<const void>(i64("tokens")), d["tokens_is64"].cast<bool>()};
  a.tokens_sb = i64("tokens_sb");
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
