// CUDA verify_jacobi: one launch per step, no host sync.  The maths and the draws are those of
// specops/jacobi.h (shared with the CPU twin) and specops/reference/verify.py.
//
// Chain mode: grid (L, B), one block per (slot i, request b).  Each block recomputes the accepted
// prefix a from the L scalar tests (one per thread, L loads of p(x) and q(x)), then finishes its
// slot: the residual or fresh draw and the Gumbel top-k candidates.  Slots never wait on each
// other.
//
// Tree mode (SJD-PAC window): grid (L + 1, B).  Block 0 of a request walks the tree (its passes
// over the vocabulary are the rejections' residual sums and the final draw); block 1 + n does
// node n's continuation work (the kept-or-resampled token of its first child and its
// candidates) for every node n that is a first child, i.e. could lie on the continuation line,
// without waiting for the walk.  Every block bumps the request's counter after a fence; the last
// one reads the workspace and writes the outputs (jacobi_tree_finish) and resets the counter.
//
// Vocabulary passes are block-wide with float64 sums.  A draw t ~ w (u * total) is two passes:
// per-chunk sums (a warp per chunk, the chunks' sum is the total), then a block scan of only the
// chunk that holds u * total.
#pragma once
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "specops/block_sample.cuh"
#include "specops/jacobi.h"
#include "specops/sample_wor.cuh"

namespace specops {

constexpr int kJacobiChunks = 64;  // chunks of a draw's first pass
constexpr int kJacobiTopK = 4;     // Gumbel keys kept per thread (k <= 4: one pass)

template <int BLOCK>
struct JacobiSmem {
  union {
    typename cub::BlockReduce<double, BLOCK>::TempStorage reduce;
    typename cub::BlockScan<double, BLOCK>::TempStorage scan;
    typename cub::BlockReduce<int, BLOCK>::TempStorage reduce_int;
    typename GumbelReduce<BLOCK>::TempStorage gumbel;
  } tmp;
  double chunk[kJacobiChunks];
  double d0, d1, d2;
  int i0, i1;
};

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int BLOCK>
struct BlockJacobiOps {
  JacobiSmem<BLOCK>& sm;
  int64_t vocab;
  const RngArgs& rng;

  __device__ bool leader() const { return threadIdx.x == 0; }

  __device__ double block_sum(double v) {
    __syncthreads();
    const double s = cub::BlockReduce<double, BLOCK>(sm.tmp.reduce).Sum(v);
    if (threadIdx.x == 0) sm.d0 = s;
    __syncthreads();
    return sm.d0;
  }

  __device__ int block_min(int v) {
    __syncthreads();
    const int r = cub::BlockReduce<int, BLOCK>(sm.tmp.reduce_int).Reduce(v, MinOp());
    if (threadIdx.x == 0) sm.i0 = r;
    __syncthreads();
    return sm.i0;
  }

  __device__ int block_max(int v) {
    __syncthreads();
    const int r = cub::BlockReduce<int, BLOCK>(sm.tmp.reduce_int).Reduce(v, MaxOp());
    if (threadIdx.x == 0) sm.i1 = r;
    __syncthreads();
    return sm.i1;
  }

  template <class W>
  __device__ double sum(const W& w) {
    double s0 = 0.0, s1 = 0.0;
    int64_t v = threadIdx.x;
    for (; v + BLOCK < vocab; v += 2 * BLOCK) {  // two independent loads in flight
      s0 += static_cast<double>(w(v));
      s1 += static_cast<double>(w(v + BLOCK));
    }
    if (v < vocab) s0 += static_cast<double>(w(v));
    return block_sum(s0 + s1);
  }

  template <class F>
  __device__ void sum2(const F& f, double* s1, double* s2) {
    double a = 0.0, b = 0.0;
    for (int64_t v = threadIdx.x; v < vocab; v += BLOCK) {
      float r, q;
      f(v, &r, &q);
      a += static_cast<double>(r);
      b += static_cast<double>(q);
    }
    *s1 = block_sum(a);
    *s2 = block_sum(b);
  }

  // t = min{i : w_0 + ... + w_i > u * total, w_i > 0}; else the last i with w_i > 0; else 0.
  template <class W>
  __device__ int32_t draw(const W& w, float u) {
    const int64_t V = vocab;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t nchunks = (V + 31) / 32;
    if (nchunks > kJacobiChunks) nchunks = kJacobiChunks;
    const int64_t chunk = (V + nchunks - 1) / nchunks;
    // pass 1: chunk sums (warp per chunk) and the last positive entry
    int last = -1;
    for (int64_t c = warp; c < nchunks; c += BLOCK / 32) {
      const int64_t lo = c * chunk, hi = lo + chunk < V ? lo + chunk : V;
      double acc = 0.0;
#pragma unroll 4
      for (int64_t i = lo + lane; i < hi; i += 32) {
        const float wi = w(i);
        if (wi > 0.f) {
          acc += static_cast<double>(wi);
          last = static_cast<int>(i);
        }
      }
      acc = warp_sum(acc);
      if (lane == 0) sm.chunk[c] = acc;
    }
    last = block_max(last);  // syncs: the chunk sums are visible after it
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int64_t c = 0; c < nchunks; ++c) total += sm.chunk[c];
      const double target = static_cast<double>(u) * total;
      double running = 0.0;
      int64_t hit = nchunks;
      for (int64_t c = 0; c < nchunks; ++c) {
        if (sm.chunk[c] > 0.0 && running + sm.chunk[c] > target) {
          hit = c;
          break;
        }
        running += sm.chunk[c];
      }
      sm.i0 = static_cast<int>(hit);
      sm.d1 = running;
      sm.d2 = target;
    }
    __syncthreads();
    const int64_t hit = sm.i0;
    double running = sm.d1;
    const double target = sm.d2;
    const int fallback = last >= 0 ? last : 0;
    if (hit >= nchunks) return fallback;  // rounding ran past the end, or no mass
    // pass 2: block scan from the chunk holding the target (normally ends inside it)
    int found = INT32_MAX;
    for (int64_t base = hit * chunk; base < V; base += BLOCK) {
      const int64_t i = base + threadIdx.x;
      const float wf = i < V ? w(i) : 0.f;
      const double wi = wf > 0.f ? static_cast<double>(wf) : 0.0;
      double inclusive, tile;
      __syncthreads();
      cub::BlockScan<double, BLOCK>(sm.tmp.scan).InclusiveSum(wi, inclusive, tile);
      const int mine = (wi > 0.0 && running + inclusive > target) ? static_cast<int>(i) : INT32_MAX;
      found = block_min(mine);
      if (found != INT32_MAX) break;
      running += tile;
    }
    return found != INT32_MAX ? found : fallback;
  }

  __device__ void topk(const float* p, int64_t row, int64_t draw0, int64_t k, int32_t* out) {
    __syncthreads();
    block_gumbel_topk<BLOCK, kJacobiTopK>(p, vocab, rng, row, draw0, k, out, sm.tmp.gumbel);
    __syncthreads();
  }
};

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) jacobi_chain_kernel(JacobiArgs A) {
  __shared__ JacobiSmem<BLOCK> sm;
  const int64_t i = blockIdx.x, b = blockIdx.y;
  BlockJacobiOps<BLOCK> ops{sm, A.vocab, A.rng};
  // a = the first slot that fails its test (L when all pass): one scalar test per thread
  int first = static_cast<int>(A.len);
  for (int64_t j = threadIdx.x; j < A.len; j += BLOCK)
    if (!jacobi_chain_ok(A, b, j)) first = first < j ? first : static_cast<int>(j);
  const int64_t a = ops.block_min(first);
  jacobi_chain_slot(A, b, i, a, ops);
}

// Dynamic shared memory: depth[L], parent[L] (int32), then xs[L] (int64), S[L], T[L] (double).
inline size_t jacobi_tree_smem(int64_t L) {
  const size_t ints = (2 * static_cast<size_t>(L) * sizeof(int32_t) + 7) / 8 * 8;
  return ints + static_cast<size_t>(L) * (sizeof(int64_t) + 2 * sizeof(double));
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) jacobi_tree_kernel(JacobiArgs A) {
  __shared__ JacobiSmem<BLOCK> sm;
  __shared__ int s_last;
  extern __shared__ __align__(16) unsigned char dyn[];
  const int64_t L = A.len;
  int32_t* depth = reinterpret_cast<int32_t*>(dyn);
  int32_t* parent = depth + L;
  int64_t* xs = reinterpret_cast<int64_t*>(dyn + (2 * L * sizeof(int32_t) + 7) / 8 * 8);
  double* S = reinterpret_cast<double*>(xs + L);
  double* T = S + L;
  const int64_t item = blockIdx.x, b = blockIdx.y;
  int32_t* ws = A.workspace + b * A.ws_stride;
  BlockJacobiOps<BLOCK> ops{sm, A.vocab, A.rng};
  if (item == 0) {
    jacobi_tree_walk(A, b, ops, xs, S, T, ws);
  } else {
    const int64_t n = item - 1;
    if (threadIdx.x == 0) jacobi_tree_shape(A, b, depth, parent);
    __syncthreads();
    // node n can be l_d (d = depth(n)) only if it is the first child of its parent
    const bool on_line =
        n >= 1 && parent[n] >= 0 && jacobi_link(A.first_child, A, b, parent[n]) == n;
    if (on_line) jacobi_tree_node(A, b, n, depth[n], true, true, ops, ws);
  }
  // completion: the last block of request b assembles its outputs.  Every thread fences its
  // workspace writes before thread 0 signals.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(A.counters + b, 1);
    s_last = done == static_cast<int>(gridDim.x) - 1;
  }
  __syncthreads();
  if (s_last && threadIdx.x == 0) {
    __threadfence();
    const volatile int32_t* vws = ws;
    jacobi_tree_finish(A, b, vws);
    A.counters[b] = 0;  // ready for the next launch (CUDA graph replays included)
  }
}

}  // namespace specops
