// CUDA verification kernels: one block per request.  The scalar decisions (acceptance tests,
// the tree walk) run on thread 0 through the same SPECOPS_HD cores as the CPU twin
// (specops/verify.h); the passes over the vocabulary (residual sums and normalisation, the
// final inverse-CDF draw, greedy argmaxes) are block-parallel (BlockSampler: float64 sums, tile
// scan that stops at the target).
#pragma once
#include <cuda_runtime.h>

#include "specops/block_sample.cuh"
#include "specops/group_block.cuh"
#include "specops/verify.h"

namespace specops {

// The rows the passes read are prob_math.h's and verify.h's functors: MassW (draws and the
// greedy argmax: the reference's argmax of mass(p), 0 for a row without mass), ResidW,
// BlockResidual, NormBlockResidual.

// Both block sums (valid on every thread) of two per-thread partials.
template <int BLOCK>
__device__ double2 block_sum2(typename BlockSampler<BLOCK>::TempStorage& tmp, double x, double y) {
  __shared__ double2 s_sums;
  using Reduce = cub::BlockReduce<double, BLOCK>;
  __syncthreads();
  const double sx = Reduce(tmp.reduce).Sum(x);
  __syncthreads();
  const double sy = Reduce(tmp.reduce).Sum(y);
  if (threadIdx.x == 0) s_sums = make_double2(sx, sy);
  __syncthreads();
  return s_sums;
}

// GSD's grouping (relax.codebook), before the chain kernels: block (b, i) runs draft i's test
// over the block (group_block.cuh) and writes the decision to group_ok, which chain_test reads.
// Every valid draft is tested, in parallel (a pass over a row each), not only those up to the
// first rejection; drafts past the valid ones are not.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK, 1) verify_chain_group_test_kernel(VerifyChainArgs a) {
  __shared__ GroupSmem<BLOCK> sm;
  __shared__ int64_t s_valid;
  const int64_t b = blockIdx.x / a.k, i = blockIdx.x % a.k;
  if (threadIdx.x == 0) s_valid = chain_num_valid(a, b);
  __syncthreads();
  if (i >= s_valid) return;
  const float* p = a.target + b * a.target_sb + i * a.target_sk;
  const float* q = a.draft ? a.draft + b * a.draft_sb + i * a.draft_sk : nullptr;
  const bool ok = block_group_accept<BLOCK>(a.rng.uniform(b, i), p, q, a.vocab,
                                            a.tokens[b * a.tokens_sb + i], a.relax, sm);
  if (threadIdx.x == 0) a.group_ok[b * a.k + i] = ok ? 1 : 0;
}

// The accepted prefix of request b: n_valid, acc = the first rejected valid draft (else
// n_valid) and that draft's token x (-1 if none).  The tests are independent (test i reads draw
// i): thread i runs test i (GSD's: its pre-pass's decision).  All three are valid on every
// thread.
template <int BLOCK>
__device__ void chain_prefix(const VerifyChainArgs& a, int64_t b,
                             typename BlockSampler<BLOCK>::TempStorage& tmp, int64_t* n_valid,
                             int64_t* acc, int64_t* x = nullptr) {
  __shared__ int64_t s_acc, s_valid, s_x;
  if (threadIdx.x == 0) s_valid = chain_num_valid(a, b);
  __syncthreads();
  const int64_t n = s_valid;
  int first_rejected = INT32_MAX;
  for (int64_t i = threadIdx.x; i < n; i += BLOCK) {
    if (first_rejected == INT32_MAX && !chain_test(a, b, i)) first_rejected = static_cast<int>(i);
  }
  using ReduceInt = typename BlockSampler<BLOCK>::ReduceInt;
  const int first = ReduceInt(tmp.reduce_int).Reduce(first_rejected, MinOp());
  if (threadIdx.x == 0) {
    s_acc = first < n ? first : n;
    s_x = first < n ? static_cast<int64_t>(a.tokens[b * a.tokens_sb + first]) : -1;
  }
  __syncthreads();
  *n_valid = n;
  *acc = s_acc;
  if (x) *x = s_x;
  __syncthreads();
}

// The row the final token is drawn from: r = max(p_acc - q_acc, 0) after a rejection (q ==
// nullptr: one-hot(x)), p's row acc (the bonus row) when every draft passed.
struct ChainFinalRow {
  const float* p;
  const float* q;
  int64_t x;
  bool residual;
  __device__ float operator()(int64_t i) const {
    return residual ? residual_at(p, q, x, i) : mass(p[i]);
  }
};

__device__ inline ChainFinalRow chain_final_row(const VerifyChainArgs& a, int64_t b, int64_t acc,
                                                int64_t n_valid, int64_t x) {
  const bool rejected = acc < n_valid;
  return ChainFinalRow{a.target + b * a.target_sb + acc * a.target_sk,
                       rejected && a.draft ? a.draft + b * a.draft_sb + acc * a.draft_sk : nullptr,
                       x, rejected};
}

// Sampled verification at small batch, pass 1: block (b, c) of the RowSplit sums chunk c of the
// final row (each block repeats the K acceptance tests: K gathers, no vocabulary pass).  Two
// blocks an SM, as row_split's kSplitCtas counts them (the pass-2 kernel runs one block a
// request: its occupancy does not matter).
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK, 2) verify_chain_split_sum_kernel(VerifyChainArgs a) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  const RowSplit& s = a.split;
  const int64_t b = blockIdx.x / s.chunks, c = blockIdx.x % s.chunks;
  int64_t n_valid, acc, x;
  chain_prefix<BLOCK>(a, b, tmp, &n_valid, &acc, &x);
  const double sum = BlockSampler<BLOCK>(tmp).sum(chain_final_row(a, b, acc, n_valid, x), s.lo(c),
                                                  s.hi(c, a.vocab));
  if (threadIdx.x == 0) s.sums[blockIdx.x] = sum;
}

// Pass 2, one block per request: t = the inverse-CDF draw over the final row, scanned from the
// chunk holding u * total; a residual without mass draws from p's row instead.
template <int BLOCK>
__global__ void verify_chain_split_draw_kernel(VerifyChainArgs a) {
  static_assert(BLOCK >= kSplitMaxChunks, "pass 2 reads one chunk sum per thread");
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  BlockSampler<BLOCK> sampler(tmp);
  const int64_t b = blockIdx.x;
  int64_t n_valid, acc, x;
  chain_prefix<BLOCK>(a, b, tmp, &n_valid, &acc, &x);
  const ChainFinalRow w = chain_final_row(a, b, acc, n_valid, x);
  const float u = a.rng.uniform(b, a.k);
  const SplitStart at = sampler.split_locate(a.split, b, u);
  const int t = w.residual && !(at.total > 0.0)
                    ? sampler.draw(MassW{w.p}, a.vocab, u)
                    : sampler.inverse_cdf(w, a.vocab, at.target, at.begin, at.before, at.until);
  if (threadIdx.x == 0) chain_write_prefix(a, b, acc, t);
}

// A row's argmax from its chunks' (max, first id) pairs e[2c], e[2c+1] (a split greedy pass 1):
// the largest max, then the lowest id, i.e. the row's first maximal id (0 for a row without an
// entry).  Every lane of the warp calls it and gets the id.
__device__ inline int warp_chunk_argmax(const float* e, int64_t chunks) {
  float2 best = make_float2(-INFINITY, kNoArg);
  for (int64_t c = threadIdx.x & 31; c < chunks; c += 32)
    best = MaxFloatIdx()(best, make_float2(e[2 * c], e[2 * c + 1]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, best.x, o),
                                     __shfl_xor_sync(0xffffffffu, best.y, o));
    best = MaxFloatIdx()(best, other);
  }
  return arg_id(best);
}

// A greedy split's pass 1, block (r, c): the max of mass(p) over chunk c of row p and its first
// maximal id, into best[2 * blockIdx.x], best[2 * blockIdx.x + 1].
template <int BLOCK>
__device__ void greedy_chunk(typename BlockSampler<BLOCK>::TempStorage& tmp, const float* p,
                             const RowSplit& s, int64_t c, int64_t vocab, float* best) {
  const float2 m = BlockSampler<BLOCK>(tmp).argmax_in(MassW{p}, s.lo(c), s.hi(c, vocab));
  if (threadIdx.x == 0) {
    best[2 * blockIdx.x] = m.x;
    best[2 * blockIdx.x + 1] = m.y;
  }
}

// Greedy verification at small batch, pass 1: block (r, c) of the RowSplit over the B * (K+1)
// rows (r = b * (K+1) + i) takes the max of mass(p) over chunk c of request b's row i and its
// first maximal id.  Rows past request b's valid drafts are never read by the walk: skipped.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK, 2) verify_chain_greedy_split_kernel(VerifyChainArgs a) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  __shared__ int64_t s_valid;
  const RowSplit& s = a.split;
  const int64_t r = blockIdx.x / s.chunks, c = blockIdx.x % s.chunks;
  const int64_t b = r / (a.k + 1), i = r % (a.k + 1);
  if (threadIdx.x == 0) s_valid = chain_num_valid(a, b);
  __syncthreads();
  if (i > s_valid) return;
  greedy_chunk<BLOCK>(tmp, a.target + b * a.target_sb + i * a.target_sk, s, c, a.vocab,
                      a.greedy_best);
}

// Pass 2, one block per request: accept x_i iff x_i == argmax p_i, t = the argmax of the first
// unmatched row (verify_chain_kernel's walk).  Warp w merges row base + w's chunk results (max,
// then the lower id: the row's first maximal id); thread 0 walks those rows, and the next
// kWarps rows follow while every one matched.
template <int BLOCK>
__global__ void verify_chain_greedy_walk_kernel(VerifyChainArgs a) {
  static_assert(BLOCK % 32 == 0, "whole warps: every lane takes part in the shuffles");
  constexpr int kWarps = BLOCK / 32;
  __shared__ int s_arg[kWarps];
  __shared__ int64_t s_valid, s_acc;
  __shared__ int s_t;
  __shared__ bool s_done;
  const int64_t b = blockIdx.x, chunks = a.split.chunks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    s_valid = chain_num_valid(a, b);
    s_done = false;
  }
  __syncthreads();
  const int64_t n = s_valid;
  for (int64_t base = 0; !s_done; base += kWarps) {
    const int64_t i = base + warp;
    if (i <= n) {
      const int t = warp_chunk_argmax(a.greedy_best + 2 * (b * (a.k + 1) + i) * chunks, chunks);
      if (lane == 0) s_arg[warp] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < kWarps; ++w) {  // rows base .. base + kWarps - 1, in order
        const int64_t j = base + w;
        if (j >= n || a.tokens[b * a.tokens_sb + j] != s_arg[w]) {
          s_acc = j;
          s_t = s_arg[w];
          s_done = true;
          break;
        }
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) chain_write_prefix(a, b, s_acc, s_t);
}

template <int BLOCK>
__global__ void verify_chain_kernel(VerifyChainArgs a) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  BlockSampler<BLOCK> sampler(tmp);
  const int64_t b = blockIdx.x;
  int64_t n_valid, acc = 0, x = -1;  // greedy walks below; block scans from the last draft
  if (!a.greedy && !a.block) {
    chain_prefix<BLOCK>(a, b, tmp, &n_valid, &acc, &x);
  } else {
    __shared__ int64_t s_valid;
    if (threadIdx.x == 0) s_valid = chain_num_valid(a, b);
    __syncthreads();
    n_valid = s_valid;
  }
  int t;
  if (a.greedy) {
    // accept x_i iff x_i == argmax p_i (first maximal id); t = argmax of the first unmatched row
    while (true) {
      t = sampler.argmax(MassW{a.target + b * a.target_sb + acc * a.target_sk}, a.vocab);
      if (acc >= n_valid || a.tokens[b * a.tokens_sb + acc] != t) break;
      ++acc;
    }
  } else if (a.block) {
    // every thread computes the same weights (K loads each) and takes the same branches; the
    // residual sums and the draw are block-parallel
    const auto residual = [&](int64_t i, double w) {
      const float* q = a.draft ? a.draft + b * a.draft_sb + i * a.draft_sk : nullptr;
      return BlockResidual{a.target + b * a.target_sb + i * a.target_sk, q,
                           a.tokens[b * a.tokens_sb + i], w};
    };
    acc = 0;
    for (int64_t i = n_valid; i >= 1; --i) {
      const double w = chain_block_weight(a, b, i);
      const double h = i == n_valid ? w : block_stop(sampler.sum(residual(i, w), a.vocab), w);
      if (static_cast<double>(a.rng.uniform(b, i - 1)) < h) {
        acc = i;
        break;
      }
    }
    const float u = a.rng.uniform(b, a.k);
    t = -1;
    if (acc < n_valid) {  // t ~ norm(r_tau), or p_{tau+1} when r_tau has no mass
      const BlockResidual r = residual(acc, chain_block_weight(a, b, acc));
      const double s = sampler.sum(r, a.vocab);
      if (s > 0.0) t = sampler.draw(NormBlockResidual{r, inverse_of(s)}, a.vocab, u);
    }
    if (t < 0) t = sampler.draw(MassW{a.target + b * a.target_sb + acc * a.target_sk}, a.vocab, u);
  } else {
    // draft acc rejected: t ~ norm(max(p_a - q_a, 0)), drawn from r itself; bonus: t ~ p_a
    const ChainFinalRow w = chain_final_row(a, b, acc, n_valid, x);
    const float u = a.rng.uniform(b, a.k);
    t = -1;
    if (w.residual) {
      const double s = sampler.sum(w, a.vocab);
      if (s > 0.0) t = sampler.inverse_cdf(w, a.vocab, static_cast<double>(u) * s);
    }
    if (t < 0) t = sampler.draw(MassW{w.p}, a.vocab, u);  // bonus, or residual w/o mass
  }
  if (threadIdx.x == 0) chain_write_prefix(a, b, acc, t);
}

// The current target row for the block passes: tree_p's entries with node cur's folded
// rejections applied, through mass().
struct TreeRowW {
  const float* p;
  const float* q;
  const TreeWalk* w;
  __device__ float operator()(int64_t i) const { return mass(tree_fold(*w, p[i], i, q)); }
};

// Greedy tree verification at small batch, pass 1: block (r, c) of the RowSplit over the B * N
// rows (r = b * N + n) takes the max of mass(p) over chunk c of node n's row and its first
// maximal id.  Padding nodes (token -1) are never walked into: skipped.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK, 2) verify_tree_greedy_split_kernel(VerifyTreeArgs a) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  const RowSplit& s = a.split;
  const int64_t r = blockIdx.x / s.chunks, c = blockIdx.x % s.chunks;
  const int64_t b = r / a.nodes, n = r % a.nodes;
  if (n > 0 && a.tokens[b * a.tokens_sb + n] == -1) return;
  greedy_chunk<BLOCK>(tmp, a.target + b * a.target_sb + n * a.target_sn, s, c, a.vocab,
                      a.greedy_best);
}

// Pass 2, one block per request: warp w merges the chunks of nodes w, w + kWarps, ... into their
// argmax (written over the node's first chunk id), then thread 0 walks the tree: accept child x
// of cur iff x == argmax p_cur (verify_tree_kernel's greedy walk).
template <int BLOCK>
__global__ void verify_tree_greedy_walk_kernel(VerifyTreeArgs a) {
  static_assert(BLOCK % 32 == 0, "whole warps: every lane takes part in the shuffles");
  constexpr int kWarps = BLOCK / 32;
  const int64_t b = blockIdx.x, chunks = a.split.chunks;
  const auto row = [&](int64_t n) { return a.greedy_best + 2 * (b * a.nodes + n) * chunks; };
  for (int64_t n = threadIdx.x >> 5; n < a.nodes; n += kWarps) {
    if (n > 0 && a.tokens[b * a.tokens_sb + n] == -1) continue;
    const int t = warp_chunk_argmax(row(n), chunks);
    if ((threadIdx.x & 31) == 0) row(n)[1] = static_cast<float>(t);  // (its chunks are read)
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  TreeWalk w;
  tree_walk_init(a, b, w);
  int64_t best = static_cast<int64_t>(row(0)[1]);
  while (tree_walk_advance(a, b, w, best) == kTreeDescend)
    best = static_cast<int64_t>(row(w.cur)[1]);
  tree_walk_finish(a, b, w, static_cast<int32_t>(best));
}

// Tree walk: thread 0 runs tree_walk_advance until it needs the vocabulary; the block then
// sums the residual and either folds the rejection in (with replacement: one read of p's row,
// and of q's with draft probabilities, nothing written) or, without replacement, rewrites the
// workspace rows (residual / renormalised q); at the end it draws the final token.
template <int BLOCK>
__global__ void verify_tree_kernel(VerifyTreeArgs a) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  __shared__ TreeWalk s_w;
  __shared__ int s_event;
  BlockSampler<BLOCK> sampler(tmp);
  const int64_t b = blockIdx.x;
  const int64_t V = a.vocab;
  if (threadIdx.x == 0) tree_walk_init(a, b, s_w);
  __syncthreads();
  if (a.greedy) {
    int best = sampler.argmax(MassW{a.target + b * a.target_sb}, V);
    while (true) {
      if (threadIdx.x == 0) s_event = tree_walk_advance(a, b, s_w, best);
      __syncthreads();
      if (s_event != kTreeDescend) break;
      best = sampler.argmax(MassW{a.target + b * a.target_sb + s_w.cur * a.target_sn}, V);
    }
    if (threadIdx.x == 0) tree_walk_finish(a, b, s_w, best);
    return;
  }
  float* wp = a.ws_p + b * V;
  float* wq = a.ws_q ? a.ws_q + b * V : nullptr;
  while (true) {
    if (threadIdx.x == 0) s_event = tree_walk_advance(a, b, s_w, -1);
    __syncthreads();
    if (s_event != kTreeReject) break;
    // rejected child x: p <- norm(max(p - q, 0)) (unchanged if no mass), folded in (below) or,
    // without replacement, written with q <- norm(q with q(x) = 0) (zeros if no mass): both
    // sums first, then in place.
    const float* p = tree_p(a, b, s_w);
    const float* q = tree_q(a, b, s_w);
    const int64_t x = s_w.x;
    const bool wor = a.without_replacement && q != nullptr;
    if (!wor && s_w.nfold == kTreeFold) {  // fold full: write the row out once
      for (int64_t i = threadIdx.x; i < V; i += BLOCK) wp[i] = tree_fold(s_w, p[i], i, q);
      __syncthreads();
      if (threadIdx.x == 0) {
        s_w.nfold = 0;
        s_w.p_ws = true;
      }
      __syncthreads();
      p = wp;
    }
    if (!wor) {  // sum r = max(p - q, 0) over the folded row (q one-hot without q), no write
      double lp = 0.0;
      for (int64_t i = threadIdx.x; i < V; i += BLOCK) {
        const float qm = q ? mass(q[i]) : 0.f;  // q read once for the fold and this step
        const float pi = mass(tree_fold_at(s_w, p[i], i, q, qm));
        lp += static_cast<double>(clamp0(pi - tree_q_at(q, qm, i, x)));
      }
      const double2 s = block_sum2<BLOCK>(tmp, lp, 0.0);
      if (threadIdx.x == 0 && s.x > 0.0) {
        s_w.fold_x[s_w.nfold] = x;
        s_w.fold_inv[s_w.nfold] = inverse_of(s.x);
        ++s_w.nfold;
      }
      __syncthreads();
      continue;
    }
    const ResidW r{p, q, x};
    double lp = 0.0, lq = 0.0;
    for (int64_t i = threadIdx.x; i < V; i += BLOCK) {
      lp += static_cast<double>(r(i));
      if (wor) lq += i == x ? 0.0 : static_cast<double>(mass(q[i]));
    }
    const double2 s = block_sum2<BLOCK>(tmp, lp, lq);
    const double ip = s.x > 0.0 ? inverse_of(s.x) : 0.0, iq = s.y > 0.0 ? inverse_of(s.y) : 0.0;
    for (int64_t i = threadIdx.x; i < V; i += BLOCK) {
      const float ri = r(i);
      const float qi = wor ? (i == x ? 0.f : mass(q[i])) : 0.f;
      if (s.x > 0.0) wp[i] = scaled(ri, ip);
      if (wor) wq[i] = s.y > 0.0 ? scaled(qi, iq) : 0.f;
    }
    __syncthreads();
    if (threadIdx.x == 0) tree_walk_rejected(a, s_w, s.x > 0.0);
  }
  const int t = sampler.draw(TreeRowW{tree_p(a, b, s_w), tree_q(a, b, s_w), &s_w}, V,
                             a.rng.uniform(b, a.nodes - 1));
  if (threadIdx.x == 0) tree_walk_finish(a, b, s_w, t);
}

}  // namespace specops
