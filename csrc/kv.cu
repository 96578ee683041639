#include "launchers.h"
#include "specops/kv.cuh"
#include "specops/launch.cuh"

namespace specops {
namespace SPECOPS_LAUNCH_NS {

namespace {

template <typename Vec>
cudaError_t launch(const CommitKVArgs& a, int32_t* counters, cudaStream_t stream) {
  constexpr int kTile = 8;
  const int64_t vecs = a.row_bytes / static_cast<int64_t>(sizeof(Vec));
  // 32..128 threads, one Vec each; short rows get a single small block per slab
  int threads = static_cast<int>(vecs < 128 ? ((vecs + 31) / 32) * 32 : 128);
  const int64_t chunks = (vecs + threads - 1) / threads;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(2 * a.layers),
                  static_cast<unsigned>(a.batch));
  const size_t smem = static_cast<size_t>(2 * a.max_moves) * sizeof(int64_t);
  const int32_t blocks_per_request = static_cast<int32_t>(chunks * 2 * a.layers);
  return launch_kernel("commit_kv_kernel", commit_kv_kernel<Vec, kTile>, grid,
                       dim3(static_cast<unsigned>(threads)), smem, stream, a, counters,
                       blocks_per_request);
}

cudaError_t commit(const CommitKVArgs& a, int vec_bytes, int32_t* counters, cudaStream_t stream) {
  if (a.batch == 0 || a.max_moves == 0 || a.layers == 0 || a.row_bytes == 0) return cudaSuccess;
  switch (vec_bytes) {
    case 16:
      return launch<uint4>(a, counters, stream);
    case 8:
      return launch<uint2>(a, counters, stream);
    case 4:
      return launch<uint32_t>(a, counters, stream);
    case 2:
      return launch<uint16_t>(a, counters, stream);
    default:
      return launch<uint8_t>(a, counters, stream);
  }
}

}  // namespace

std::string launch_commit_kv(const CommitKVArgs& a, int vec_bytes, int32_t* counters,
                             void* stream) {
  return error_text(commit(a, vec_bytes, counters, static_cast<cudaStream_t>(stream)));
}

}  // namespace SPECOPS_LAUNCH_NS
}  // namespace specops
