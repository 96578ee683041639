// CUDA verification kernels: one block per request.  The scalar decisions (acceptance tests,
// K loads each) run on thread 0 through the same SPECOPS_HD cores as the CPU twin; the one pass
// over the vocabulary that a step needs (the corrected/bonus draw, or greedy argmaxes) is
// block-parallel (BlockSampler: float64 sums, tile scan that stops at the target).
#pragma once
#include <cuda_runtime.h>

#include "specops/block_sample.cuh"
#include "specops/verify.h"

namespace specops {

struct PositiveDev {
  const float* p;
  __device__ float operator()(int64_t i) const { return fmaxf(p[i], 0.f); }
};

struct ResidualDev {  // max(p - q, 0); q == nullptr: q = one-hot(x)
  const float* p;
  const float* q;
  int64_t x;
  __device__ float operator()(int64_t i) const {
    const float qi = q ? q[i] : (i == x ? 1.f : 0.f);
    return fmaxf(p[i] - qi, 0.f);
  }
};

template <int BLOCK>
__global__ void verify_chain_kernel(VerifyChainArgs a) {
  __shared__ typename BlockSampler<BLOCK>::TempStorage tmp;
  __shared__ int64_t s_acc, s_valid;
  BlockSampler<BLOCK> sampler(tmp);
  const int64_t b = blockIdx.x;
  if (threadIdx.x == 0) {
    s_valid = chain_num_valid(a, b);
    s_acc = a.greedy ? 0 : chain_accepted(a, b, s_valid);
  }
  __syncthreads();
  const int64_t n_valid = s_valid;
  int64_t acc = s_acc;
  int t;
  if (a.greedy) {
    // accept x_i iff x_i == argmax p_i (first maximal id); t = argmax of the first unmatched row
    while (true) {
      t = sampler.argmax(PositiveDev{a.target + b * a.target_sb + acc * a.target_sk}, a.vocab);
      if (acc >= n_valid || a.tokens[b * a.tokens_sb + acc] != t) break;
      ++acc;
    }
  } else {
    const float* pa = a.target + b * a.target_sb + acc * a.target_sk;
    const float u = a.rng.uniform(b, a.k);
    t = -1;
    if (acc < n_valid) {  // draft acc rejected: t ~ max(p_a - q_a, 0)
      const float* qa = a.draft ? a.draft + b * a.draft_sb + acc * a.draft_sk : nullptr;
      ResidualDev r{pa, qa, a.tokens[b * a.tokens_sb + acc]};
      const double total = sampler.sum(r, a.vocab);
      if (total > 0.0) t = sampler.inverse_cdf(r, a.vocab, static_cast<double>(u) * total);
    }
    if (t < 0) t = sampler.draw(PositiveDev{pa}, a.vocab, u);  // bonus, or residual w/o mass
  }
  if (threadIdx.x == 0) chain_write_prefix(a, b, acc, t);
}

}  // namespace specops
