// Bindings of verify_jacobi.  Tensors arrive as TensorArg (csrc/tensor_arg.h); user-facing
// checks live in specops/ops/verify.py, the normalisation in specops/ops/_jacobi_kernels.py.
#include "bind.h"
#include "launchers.h"
#include "specops/jacobi.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

JacobiArgs jacobi_args(bool cuda, T target, T window, T draft, T first_child, T next_sibling,
                       bool cont, int64_t num_candidates, const RngStream& rng, T neighbors,
                       double delta, T codebook, int64_t group_window, double group_p,
                       double group_d, int64_t image_start, T uniforms, T out_num,
                       T out_next_window, T out_first_reject, T out_candidates, T out_path,
                       T workspace, T counters, bool emulate_cuda) {
  const ArgCheck c{"verify_jacobi", cuda};
  JacobiArgs a;
  const int64_t L = target.defined() ? target.size[1] : 0;
  set_rows(c, a, &JacobiArgs::target_sl, &JacobiArgs::draft_sl, target, draft, window, L, L);
  a.len = L;
  const int64_t b = a.batch;
  const bool tree = first_child.defined();
  a.tree_sb = tree ? tree_array(c, first_child, "first_child", b, L) : 0;
  if (tree && (tree_array(c, next_sibling, "next_sibling", b, L) != a.tree_sb ||
               next_sibling.size[0] != first_child.size[0]))
    c.fail("next_sibling", "must have the layout of first_child");
  a.first_child = first_child.as<const int32_t>();
  a.next_sibling = tree ? next_sibling.as<const int32_t>() : nullptr;
  a.cont = cont;
  if (num_candidates < 1) c.fail("num_candidates", "must be >= 1");
  a.num_candidates = num_candidates;
  a.relax = relax_args(c, neighbors, delta, codebook, group_window, group_p, group_d, image_start,
                       a.vocab);
  a.rng = make_rng(c, rng, uniforms, b, jacobi_draws(a));
  auto out = [&](T t, const char* name, std::initializer_list<int64_t> sizes) {
    return c.output(t, name, DType::i32, sizes, target).as<int32_t>();
  };
  a.out_num_accepted = out(out_num, "out_num_accepted", {b});
  a.out_next_window = out(out_next_window, "out_next_window", {b, L});
  a.out_first_reject = out(out_first_reject, "out_first_reject", {b});
  // candidates and path only when produced (otherwise the buffers given are ignored): the
  // binding returns (num, next_window, first_reject[, candidates][, path])
  a.out_candidates =
      num_candidates > 1 ? out(out_candidates, "out_candidates", {b, L, num_candidates}) : nullptr;
  a.out_path = tree ? out(out_path, "out_path", {b, L}) : nullptr;
  a.ws_stride = jacobi_ws_size(L, num_candidates);
  const bool cuda_tree = cuda && tree;
  // CUDA chain mode with GSD's grouping: the slots' decisions ([B, ws_stride], jacobi.h)
  const bool cuda_group = cuda && !tree && a.relax.codebook != nullptr;
  a.workspace =
      cuda_tree || cuda_group
          ? c.scratch(workspace, "workspace", DType::i32, {b, a.ws_stride}, target).as<int32_t>()
          : nullptr;
  a.counters = nullptr;
  if (cuda_tree) {
    c.contiguous(c.need(counters, "counters", DType::i32, 1), "counters");
    if (counters.size[0] < b) c.fail("counters", "must have at least one entry per request");
    a.counters = counters.as<int32_t>();
  }
  a.emulate_cuda = emulate_cuda;
  return a;
}

}  // namespace

void bind_jacobi(py::module_& m) {
  using py::arg;
  // CUDA tree mode: a per-request workspace (None: the binding makes it) and completion counters
  // that are zero before the launch (the kernel leaves them zero).  emulate_cuda (tests, cpu):
  // tree mode done the CUDA kernel's way.
  bind_op(m, "verify_jacobi", jacobi_args, verify_jacobi_host,
          SPECOPS_IF_CUDA(gpu::launch_verify_jacobi),
          SPECOPS_IF_CUDA_SIM(sim::launch_verify_jacobi), arg("target_probs"), arg("window_tokens"),
          arg("draft_probs"), arg("first_child"), arg("next_sibling"), arg("continue_after_reject"),
          arg("num_candidates"), arg("rng"), arg("neighbors"), arg("delta"), arg("codebook"),
          arg("group_window"), arg("group_p"), arg("group_d"), arg("image_start"), arg("uniforms"),
          arg("out_num_accepted"), arg("out_next_window"), arg("out_first_reject"),
          arg("out_candidates"), arg("out_path"), arg("workspace") = py::none(),
          arg("counters") = py::none(), arg("emulate_cuda") = false);
}

}  // namespace specops
