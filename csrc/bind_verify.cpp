// Bindings of the verification kernels.  Each takes its tensors as TensorArg (csrc/tensor_arg.h)
// and checks what the kernel reads; the user-facing checks and the normalisation (float32 rows,
// int32 trees) live in specops/ops/verify.py and specops/ops/_verify_checks.py.
#include "bind.h"
#include "launchers.h"
#include "specops/path_acceptance.h"
#include "specops/verify.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

VerifyChainArgs chain_args(bool cuda, T target, T tokens, T draft, T num_draft,
                           const RngStream& rng, T neighbors, double delta, T codebook,
                           int64_t group_window, double group_p, double group_d,
                           int64_t image_start, bool greedy, T uniforms, bool block, T out_tokens,
                           T out_num) {
  const ArgCheck c{"verify_chain", cuda};
  VerifyChainArgs a;
  const int64_t k = target.defined() ? target.size[1] - 1 : 0;
  set_rows(c, a, &VerifyChainArgs::target_sk, &VerifyChainArgs::draft_sk, target, draft, tokens, k,
           k);
  a.k = k;
  c.contiguous(c.maybe(num_draft, "num_draft", DType::i64, 1, {a.batch}), "num_draft");
  a.num_draft = num_draft.as<const int64_t>();
  a.relax = relax_args(c, neighbors, delta, codebook, group_window, group_p, group_d, image_start,
                       a.vocab);
  a.greedy = greedy;
  if (block && (greedy || a.relax.neighbors != nullptr || a.relax.codebook != nullptr))
    c.fail("block", "cannot be combined with greedy or relax");
  a.block = block;
  a.rng = make_rng(c, rng, uniforms, a.batch, k + 1);
  a.out_tokens =
      c.output(out_tokens, "out_tokens", DType::i32, {a.batch, k + 1}, target).as<int32_t>();
  a.out_num_accepted =
      c.output(out_num, "out_num_accepted", DType::i32, {a.batch}, target).as<int32_t>();
  // CUDA with GSD's grouping: a pre-pass tests every draft (a pass over its row each) into
  // group_ok, which the chain kernels read.  The split final draw at small batch (its blocks
  // each read the K decisions).  Greedy: the argmaxes of all B * (K+1) rows split, then the walk
  // over their chunk results.
  if (cuda && !greedy && a.relax.codebook != nullptr && a.batch > 0 && k > 0)
    a.group_ok = c.scratch(TensorArg(), "group_ok", DType::i32, {a.batch, k}, target).as<int32_t>();
  if (cuda && !greedy && !block) a.split = split_arg(c, a.batch, a.vocab, target);
  if (cuda && greedy)
    a.split = greedy_split_arg(c, a.batch * (k + 1), a.vocab, target, &a.greedy_best);
  return a;
}

VerifyTreeArgs tree_args(bool cuda, T target, T first_child, T next_sibling, int64_t width,
                         T tokens, T draft, bool without_replacement, const RngStream& rng,
                         T neighbors, double delta, T codebook, int64_t group_window,
                         double group_p, double group_d, int64_t image_start, bool greedy,
                         T uniforms, T out_path, T out_tokens, T out_num, T ws_p, T ws_q) {
  const ArgCheck c{"verify_tree", cuda};
  VerifyTreeArgs a;
  const int64_t n = target.defined() ? target.size[1] : 0;
  set_rows(c, a, &VerifyTreeArgs::target_sn, &VerifyTreeArgs::draft_sn, target, draft, tokens, n,
           n);
  a.nodes = n;
  a.tree_sb = tree_array(c, first_child, "first_child", a.batch, n);
  if (tree_array(c, next_sibling, "next_sibling", a.batch, n) != a.tree_sb ||
      next_sibling.size[0] != first_child.size[0])
    c.fail("next_sibling", "must have the layout of first_child");
  a.first_child = first_child.as<const int32_t>();
  a.next_sibling = next_sibling.as<const int32_t>();
  if (width < 1 || width > n) c.fail("width", "must be in [1, N]");
  a.width = width;
  a.without_replacement = without_replacement;
  a.greedy = greedy;
  a.relax = relax_args(c, neighbors, delta, codebook, group_window, group_p, group_d, image_start,
                       a.vocab);
  a.rng = make_rng(c, rng, uniforms, a.batch, n);
  // Workspaces: the residual target row (unless greedy) and the renormalised draft row
  // (without replacement with draft probabilities).
  const int64_t b = a.batch, v = a.vocab;
  a.ws_p = greedy ? nullptr : c.scratch(ws_p, "ws_p", DType::f32, {b, v}, target).as<float>();
  a.ws_q = without_replacement && draft.defined()
               ? c.scratch(ws_q, "ws_q", DType::f32, {b, v}, target).as<float>()
               : nullptr;
  a.out_path = c.output(out_path, "out_path", DType::i32, {b, width}, target).as<int32_t>();
  a.out_tokens = c.output(out_tokens, "out_tokens", DType::i32, {b, width}, target).as<int32_t>();
  a.out_num_accepted = c.output(out_num, "out_num_accepted", DType::i32, {b}, target).as<int32_t>();
  // CUDA greedy at small batch: every node row's argmax split over blocks, then the walk
  if (cuda && greedy) a.split = greedy_split_arg(c, b * n, v, target, &a.greedy_best);
  return a;
}

PathAcceptanceArgs path_args(bool cuda, T target, T draft, T parents, int64_t num_paths, T tokens,
                             T out_kappa, T out_expected_len, T workspace) {
  const ArgCheck c{"path_acceptance", cuda};
  PathAcceptanceArgs a;
  const int64_t n = target.defined() ? target.size[1] : 0;
  set_rows(c, a, &PathAcceptanceArgs::target_sn, &PathAcceptanceArgs::draft_sn, target, draft,
           tokens, n, n);
  a.nodes = n;
  a.parents_sb = tree_array(c, parents, "parents", a.batch, n);
  a.parents = parents.as<const int32_t>();
  if (num_paths < 0 || num_paths > n) c.fail("num_paths", "must be in [0, N]");
  a.num_paths = num_paths;
  const int64_t ws = cuda && n > kPathSmemNodes ? a.batch * path_workspace_bytes(n) : 0;
  a.workspace = ws ? c.scratch(workspace, "workspace", DType::u8, {ws}, target).data : nullptr;
  const int64_t b = a.batch;
  a.out_kappa = c.output(out_kappa, "out_kappa", DType::f32, {b, num_paths}, target).as<float>();
  a.out_expected_len =
      c.output(out_expected_len, "out_expected_len", DType::f32, {b, num_paths}, target)
          .as<float>();
  return a;
}

}  // namespace

void bind_verify(py::module_& m) {
  using py::arg;
  const auto none = py::none();
  bind_op(m, "verify_chain", chain_args, verify_chain_host,
          SPECOPS_IF_CUDA(gpu::launch_verify_chain), SPECOPS_IF_CUDA_SIM(sim::launch_verify_chain),
          arg("target_probs"), arg("draft_tokens"), arg("draft_probs"), arg("num_draft"),
          arg("rng"), arg("neighbors"), arg("delta"), arg("codebook"), arg("group_window"),
          arg("group_p"), arg("group_d"), arg("image_start"), arg("greedy"), arg("uniforms"),
          arg("block"), arg("out_tokens"), arg("out_num_accepted"));
  // Workspaces (None: the binding makes them): the current node's residual target row and
  // renormalised draft row after a rejected child.
  bind_op(m, "verify_tree", tree_args, verify_tree_host, SPECOPS_IF_CUDA(gpu::launch_verify_tree),
          SPECOPS_IF_CUDA_SIM(sim::launch_verify_tree), arg("target_probs"), arg("first_child"),
          arg("next_sibling"), arg("width"), arg("draft_tokens"), arg("draft_probs"),
          arg("without_replacement"), arg("rng"), arg("neighbors"), arg("delta"), arg("codebook"),
          arg("group_window"), arg("group_p"), arg("group_d"), arg("image_start"), arg("greedy"),
          arg("uniforms"), arg("out_path"), arg("out_tokens"), arg("out_num_accepted"),
          arg("ws_p") = none, arg("ws_q") = none);
  // CUDA: trees too large for shared memory keep their per-node state in a global workspace.
  bind_op(m, "path_acceptance", path_args, path_acceptance_host,
          SPECOPS_IF_CUDA(gpu::launch_path_acceptance),
          SPECOPS_IF_CUDA_SIM(sim::launch_path_acceptance), arg("target_probs"), arg("draft_probs"),
          arg("parents"), arg("num_paths"), arg("draft_tokens"), arg("out_kappa"),
          arg("out_expected_len"), arg("workspace") = none);
}

}  // namespace specops
