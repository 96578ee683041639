// Bindings of the verification kernels.  Arguments are validated by specops/ops/verify.py.
#include "bind.h"
#include "specops/verify.h"
#ifdef SPECOPS_WITH_CUDA
#include "verify_launch.h"
#endif

namespace py = pybind11;

namespace specops {

namespace {

VerifyChainArgs chain_args(py::dict d) {
  auto i64 = [&](const char* k) { return d[k].cast<int64_t>(); };
  VerifyChainArgs a;
  a.target = ptr<const float>(i64("target"));
  a.target_sb = i64("target_sb");
  a.target_sk = i64("target_sk");
  a.draft = ptr<const float>(i64("draft"));
  a.draft_sb = i64("draft_sb");
  a.draft_sk = i64("draft_sk");
  a.tokens = TokenView{ptr<const void>(i64("tokens")), d["tokens_is64"].cast<bool>()};
  a.tokens_sb = i64("tokens_sb");
  a.num_draft = ptr<const int64_t>(i64("num_draft"));
  a.batch = i64("batch");
  a.k = i64("k");
  a.vocab = i64("vocab");
  a.relax = RelaxArgs{ptr<const int32_t>(i64("neighbors")), i64("neighbors_k"),
                      d["delta"].cast<double>()};
  a.greedy = d["greedy"].cast<bool>();
  a.rng = make_rng(i64("seed_ptr"), i64("seed_value"), i64("rows_per_seed"), i64("offset_ptr"),
                   i64("offset_value"), i64("uniforms"), a.k + 1);
  a.out_tokens = ptr<int32_t>(i64("out_tokens"));
  a.out_num_accepted = ptr<int32_t>(i64("out_num_accepted"));
  return a;
}

}  // namespace

void bind_verify(py::module_& m) {
  host_kernel_names().push_back("verify_chain");
  m.def("verify_chain_cpu", [](py::dict d) {
    VerifyChainArgs a = chain_args(d);
    py::gil_scoped_release release;
    verify_chain_host(a);
  });
#ifdef SPECOPS_WITH_CUDA
  cuda_kernel_names().push_back("verify_chain");
  m.def("verify_chain_cuda", [](py::dict d, int64_t stream) {
    check_cuda_error(launch_verify_chain_cuda(chain_args(d), ptr<void>(stream)), "verify_chain");
  });
#endif
}

}  // namespace specops
