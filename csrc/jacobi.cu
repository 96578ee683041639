#include "launchers.h"
#include "specops/jacobi.cuh"
#include "specops/launch.cuh"

namespace specops {
namespace SPECOPS_LAUNCH_NS {

// Chain mode: grid B * L; tree mode: grid B * L with dynamic shared memory for the walk's
// rejection state and the tree shape (see specops/jacobi.cuh).
std::string launch_verify_jacobi(const JacobiArgs& args, void* stream) {
  if (args.batch == 0 || args.len == 0) return std::string();
  // one block per (request, slot), flat: block x = b * L + i (x reaches 2^31 - 1; y only 65535)
  if (args.batch > 2147483647 / args.len)
    return std::string("batch * len > 2^31 - 1 blocks is not supported by the CUDA kernel");
  constexpr int kBlock = 512;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(args.batch * args.len));
  cudaError_t err;
  if (args.first_child == nullptr) {
    if (args.relax.codebook && args.workspace) {  // GSD: each slot's test once, over a block
      err = launch_kernel("jacobi_group_test_kernel", jacobi_group_test_kernel<kBlock>, grid,
                          dim3(kBlock), 0, s, args);
      if (err != cudaSuccess) return error_text(err);
    }
    err = launch_kernel("jacobi_chain_kernel", jacobi_chain_kernel<kBlock>, grid, dim3(kBlock), 0,
                        s, args);
  } else {
    const size_t smem = jacobi_tree_smem(args.len);
    if (smem > 48 * 1024) {
      const cudaError_t e =
          cudaFuncSetAttribute(jacobi_tree_kernel<kBlock>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return error_text(e);
    }
    err = launch_kernel("jacobi_tree_kernel", jacobi_tree_kernel<kBlock>, grid, dim3(kBlock), smem,
                        s, args);
  }
  return error_text(err);
}

}  // namespace SPECOPS_LAUNCH_NS
}  // namespace specops
