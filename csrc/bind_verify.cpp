// Bindings of the verification kernels (and sampling without replacement).  Arguments arrive as
// a dict of integers (data pointers, sizes, strides), validated by specops/ops/verify.py and
// specops/ops/sample.py.
#include "bind.h"
#include "specops/path_acceptance.h"
#include "specops/verify.h"
#ifdef SPECOPS_WITH_CUDA
#include "verify_launch.h"
#endif

namespace py = pybind11;

namespace specops {

namespace {

struct Dict {
  py::dict d;
  int64_t i64(const char* k) const { return d[k].cast<int64_t>(); }
  bool flag(const char* k) const { return d[k].cast<bool>(); }
  RngArgs rng(int64_t draws_per_row) const {
    return make_rng(i64("seed_ptr"), i64("seed_value"), i64("rows_per_seed"), i64("offset_ptr"),
                    i64("offset_value"), i64("uniforms"), draws_per_row);
  }
  RelaxArgs relax() const {
    return RelaxArgs{ptr<const int32_t>(i64("neighbors")), i64("neighbors_k"),
                     d["delta"].cast<double>()};
  }
};

VerifyChainArgs chain_args(py::dict dict) {
  const Dict d{dict};
  VerifyChainArgs a;
  read_rows(dict, "k", a, &VerifyChainArgs::target_sk, &VerifyChainArgs::draft_sk);
  a.num_draft = ptr<const int64_t>(d.i64("num_draft"));
  a.batch = d.i64("batch");
  a.k = d.i64("k");
  a.vocab = d.i64("vocab");
  a.relax = d.relax();
  a.greedy = d.flag("greedy");
  a.rng = d.rng(a.k + 1);
  a.out_tokens = ptr<int32_t>(d.i64("out_tokens"));
  a.out_num_accepted = ptr<int32_t>(d.i64("out_num_accepted"));
  return a;
}

VerifyTreeArgs tree_args(py::dict dict) {
  const Dict d{dict};
  VerifyTreeArgs a;
  read_rows(dict, "n", a, &VerifyTreeArgs::target_sn, &VerifyTreeArgs::draft_sn);
  a.first_child = ptr<const int32_t>(d.i64("first_child"));
  a.next_sibling = ptr<const int32_t>(d.i64("next_sibling"));
  a.tree_sb = d.i64("tree_sb");
  a.batch = d.i64("batch");
  a.nodes = d.i64("nodes");
  a.vocab = d.i64("vocab");
  a.width = d.i64("width");
  a.without_replacement = d.flag("without_replacement");
  a.greedy = d.flag("greedy");
  a.relax = d.relax();
  a.rng = d.rng(a.nodes);
  a.ws_p = ptr<float>(d.i64("ws_p"));
  a.ws_q = ptr<float>(d.i64("ws_q"));
  a.out_path = ptr<int32_t>(d.i64("out_path"));
  a.out_tokens = ptr<int32_t>(d.i64("out_tokens"));
  a.out_num_accepted = ptr<int32_t>(d.i64("out_num_accepted"));
  return a;
}

SampleWorArgs wor_args(py::dict dict) {
  const Dict d{dict};
  SampleWorArgs a;
  a.probs = ptr<const float>(d.i64("probs"));
  a.row_stride = d.i64("row_stride");
  a.rows = d.i64("rows");
  a.vocab = d.i64("vocab");
  a.k = d.i64("k");
  a.rng = d.rng(a.vocab);
  a.out = ptr<int32_t>(d.i64("out"));
  return a;
}

PathAcceptanceArgs path_args(py::dict dict) {
  const Dict d{dict};
  PathAcceptanceArgs a;
  read_rows(dict, "n", a, &PathAcceptanceArgs::target_sn, &PathAcceptanceArgs::draft_sn);
  a.parents = ptr<const int32_t>(d.i64("parents"));
  a.parents_sb = d.i64("parents_sb");
  a.batch = d.i64("batch");
  a.nodes = d.i64("nodes");
  a.vocab = d.i64("vocab");
  a.num_paths = d.i64("num_paths");
  a.workspace = ptr<void>(d.i64("workspace"));
  a.out_kappa = ptr<float>(d.i64("out_kappa"));
  a.out_expected_len = ptr<float>(d.i64("out_expected_len"));
  return a;
}

}  // namespace

void bind_verify(py::module_& m) {
  host_kernel_names().push_back("verify_chain");
  host_kernel_names().push_back("verify_tree");
  host_kernel_names().push_back("sample_without_replacement");
  host_kernel_names().push_back("path_acceptance");
  m.def("verify_chain_cpu", [](py::dict d) {
    VerifyChainArgs a = chain_args(d);
    py::gil_scoped_release release;
    verify_chain_host(a);
  });
  m.def("verify_tree_cpu", [](py::dict d) {
    VerifyTreeArgs a = tree_args(d);
    py::gil_scoped_release release;
    verify_tree_host(a);
  });
  m.def("sample_without_replacement_cpu", [](py::dict d) {
    SampleWorArgs a = wor_args(d);
    py::gil_scoped_release release;
    sample_wor_host(a);
  });
  m.def("path_acceptance_ws_size", [](int64_t nodes) {  // CUDA workspace bytes per request
    return nodes <= kPathSmemNodes ? int64_t{0} : path_workspace_bytes(nodes);
  });
  m.def("path_acceptance_cpu", [](py::dict d) {
    PathAcceptanceArgs a = path_args(d);
    py::gil_scoped_release release;
    path_acceptance_host(a);
  });
#ifdef SPECOPS_WITH_CUDA
  cuda_kernel_names().push_back("verify_chain");
  cuda_kernel_names().push_back("verify_tree");
  cuda_kernel_names().push_back("sample_without_replacement");
  cuda_kernel_names().push_back("path_acceptance");
  m.def("verify_chain_cuda", [](py::dict d, int64_t stream) {
    check_cuda_error(launch_verify_chain_cuda(chain_args(d), ptr<void>(stream)), "verify_chain");
  });
  m.def("verify_tree_cuda", [](py::dict d, int64_t stream) {
    check_cuda_error(launch_verify_tree_cuda(tree_args(d), ptr<void>(stream)), "verify_tree");
  });
  m.def("sample_without_replacement_cuda", [](py::dict d, int64_t stream) {
    check_cuda_error(launch_sample_wor_cuda(wor_args(d), ptr<void>(stream)),
                     "sample_without_replacement");
  });
  m.def("path_acceptance_cuda", [](py::dict d, int64_t stream) {
    check_cuda_error(launch_path_acceptance_cuda(path_args(d), ptr<void>(stream)),
                     "path_acceptance");
  });
#endif
}

}  // namespace specops
