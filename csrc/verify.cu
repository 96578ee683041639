#include "specops/path_acceptance.cuh"
#include "specops/sample_wor.cuh"
#include "specops/verify.cuh"
#include "verify_launch.h"

namespace specops {

namespace {
std::string error_text() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? std::string() : std::string(cudaGetErrorString(err));
}
}  // namespace

std::string launch_verify_chain_cuda(const VerifyChainArgs& args, void* stream) {
  if (args.batch == 0) return std::string();
  constexpr int kBlock = 512;
  verify_chain_kernel<kBlock>
      <<<static_cast<unsigned>(args.batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return error_text();
}

std::string launch_verify_tree_cuda(const VerifyTreeArgs& args, void* stream) {
  if (args.batch == 0) return std::string();
  constexpr int kBlock = 512;
  verify_tree_kernel<kBlock>
      <<<static_cast<unsigned>(args.batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return error_text();
}

std::string launch_sample_wor_cuda(const SampleWorArgs& args, void* stream) {
  if (args.rows == 0 || args.k == 0) return std::string();
  constexpr int kBlock = 256;
  sample_wor_kernel<kBlock, 8>
      <<<static_cast<unsigned>(args.rows), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return error_text();
}

std::string launch_path_acceptance_cuda(const PathAcceptanceArgs& args, void* stream) {
  if (args.batch == 0) return std::string();
  constexpr int kBlock = 256;
  const size_t smem =
      args.nodes <= kPathSmemNodes ? static_cast<size_t>(path_workspace_bytes(args.nodes)) : 0;
  path_acceptance_kernel<kBlock>
      <<<static_cast<unsigned>(args.batch), kBlock, smem, static_cast<cudaStream_t>(stream)>>>(
          args);
  return error_text();
}

}  // namespace specops
