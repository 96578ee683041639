#include "bind.h"
#include "specops/sample.h"
#ifdef SPECOPS_WITH_CUDA
#include "cuda_bindings.h"
#endif

namespace py = pybind11;

namespace specops {

void bind_sample(py::module_& m) {
  host_kernel_names().push_back("sample");
  m.def("sample_cpu", [](int64_t probs, int64_t rows, int64_t vocab, int64_t row_stride,
                         int64_t seed_ptr, int64_t seed_value, int64_t rows_per_seed,
                         int64_t offset_ptr, int64_t offset_value, int64_t uniforms, int64_t out) {
    RngArgs rng =
        make_rng(seed_ptr, seed_value, rows_per_seed, offset_ptr, offset_value, uniforms, 1);
    py::gil_scoped_release release;
    sample_host(ptr<const float>(probs), rows, vocab, row_stride, rng, ptr<int32_t>(out));
  });
#ifdef SPECOPS_WITH_CUDA
  cuda_kernel_names().push_back("sample");
  m.def("sample_cuda", [](int64_t probs, int64_t rows, int64_t vocab, int64_t row_stride,
                          int64_t seed_ptr, int64_t seed_value, int64_t rows_per_seed,
                          int64_t offset_ptr, int64_t offset_value, int64_t uniforms, int64_t out,
                          int64_t stream) {
    RngArgs rng =
        make_rng(seed_ptr, seed_value, rows_per_seed, offset_ptr, offset_value, uniforms, 1);
    check_cuda_error(launch_sample_cuda(ptr<const float>(probs), rows, vocab, row_stride, rng,
                                        ptr<int32_t>(out), ptr<void>(stream)),
                     "sample");
  });
#endif
}

}  // namespace specops
