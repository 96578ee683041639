// The one pybind11 module.  Thin: tensors arrive as integers (data pointers, sizes, strides,
// stream); every check lives in the Python layer (specops/ops), which never calls in here with
// arguments it has not validated.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "specops/common.h"
#include "specops/philox.h"
#include "specops/sample.h"
#ifdef SPECOPS_WITH_CUDA
#include "cuda_bindings.h"
#endif

namespace py = pybind11;
using namespace specops;

template <typename T>
static T* ptr(int64_t address) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(address));
}

static RngArgs make_rng(int64_t seed_ptr, int64_t seed_value, int64_t rows_per_seed,
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

#ifdef SPECOPS_WITH_CUDA
static void check_cuda(const std::string& err, const char* op) {
  if (!err.empty()) throw std::runtime_error(std::string("specops.") + op + ": " + err);
}
#endif

PYBIND11_MODULE(_C, m) {
  m.doc() = "specops compiled kernels (raw-pointer interface; use the specops package)";

#ifdef SPECOPS_WITH_CUDA
  m.attr("with_cuda") = true;
  m.attr("cuda_archs") = std::string(SPECOPS_CUDA_ARCHS_STR);
  m.attr("cuda_version") = std::string(SPECOPS_CUDA_VERSION_STR);
  m.def("cuda_device_count", &cuda_device_count);
#else
  m.attr("with_cuda") = false;
  m.attr("cuda_archs") = std::string();
  m.attr("cuda_version") = std::string();
  m.def("cuda_device_count", []() { return 0; });
#endif
  m.attr("cxx_compiler") = std::string(SPECOPS_CXX_COMPILER_STR);
  m.attr("host_kernels") = py::make_tuple("sample");
#ifdef SPECOPS_WITH_CUDA
  m.attr("cuda_kernels") = py::make_tuple("sample");
#else
  m.attr("cuda_kernels") = py::make_tuple();
#endif

  m.def(
      "philox_uniform",
      [](uint64_t seed, uint64_t offset, uint32_t row, uint32_t draw) {
        return philox_uniform(seed, offset, row, draw);
      },
      "The uniform every backend draws for (seed, offset, row, draw).");
  m.def("philox4x32_10", [](uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                            uint32_t k1) {
    Philox4 r = philox4x32_10(c0, c1, c2, c3, k0, k1);
    return py::make_tuple(r.x[0], r.x[1], r.x[2], r.x[3]);
  });

  m.def(
      "sample_cpu",
      [](int64_t probs, int64_t rows, int64_t vocab, int64_t row_stride, int64_t seed_ptr,
         int64_t seed_value, int64_t rows_per_seed, int64_t offset_ptr, int64_t offset_value,
         int64_t uniforms, int64_t out) {
        RngArgs rng = make_rng(seed_ptr, seed_value, rows_per_seed, offset_ptr, offset_value,
                               uniforms, 1);
        py::gil_scoped_release release;
        sample_host(ptr<const float>(probs), rows, vocab, row_stride, rng, ptr<int32_t>(out));
      });
#ifdef SPECOPS_WITH_CUDA
  m.def("sample_cuda", [](int64_t probs, int64_t rows, int64_t vocab, int64_t row_stride,
                          int64_t seed_ptr, int64_t seed_value, int64_t rows_per_seed,
                          int64_t offset_ptr, int64_t offset_value, int64_t uniforms, int64_t out,
                          int64_t stream) {
    RngArgs rng =
        make_rng(seed_ptr, seed_value, rows_per_seed, offset_ptr, offset_value, uniforms, 1);
    check_cuda(launch_sample_cuda(ptr<const float>(probs), rows, vocab, row_stride, rng,
                                  ptr<int32_t>(out), ptr<void>(stream)),
               "sample");
  });
#endif
}
