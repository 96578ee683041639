#include "launchers.h"
#include "specops/launch.cuh"
#include "specops/path_acceptance.cuh"
#include "specops/verify.cuh"

namespace specops {
namespace SPECOPS_LAUNCH_NS {

std::string launch_verify_chain(const VerifyChainArgs& args, void* stream) {
  if (args.batch == 0) return std::string();
  constexpr int kBlock = 512;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (args.group_ok != nullptr) {  // GSD's tests, every draft's at once, before the chain kernel
    const cudaError_t err =
        launch_kernel("verify_chain_group_test_kernel", verify_chain_group_test_kernel<kBlock>,
                      dim3(static_cast<unsigned>(args.batch * args.k)), dim3(kBlock), 0, s, args);
    if (err != cudaSuccess) return error_text(err);
  }
  if (args.split.chunks <= 1)
    return error_text(launch_kernel("verify_chain_kernel", verify_chain_kernel<kBlock>,
                                    dim3(static_cast<unsigned>(args.batch)), dim3(kBlock), 0, s,
                                    args));
  const unsigned pass1 = static_cast<unsigned>(args.batch * args.split.chunks);
  if (args.greedy) {  // the argmaxes split over every row (greedy at small batch), then the walk
    const cudaError_t err =
        launch_kernel("verify_chain_greedy_split_kernel", verify_chain_greedy_split_kernel<kBlock>,
                      dim3(static_cast<unsigned>(pass1 * (args.k + 1))), dim3(kBlock), 0, s, args);
    if (err != cudaSuccess) return error_text(err);
    return error_text(
        launch_kernel("verify_chain_greedy_walk_kernel", verify_chain_greedy_walk_kernel<kBlock>,
                      dim3(static_cast<unsigned>(args.batch)), dim3(kBlock), 0, s, args));
  }
  // the split final draw (sampled verification at small batch): pass 1, then pass 2
  const cudaError_t err =
      launch_kernel("verify_chain_split_sum_kernel", verify_chain_split_sum_kernel<kBlock>,
                    dim3(pass1), dim3(kBlock), 0, s, args);
  if (err != cudaSuccess) return error_text(err);
  return error_text(
      launch_kernel("verify_chain_split_draw_kernel", verify_chain_split_draw_kernel<kBlock>,
                    dim3(static_cast<unsigned>(args.batch)), dim3(kBlock), 0, s, args));
}

std::string launch_verify_tree(const VerifyTreeArgs& args, void* stream) {
  if (args.batch == 0) return std::string();
  constexpr int kBlock = 512;
  if (args.greedy && args.split.chunks > 1) {  // the argmaxes split over every node's row
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const cudaError_t err =
        launch_kernel("verify_tree_greedy_split_kernel", verify_tree_greedy_split_kernel<kBlock>,
                      dim3(static_cast<unsigned>(args.batch * args.nodes * args.split.chunks)),
                      dim3(kBlock), 0, s, args);
    if (err != cudaSuccess) return error_text(err);
    return error_text(
        launch_kernel("verify_tree_greedy_walk_kernel", verify_tree_greedy_walk_kernel<kBlock>,
                      dim3(static_cast<unsigned>(args.batch)), dim3(kBlock), 0, s, args));
  }
  return error_text(launch_kernel("verify_tree_kernel", verify_tree_kernel<kBlock>,
                                  dim3(static_cast<unsigned>(args.batch)), dim3(kBlock), 0,
                                  static_cast<cudaStream_t>(stream), args));
}

std::string launch_path_acceptance(const PathAcceptanceArgs& args, void* stream) {
  if (args.batch == 0) return std::string();
  constexpr int kBlock = 256;
  const size_t smem =
      args.nodes <= kPathSmemNodes ? static_cast<size_t>(path_workspace_bytes(args.nodes)) : 0;
  return error_text(launch_kernel("path_acceptance_kernel", path_acceptance_kernel<kBlock>,
                                  dim3(static_cast<unsigned>(args.batch)), dim3(kBlock), smem,
                                  static_cast<cudaStream_t>(stream), args));
}

}  // namespace SPECOPS_LAUNCH_NS
}  // namespace specops
