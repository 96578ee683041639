// Bindings of verify_jacobi.  Arguments are validated by specops/ops/verify.py and made
// kernel-ready by specops/ops/_jacobi_kernels.py.
#include "bind.h"
#include "specops/jacobi.h"
#ifdef SPECOPS_WITH_CUDA
#include "jacobi_launch.h"
#endif

namespace py = pybind11;

namespace specops {

namespace {

JacobiArgs jacobi_args(py::dict d) {
  auto i64 = [&](const char* k) { return d[k].cast<int64_t>(); };
  JacobiArgs a;
  read_rows(d, "l", a, &JacobiArgs::target_sl, &JacobiArgs::draft_sl);
  a.first_child = ptr<const int32_t>(i64("first_child"));
  a.next_sibling = ptr<const int32_t>(i64("next_sibling"));
  a.tree_sb = i64("tree_sb");
  a.batch = i64("batch");
  a.len = i64("len");
  a.vocab = i64("vocab");
  a.cont = d["cont"].cast<bool>();
  a.num_candidates = i64("num_candidates");
  a.relax = RelaxArgs{ptr<const int32_t>(i64("neighbors")), i64("neighbors_k"),
                      d["delta"].cast<double>()};
  a.rng = make_rng(i64("seed_ptr"), i64("seed_value"), i64("rows_per_seed"), i64("offset_ptr"),
                   i64("offset_value"), i64("uniforms"), 0);
  a.rng.draws_per_row = jacobi_draws(a);
  a.out_num_accepted = ptr<int32_t>(i64("out_num_accepted"));
  a.out_next_window = ptr<int32_t>(i64("out_next_window"));
  a.out_first_reject = ptr<int32_t>(i64("out_first_reject"));
  a.out_candidates = ptr<int32_t>(i64("out_candidates"));
  a.out_path = ptr<int32_t>(i64("out_path"));
  a.workspace = ptr<int32_t>(i64("workspace"));
  a.ws_stride = i64("ws_stride");
  a.counters = ptr<int32_t>(i64("counters"));
  a.emulate_cuda = d.contains("emulate_cuda") && d["emulate_cuda"].cast<bool>();
  return a;
}

}  // namespace

void bind_jacobi(py::module_& m) {
  host_kernel_names().push_back("verify_jacobi");
  m.def("jacobi_ws_size", [](int64_t len, int64_t k) { return jacobi_ws_size(len, k); });
  m.def("verify_jacobi_cpu", [](py::dict d) {
    JacobiArgs a = jacobi_args(d);
    py::gil_scoped_release release;
    verify_jacobi_host(a);
  });
#ifdef SPECOPS_WITH_CUDA
  cuda_kernel_names().push_back("verify_jacobi");
  m.def("verify_jacobi_cuda", [](py::dict d, int64_t stream) {
    check_cuda_error(launch_verify_jacobi_cuda(jacobi_args(d), ptr<void>(stream)), "verify_jacobi");
  });
#endif
}

}  // namespace specops
