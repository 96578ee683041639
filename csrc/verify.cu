#include "specops/verify.cuh"
#include "verify_launch.h"

namespace specops {

std::string launch_verify_chain_cuda(const VerifyChainArgs& args, void* stream) {
  if (args.batch == 0) return std::string();
  constexpr int kBlock = 512;
  verify_chain_kernel<kBlock>
      <<<static_cast<unsigned>(args.batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(args);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? std::string() : std::string(cudaGetErrorString(err));
}

}  // namespace specops
