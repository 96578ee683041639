// The one pybind11 module.  Thin: tensors arrive as TensorArg (pointer, dtype, sizes, strides and
// device read from the torch.Tensor itself, csrc/tensor_arg.h) and each binding checks the layout
// its kernel reads; the user-facing checks live in the Python layer (specops/ops).  Each family
// binds its kernels in csrc/bind_<family>.cpp.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bind.h"
#include "host_parallel.h"
#include "specops/philox.h"
#if defined(SPECOPS_WITH_CUDA) || defined(SPECOPS_WITH_CUDA_SIM)
#include "launchers.h"
#endif

namespace py = pybind11;
using namespace specops;

namespace specops {
std::vector<std::string>& host_kernel_names() {
  static std::vector<std::string> names;
  return names;
}
std::vector<std::string>& cuda_kernel_names() {
  static std::vector<std::string> names;
  return names;
}
std::vector<std::string>& cuda_sim_kernel_names() {
  static std::vector<std::string> names;
  return names;
}
}  // namespace specops

#ifdef SPECOPS_TRAFFIC
// specops._traffic: this module built again, CPU-only, with cuda_sim's memory accesses counted
// (csrc/sim/traffic/traffic.cpp).
namespace specops {
void bind_traffic(py::module_& m);
}
#define SPECOPS_MODULE _traffic
#else
#define SPECOPS_MODULE _C
#endif

PYBIND11_MODULE(SPECOPS_MODULE, m) {
  m.doc() = "specops compiled kernels (private: use the specops package)";

#ifdef SPECOPS_WITH_CUDA
  m.attr("with_cuda") = true;
  m.attr("cuda_archs") = std::string(SPECOPS_CUDA_ARCHS_STR);
  m.attr("cuda_version") = std::string(SPECOPS_CUDA_VERSION_STR);
#else
  m.attr("with_cuda") = false;
  m.attr("cuda_archs") = std::string();
  m.attr("cuda_version") = std::string();
#endif
  m.attr("cxx_compiler") = std::string(SPECOPS_CXX_COMPILER_STR);

  m.def(
      "philox_uniform",
      [](uint64_t seed, uint64_t offset, uint32_t row, uint32_t draw) {
        return philox_uniform(seed, offset, row, draw);
      },
      "The uniform every backend draws for (seed, offset, row, draw).");
  m.def("philox4x32_10",
        [](uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
          Philox4 r = philox4x32_10(c0, c1, c2, c3, k0, k1);
          return py::make_tuple(r.x[0], r.x[1], r.x[2], r.x[3]);
        });

  m.def("set_host_threads", &set_host_threads,
        "Threads of the C++ CPU twins (results do not depend on it); 1 = serial.");
  m.def("host_threads", &host_threads);

  init_tensor_arg(m);
  bind_sample(m);
  bind_verify(m);
  bind_kv(m);
  bind_features(m);
  bind_jacobi(m);
  bind_probs(m);
  bind_tree_attention(m);
  bind_append_kv(m);

  m.attr("host_kernels") = host_kernel_names();
  m.attr("cuda_kernels") = cuda_kernel_names();
  m.attr("cuda_sim_kernels") = cuda_sim_kernel_names();
#ifdef SPECOPS_WITH_CUDA_SIM
  m.attr("with_cuda_sim") = true;
  bind_sim_checks(m);
#else
  m.attr("with_cuda_sim") = false;
#endif
#ifdef SPECOPS_TRAFFIC
  bind_traffic(m);
#endif
}
