// CUDA verify_jacobi: one launch per step, no host sync.  The maths and the draws are those of
// specops/jacobi.h (shared with the CPU twin) and specops/reference/verify.py.
//
// Chain mode: grid B * L (1-D, block b * L + i), one block per (slot i, request b).  Each block
// recomputes the accepted prefix a from the L scalar tests (one per thread, L loads of p(x) and
// q(x)), then finishes its slot: the residual or fresh draw and the candidates.  Slots never wait
// on each other.
//
// Tree mode (SJD-PAC window): grid B * L likewise.  Block 0 of a request walks the tree (its passes
// over the vocabulary are the rejections' residual sums and the final draw); block n >= 1 does
// node n's continuation work (the kept-or-resampled token of its first child and its
// candidates) if n is a first child, i.e. could lie on the continuation line, without waiting
// for the walk.  Every block bumps the request's counter after a fence; the last one reads the
// workspace, writes the outputs (jacobi_tree_finish) and resets the counter.  Bytes: the walk
// reads its rows once per rejection (its last rejection's pass keeps the residual's chunk sums,
// so the final draw after it scans one chunk) or once for a final draw without; a line node
// reads p and q once for a resample (the draw from the unnormalised residual: its chunk sums,
// then the hit chunk) and p once for its k candidates (chunk sums once; after each draw the
// chunk that lost the drawn id is summed again and only the hit chunk is scanned).
//
// Vocabulary passes are block-wide with float64 sums and 16-byte loads.  A draw t ~ w
// (u * total) is one pass of per-chunk sums (a warp per chunk, the chunks' sum is the total) and a
// block scan of only the chunk that holds u * total.
#pragma once
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "specops/block_sample.cuh"
#include "specops/group_block.cuh"
#include "specops/jacobi.h"
#include "specops/launch.cuh"

namespace specops {

constexpr int kJacobiChunks = 64;  // most chunks of a draw's first pass
constexpr int kJacobiUnroll = 4;   // quads (16-byte loads per row) in flight per thread

template <int BLOCK>
struct JacobiSmem {
  union {
    typename cub::BlockReduce<double, BLOCK>::TempStorage reduce;
    typename cub::BlockScan<double, BLOCK>::TempStorage scan;
    typename cub::BlockReduce<int, BLOCK>::TempStorage reduce_int;
  } tmp;
  SmemArray<double, kJacobiChunks> chunk;
  double d0, d1, d2;
  int i0, i1, i2;
};

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide vocabulary passes.  Every thread of the block calls every member alike (the
// arguments are block-uniform); results are returned to every thread.  Entries are read in
// quads of 4 consecutive ids (w.quad: one 16-byte load per row), kJacobiUnroll quads per thread
// in flight; the V % 4 tail entry by entry.
template <int BLOCK>
struct BlockJacobiOps {
  JacobiSmem<BLOCK>& sm;
  int64_t vocab;
  const RngArgs& rng;
  int final_last = -1;  // sum2_final's last positive entry of r (every thread)

  __device__ bool leader() const { return threadIdx.x == 0; }
  __device__ void sync() const { __syncthreads(); }

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
    if (threadIdx.x == 0) sm.i1 = r;
    __syncthreads();
    return sm.i1;
  }

  __device__ int block_max(int v) {
    __syncthreads();
    const int r = cub::BlockReduce<int, BLOCK>(sm.tmp.reduce_int).Reduce(v, MaxOp());
    if (threadIdx.x == 0) sm.i2 = r;
    __syncthreads();
    return sm.i2;
  }

  // f(i, o) for the quads i = 4 * (first + n * step) < 4 * (V / 4), kJacobiUnroll at a time
  // (all loads issued before the arithmetic), then g(v) for the tail entries of this thread.
  template <class W, class F>
  __device__ void quads(const W& w, int64_t first, int64_t step, int64_t end_quad, F f) const {
    int64_t qd = first;
    for (; qd + (kJacobiUnroll - 1) * step < end_quad; qd += kJacobiUnroll * step) {
      float o[kJacobiUnroll][4];
#pragma unroll
      for (int u = 0; u < kJacobiUnroll; ++u) w.quad(4 * (qd + u * step), o[u]);
#pragma unroll
      for (int u = 0; u < kJacobiUnroll; ++u) f(4 * (qd + u * step), o[u]);
    }
    for (; qd < end_quad; qd += step) {
      float o[4];
      w.quad(4 * qd, o);
      f(4 * qd, o);
    }
  }

  template <class W>
  __device__ double sum(const W& w) {
    double s = 0.0;
    quads(w, threadIdx.x, BLOCK, vocab / 4, [&](int64_t, const float* o) {
      s += (static_cast<double>(o[0]) + static_cast<double>(o[1])) +
           (static_cast<double>(o[2]) + static_cast<double>(o[3]));
    });
    for (int64_t v = vocab / 4 * 4 + threadIdx.x; v < vocab; v += BLOCK)
      s += static_cast<double>(w(v));
    return block_sum(s);
  }

  template <class F>
  __device__ void sum2(const F& f, double* s1, double* s2) {
    double a = 0.0, b = 0.0;
    const int64_t nq = vocab / 4;
    int64_t qd = threadIdx.x;
    for (; qd + BLOCK < nq; qd += 2 * BLOCK) {
      float r0[4], q0[4], r1[4], q1[4];
      f.quad(4 * qd, r0, q0);
      f.quad(4 * (qd + BLOCK), r1, q1);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        a += static_cast<double>(r0[e]) + static_cast<double>(r1[e]);
        b += static_cast<double>(q0[e]) + static_cast<double>(q1[e]);
      }
    }
    for (; qd < nq; qd += BLOCK) {
      float r0[4], q0[4];
      f.quad(4 * qd, r0, q0);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        a += static_cast<double>(r0[e]);
        b += static_cast<double>(q0[e]);
      }
    }
    for (int64_t v = nq * 4 + threadIdx.x; v < vocab; v += BLOCK) {
      float r, q;
      f(v, &r, &q);
      a += static_cast<double>(r);
      b += static_cast<double>(q);
    }
    *s1 = block_sum(a);
    *s2 = block_sum(b);
  }

  // sum2 of the walk's last rejection, chunk by chunk (a warp per chunk, as chunk_pass): also
  // keeps sm.chunk[c] = chunk c's sum of r (f's first term) and r's last positive entry, so
  // that draw_final(WalkResidW{f}, u) is draw's locate and scan alone.  Every chunk sum equals
  // chunk_pass's (the same lanes, order and reduction); s1 = the sum of the chunk sums.
  template <class F>
  __device__ void sum2_final(const F& f, double* s1, double* s2) {
    const int64_t chunk = chunk_size();
    const int64_t nchunks = num_chunks(chunk);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double b = 0.0;
    int last = -1;
    for (int64_t c = warp; c < nchunks; c += BLOCK / 32) {
      int64_t q_lo, q_hi;
      chunk_quads(c, chunk, &q_lo, &q_hi);
      double a = 0.0;
      int64_t qd = q_lo + lane;
      for (; qd + 32 < q_hi; qd += 64) {  // two quads of p and q in flight a lane
        float r0[4], d0[4], r1[4], d1[4];
        f.quad(4 * qd, r0, d0);
        f.quad(4 * (qd + 32), r1, d1);
        add_positive(r0, 4 * qd, &a, &last);
        add_positive(r1, 4 * (qd + 32), &a, &last);
#pragma unroll
        for (int e = 0; e < 4; ++e) b += static_cast<double>(d0[e]) + static_cast<double>(d1[e]);
      }
      for (; qd < q_hi; qd += 32) {
        float r0[4], d0[4];
        f.quad(4 * qd, r0, d0);
        add_positive(r0, 4 * qd, &a, &last);
#pragma unroll
        for (int e = 0; e < 4; ++e) b += static_cast<double>(d0[e]);
      }
      if (c == nchunks - 1) {  // the V % 4 tail belongs to the last chunk
        for (int64_t v = vocab / 4 * 4 + lane; v < vocab; v += 32) {
          float r, d;
          f(v, &r, &d);
          if (r > 0.f) {
            a += static_cast<double>(r);
            last = last > v ? last : static_cast<int>(v);
          }
          b += static_cast<double>(d);
        }
      }
      a = warp_sum(a);
      if (lane == 0) sm.chunk[c] = a;
    }
    final_last = block_max(last);  // its barrier publishes the chunk sums
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; ++c) total += sm.chunk[c];
    *s1 = total;
    *s2 = block_sum(b);
  }

  // draw(w, u) on the chunk sums sum2_final kept (w = WalkResidW of its f).
  template <class W>
  __device__ int32_t draw_final(const W& w, float u) {
    return draw_on_chunks(w, u, final_last >= 0 ? final_last : 0);
  }

  // The draw's second half, on the chunk sums in sm.chunk: the chunk holding u * total, then
  // the scan in it; `fallback` when rounding ran past the end or there is no mass.
  template <class W>
  __device__ int32_t draw_on_chunks(const W& w, float u, int fallback) {
    const int64_t chunk = chunk_size();
    const int64_t nchunks = num_chunks(chunk);
    double running, target;
    const int64_t hit = locate(u, nchunks, &running, &target);
    if (hit >= nchunks) return fallback;
    const int found = scan(w, hit, chunk, running, target);
    return found != INT32_MAX ? found : fallback;
  }

  // acc += the positive entries of o (ids i..i+3) in order; last <- the last of them.
  __device__ static void add_positive(const float* o, int64_t i, double* acc, int* last) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (o[e] > 0.f) {
        *acc += static_cast<double>(o[e]);
        *last = static_cast<int>(i + e);
      }
    }
  }

  // A draw's chunks: at most kJacobiChunks of a multiple of 128 entries each.
  __device__ int64_t chunk_size() const {
    const int64_t per = (vocab + kJacobiChunks - 1) / kJacobiChunks;
    return (per + 127) / 128 * 128;
  }
  __device__ int64_t num_chunks(int64_t chunk) const { return (vocab + chunk - 1) / chunk; }
  // Chunk c's whole quads [*q_lo, *q_hi) (the V % 4 tail entries belong to the last chunk).
  __device__ void chunk_quads(int64_t c, int64_t chunk, int64_t* q_lo, int64_t* q_hi) const {
    const int64_t full_quads = vocab / 4;
    *q_lo = c * chunk / 4;
    *q_hi = (c + 1) * chunk / 4 < full_quads ? (c + 1) * chunk / 4 : full_quads;
  }

  // The calling warp's float64 sum of chunk c of w (the V % 4 tail belongs to the last chunk),
  // the same on every lane; `last` <- the lane's last positive entry seen.  Pass 1 and the
  // candidates' re-sums both call it, so a chunk's sum does not depend on who took it.
  template <class W>
  __device__ double chunk_sum(const W& w, int64_t c, int64_t chunk, int64_t nchunks,
                              int& last) const {
    const int lane = threadIdx.x & 31;
    int64_t q_lo, q_hi;
    chunk_quads(c, chunk, &q_lo, &q_hi);
    double acc = 0.0;
    quads(w, q_lo + lane, 32, q_hi,
          [&](int64_t i, const float* o) { add_positive(o, i, &acc, &last); });
    if (c == nchunks - 1) {
      for (int64_t v = vocab / 4 * 4 + lane; v < vocab; v += 32) {
        const float wv = w(v);
        if (wv > 0.f) {
          acc += static_cast<double>(wv);
          last = last > v ? last : static_cast<int>(v);
        }
      }
    }
    return warp_sum(acc);
  }

  // Pass 1: sm.chunk[c] = chunk c's sum (a warp per chunk); returns the last positive entry
  // (-1: none) on every thread.
  template <class W>
  __device__ int chunk_pass(const W& w, int64_t chunk, int64_t nchunks) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int last = -1;
    for (int64_t c = warp; c < nchunks; c += BLOCK / 32) {
      const double acc = chunk_sum(w, c, chunk, nchunks, last);
      if (lane == 0) sm.chunk[c] = acc;
    }
    return block_max(last);  // its barrier publishes the chunk sums
  }

  // The chunk holding u * total (total = the sum of the chunk sums): its index (nchunks when
  // none: no mass, or float64 rounding past the end), the sum of the chunks before it and the
  // target, the same on every thread.
  __device__ int64_t locate(float u, int64_t nchunks, double* running, double* target) {
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int64_t c = 0; c < nchunks; ++c) total += sm.chunk[c];
      const double t = static_cast<double>(u) * total;
      double run = 0.0;
      int64_t hit = nchunks;
      for (int64_t c = 0; c < nchunks; ++c) {
        if (sm.chunk[c] > 0.0 && run + sm.chunk[c] > t) {
          hit = c;
          break;
        }
        run += sm.chunk[c];
      }
      sm.i0 = static_cast<int>(hit);
      sm.d1 = run;
      sm.d2 = t;
    }
    __syncthreads();
    *running = sm.d1;
    *target = sm.d2;
    const int64_t hit = sm.i0;
    __syncthreads();  // sm.i0 / d1 / d2 are reused by the next locate
    return hit;
  }

  // Pass 2: min{i >= start of chunk `hit` : running + w_(chunk start) + ... + w_i > target,
  // w_i > 0} in tiles of 4 * BLOCK entries (4 consecutive a thread, one block scan a tile; it
  // runs on past the chunk only if float64 rounding disagrees with pass 1); INT32_MAX if none.
  template <class W>
  __device__ int scan(const W& w, int64_t hit, int64_t chunk, double running, double target) {
    const int64_t V = vocab;
    int found = INT32_MAX;
    for (int64_t base = hit * chunk; base < V; base += 4 * BLOCK) {
      const int64_t i = base + 4 * threadIdx.x;
      float o[4] = {0.f, 0.f, 0.f, 0.f};
      if (i + 3 < V) {
        w.quad(i, o);
      } else {
        for (int e = 0; e < 4; ++e)
          if (i + e < V) o[e] = w(i + e);
      }
      double mine = 0.0;
#pragma unroll
      for (int e = 0; e < 4; ++e) mine += o[e] > 0.f ? static_cast<double>(o[e]) : 0.0;
      double before, tile;
      __syncthreads();
      cub::BlockScan<double, BLOCK>(sm.tmp.scan).ExclusiveSum(mine, before, tile);
      double run = running + before;
      int hit_i = INT32_MAX;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (o[e] > 0.f && hit_i == INT32_MAX) {
          run += static_cast<double>(o[e]);
          if (run > target) hit_i = static_cast<int>(i + e);
        }
      }
      found = block_min(hit_i);
      if (found != INT32_MAX) break;
      running += tile;
    }
    return found;
  }

  // t = min{i : w_0 + ... + w_i > u * total, w_i > 0}; else the last i with w_i > 0; else `none`.
  // Pass 1: chunk sums and the last positive entry; pass 2: a block scan from the chunk holding
  // u * total.
  template <class W>
  __device__ int32_t draw(const W& w, float u, int32_t none = 0) {
    const int64_t chunk = chunk_size();
    const int last = chunk_pass(w, chunk, num_chunks(chunk));
    return draw_on_chunks(w, u, last >= 0 ? last : none);
  }

  // The draw from r = max(p - q, 0); -1 when r has no mass.
  __device__ int32_t draw_residual(const ResidW& r, float u) { return draw(r, u, -1); }

  // k draws without replacement from row p into out[0..k): draw j samples mass(p) with out[0..j)
  // set to 0 (ExclW), uniform = draw draw0 + j of `row`; -1 once no positive entry is left (c is
  // block-uniform).  Exactly the k draws `draw` would make, with one pass over p instead of k:
  // the chunk sums are taken once, and after draw j only the chunk that lost out[j] is summed
  // again (by the same warp routine, so every sum equals a fresh pass's).  The barrier after
  // thread 0's store publishes out[j] (global memory) to the next draw's readers.
  __device__ void candidates(const float* p, int64_t row, int64_t draw0, int64_t k, int32_t* out) {
    if (k <= 0) return;
    const int64_t chunk = chunk_size();
    const int64_t nchunks = num_chunks(chunk);
    int last = chunk_pass(MassW{p}, chunk, nchunks);
    for (int64_t j = 0; j < k; ++j) {
      const ExclW w{p, out, j};
      double running, target;
      const int64_t hit = locate(rng.uniform(row, draw0 + j), nchunks, &running, &target);
      int c = hit < nchunks ? scan(w, hit, chunk, running, target) : INT32_MAX;
      if (c == INT32_MAX) {  // rounding past the end, or no mass: the last positive entry left
        if (j > 0) last = last_positive(w);
        c = last;
      }
      if (threadIdx.x == 0)
        for (int64_t jj = j; jj < (c < 0 ? k : j + 1); ++jj) out[jj] = c;
      __syncthreads();
      if (c < 0) break;
      if (j + 1 < k && (threadIdx.x >> 5) == 0) {  // warp 0 re-sums the chunk that lost c
        int unused = -1;
        const double s = chunk_sum(ExclW{p, out, j + 1}, c / chunk, chunk, nchunks, unused);
        if (threadIdx.x == 0) sm.chunk[c / chunk] = s;
      }
      __syncthreads();
    }
  }

  // The last i with w_i > 0, -1 when none (a block pass; the rare fallback of `candidates`).
  template <class W>
  __device__ int last_positive(const W& w) {
    int last = -1;
    for (int64_t v = threadIdx.x; v < vocab; v += BLOCK)
      if (w(v) > 0.f) last = static_cast<int>(v);
    return block_max(last);
  }
};

// Chain mode with GSD's grouping, before jacobi_chain_kernel: block (b, i) runs slot i's test
// over the block (group_block.cuh) and writes the decision to the workspace.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK, 1) jacobi_group_test_kernel(JacobiArgs A) {
  __shared__ GroupSmem<BLOCK> sm;
  const int64_t i = blockIdx.x % A.len, b = blockIdx.x / A.len;
  const int64_t x = jacobi_tok(A, b, i);
  const bool ok = x != -1 && block_group_accept<BLOCK>(A.rng.uniform(b, i), jacobi_p(A, b, i),
                                                       jacobi_q(A, b, i), A.vocab, x, A.relax, sm);
  if (threadIdx.x == 0) A.workspace[b * A.ws_stride + i] = ok ? 1 : 0;
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK, 1) jacobi_chain_kernel(JacobiArgs A) {
  __shared__ JacobiSmem<BLOCK> sm;
  const int64_t i = blockIdx.x % A.len, b = blockIdx.x / A.len;  // 1-D grid: any batch
  BlockJacobiOps<BLOCK> ops{sm, A.vocab, A.rng};
  // a = the first slot that fails its test (L when all pass): one scalar test per thread
  int first = static_cast<int>(A.len);
  for (int64_t j = threadIdx.x; j < A.len; j += BLOCK)
    if (!jacobi_chain_ok(A, b, j)) first = first < j ? first : static_cast<int>(j);
  const int64_t a = ops.block_min(first);
  jacobi_chain_slot(A, b, i, a, ops);
}

// Dynamic shared memory: fc, ns, parent, ok0, tok_src, cand_src [L] (int32), then tok, xs [L]
// (int64), S, T [L] (double).
SPECOPS_HD size_t jacobi_tree_smem_ints(int64_t L) {
  return (6 * static_cast<size_t>(L) * sizeof(int32_t) + 7) / 8 * 8;
}
inline size_t jacobi_tree_smem(int64_t L) {
  return jacobi_tree_smem_ints(L) + 4 * static_cast<size_t>(L) * 8;
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) jacobi_tree_kernel(JacobiArgs A) {
  __shared__ JacobiSmem<BLOCK> sm;
  __shared__ int s_last, s_depth;
  SPECOPS_DYNAMIC_SMEM(unsigned char, dyn);
  const int64_t L = A.len;
  int32_t* fc = reinterpret_cast<int32_t*>(dyn);
  int32_t* ns = fc + L;
  int32_t* parent = ns + L;
  int32_t* ok0 = parent + L;
  int32_t* tok_src = ok0 + L;
  int32_t* cand_src = tok_src + L;
  int64_t* tok = reinterpret_cast<int64_t*>(dyn + jacobi_tree_smem_ints(L));
  int64_t* xs = tok + L;
  double* S = reinterpret_cast<double*>(xs + L);
  double* T = S + L;
  const int64_t item = blockIdx.x % L, b = blockIdx.x / L;  // 1-D grid: any batch
  int32_t* ws = A.workspace + b * A.ws_stride;
  BlockJacobiOps<BLOCK> ops{sm, A.vocab, A.rng};

  // the request's tree rows and tokens in shared memory; parents in parallel (one thread per
  // node: children lists are disjoint)
  for (int64_t m = threadIdx.x; m < L; m += BLOCK) {
    fc[m] = A.first_child[b * A.tree_sb + m];
    ns[m] = A.next_sibling[b * A.tree_sb + m];
    tok[m] = A.tokens[b * A.tokens_sb + m];
    parent[m] = -1;
  }
  __syncthreads();
  const TreeView tv{fc, ns, tok, ok0, L, 0};
  for (int64_t m = threadIdx.x; m < L; m += BLOCK) jacobi_set_parents(tv, m, parent);
  __syncthreads();

  if (item == 0) {
    // block 0: every node's test against its parent's untouched rows, in parallel, then the
    // walk, whose scalar steps now only read shared memory until a sibling is rejected
    for (int64_t c = threadIdx.x; c < L; c += BLOCK)
      ok0[c] = parent[c] >= 0 && tok[c] != -1 && jacobi_fresh_test(A, b, parent[c], c, tok[c]);
    __syncthreads();
    jacobi_tree_walk(A, b, tv, ops, xs, S, T, ws);
  } else {
    // block n >= 1 (the root is never on a continuation line): node n's continuation work
    const int64_t n = item;
    if (threadIdx.x == 0)
      s_depth = jacobi_on_line(tv, parent, n) ? static_cast<int>(jacobi_depth(parent, n, L)) : -1;
    __syncthreads();
    const int64_t depth = s_depth;
    if (depth >= 0) jacobi_tree_node(A, b, tv, n, depth, true, true, ops, ws);
  }

  // completion: the last block of request b assembles its outputs.  Every thread fences its
  // workspace writes before thread 0 signals.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(A.counters + b, 1);
    s_last = done == static_cast<int>(L) - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const volatile int32_t* vws = ws;
  if (threadIdx.x == 0) {
    jacobi_tree_line(A, b, tv, vws, tok_src, cand_src);
    A.counters[b] = 0;  // ready for the next launch (CUDA graph replays included)
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < L; d += BLOCK)
    jacobi_tree_write(A, b, vws, tok_src, cand_src, d);
}

}  // namespace specops
