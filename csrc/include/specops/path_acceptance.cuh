// CUDA path_acceptance: one block per request.  Every node's alpha is gathered in parallel; the
// products S and sums E along each root-to-node path come from pointer jumping (each round a
// node folds in the value of its current ancestor link and doubles the link: log2(depth)
// rounds, so a 1024-node chain costs 10 rounds, not 1024 dependent steps).  Float64 throughout;
// the products associate differently from the CPU twin's root-to-leaf order, which moves the
// float64 values at the 1e-16 level (the float32 outputs agree to within one rounding).
// Leaves are ranked by a block scan of the no-child flags.
#pragma once
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "specops/launch.cuh"
#include "specops/path_acceptance.h"

namespace specops {

// The per-row state, in shared memory or the global workspace (path_workspace_bytes per row).
// The ping-pong buffers are picked by a select, not an array index (which would go to local
// memory).
struct PathState {
  double* s;             // [N] S_n
  double *val0, *val1;   // [N] ping-pong values being folded
  int32_t *anc0, *anc1;  // [N] ping-pong ancestor links, -1 past the root
  int32_t* has_child;    // [N]

  __device__ PathState(char* base, int64_t n) {
    s = reinterpret_cast<double*>(base);
    val0 = s + n;
    val1 = val0 + n;
    anc0 = reinterpret_cast<int32_t*>(val1 + n);
    anc1 = anc0 + n;
    has_child = anc1 + n;
  }
  __device__ double* val(int i) const { return i ? val1 : val0; }
  __device__ int32_t* anc(int i) const { return i ? anc1 : anc0; }
};

// v_n <- v_n (op) v_anc(n) over all ancestors of n, starting from val0 and the effective
// parents; returns the buffer that holds the result.
template <int BLOCK, bool PRODUCT>
__device__ int path_fold(const PathAcceptanceArgs& a, int64_t b, PathState& st) {
  const int64_t n_nodes = a.nodes;
  for (int64_t n = threadIdx.x; n < n_nodes; n += BLOCK)
    st.anc0[n] = static_cast<int32_t>(path_parent(a, b, n));
  __syncthreads();
  int cur = 0;
  while (true) {
    const double* v_in = st.val(cur);
    const int32_t* a_in = st.anc(cur);
    double* v_out = st.val(cur ^ 1);
    int32_t* a_out = st.anc(cur ^ 1);
    int live = 0;
    for (int64_t n = threadIdx.x; n < n_nodes; n += BLOCK) {
      const int32_t m = a_in[n];
      double v = v_in[n];
      int32_t next = -1;
      if (m >= 0) {
        const double w = v_in[m];
        v = PRODUCT ? v * w : v + w;
        next = a_in[m];
        live |= next >= 0;
      }
      v_out[n] = v;
      a_out[n] = next;
    }
    cur ^= 1;
    if (!__syncthreads_or(live)) break;  // every link is past the root
  }
  return cur;
}

template <int BLOCK>
__global__ void path_acceptance_kernel(PathAcceptanceArgs a) {
  SPECOPS_DYNAMIC_SMEM(char, smem);
  __shared__ typename cub::BlockScan<int, BLOCK>::TempStorage scan_tmp;
  __shared__ int s_leaves;
  const int64_t b = blockIdx.x;
  const int64_t n_nodes = a.nodes, P = a.num_paths;
  char* base = n_nodes <= kPathSmemNodes
                   ? smem
                   : static_cast<char*>(a.workspace) + b * path_workspace_bytes(n_nodes);
  PathState st(base, n_nodes);

  // alpha_n of every node (1 at the root); clear the has-child flags and the outputs
  for (int64_t n = threadIdx.x; n < n_nodes; n += BLOCK) {
    st.val0[n] = n == 0 ? 1.0 : path_alpha(a, b, n, path_parent(a, b, n));
    st.has_child[n] = 0;
  }
  for (int64_t i = threadIdx.x; i < P; i += BLOCK) {
    a.out_kappa[b * P + i] = 0.f;
    a.out_expected_len[b * P + i] = 0.f;
  }
  __syncthreads();
  // siblings flag their parent concurrently: an atomic store (plain stores of the same value
  // from several threads are a data race, found by cuda_sim's ThreadSanitizer stage)
  for (int64_t n = 1 + threadIdx.x; n < n_nodes; n += BLOCK)
    atomicExch(&st.has_child[path_parent(a, b, n)], 1);

  // S_n = prod of alpha over root..n; then E_n = sum of S over the path without the root
  int r = path_fold<BLOCK, true>(a, b, st);
  for (int64_t n = threadIdx.x; n < n_nodes; n += BLOCK) {
    const double sn = st.val(r)[n];
    st.s[n] = sn;
    st.val0[n] = n == 0 ? 0.0 : sn;
  }
  __syncthreads();
  r = path_fold<BLOCK, false>(a, b, st);

  // leaf k (the k-th node with no child, in index order) -> column k
  if (threadIdx.x == 0) s_leaves = 0;
  __syncthreads();
  for (int64_t base_n = 0; base_n < n_nodes; base_n += BLOCK) {
    const int64_t n = base_n + threadIdx.x;
    const int leaf = n < n_nodes && !st.has_child[n];
    int rank;
    cub::BlockScan<int, BLOCK>(scan_tmp).ExclusiveSum(leaf, rank);
    const int64_t col = s_leaves + rank;
    if (leaf && col < P) {
      a.out_kappa[b * P + col] = static_cast<float>(st.s[n]);
      a.out_expected_len[b * P + col] = static_cast<float>(st.val(r)[n]);
    }
    __syncthreads();
    if (threadIdx.x == BLOCK - 1) s_leaves += rank + leaf;
    __syncthreads();
  }
}

}  // namespace specops
