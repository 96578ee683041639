// C++ CPU twins of the verification kernels: the same per-request cores (specops/verify.h) as
// the CUDA kernels, with plain loops for the passes over the vocabulary; requests (rows) run in
// parallel on host_threads() threads (csrc/host_parallel.h), each one's result independent of it.
#include "specops/verify.h"

#include "host_parallel.h"
#include "host_simd.h"

namespace specops {

namespace {

// t ~ mass(p) with uniform u (vectorised chunk sums).
int32_t draw_positive(const float* p, int64_t vocab, float u) {
  return draw_host_chunked(MassW{p}, vocab, u,
                           [p](int64_t lo, int64_t hi) { return mass_sum_host(p, lo, hi); });
}

// t ~ norm(max(p - q, 0)) with uniform u, drawn from the unnormalised residual (inverse CDF
// scales u by its sum), or -1 when the residual has no mass.
int32_t draw_residual(const float* p, const float* q, int64_t x, int64_t vocab, float u) {
  if (!(resid_sum_host(p, q, x, 0, vocab) > 0.0)) return -1;
  return draw_host_chunked(ResidW{p, q, x}, vocab, u,
                           [&](int64_t lo, int64_t hi) { return resid_sum_host(p, q, x, lo, hi); });
}

// Block verification of request b (specops/verify.h): the accepted prefix length in *tau and
// the final token.
int32_t chain_block_host(const VerifyChainArgs& a, int64_t b, int64_t n_valid, int64_t* tau) {
  const auto residual = [&](int64_t i, double w) {  // r_i: target and draft rows i, token x_i
    const float* q = a.draft ? a.draft + b * a.draft_sb + i * a.draft_sk : nullptr;
    return BlockResidual{a.target + b * a.target_sb + i * a.target_sk, q,
                         a.tokens[b * a.tokens_sb + i], w};
  };
  *tau = 0;
  for (int64_t i = n_valid; i >= 1; --i) {
    const double w = chain_block_weight(a, b, i);
    const double h = i == n_valid ? w : block_stop(sum_range_host(residual(i, w), 0, a.vocab), w);
    if (static_cast<double>(a.rng.uniform(b, i - 1)) < h) {
      *tau = i;
      break;
    }
  }
  const float u = a.rng.uniform(b, a.k);
  const float* pt = a.target + b * a.target_sb + *tau * a.target_sk;
  if (*tau < n_valid) {  // t ~ norm(r_tau), or p_{tau+1} when r_tau has no mass
    const BlockResidual r = residual(*tau, chain_block_weight(a, b, *tau));
    const double s = sum_range_host(r, 0, a.vocab);
    if (s > 0.0) return draw_host(NormBlockResidual{r, inverse_of(s)}, a.vocab, u);
  }
  return draw_positive(pt, a.vocab, u);  // the bonus p_{n+1}, or the fallback
}

}  // namespace

void verify_chain_host(const VerifyChainArgs& a) {
  parallel_for(a.batch, (a.k + 1) * a.vocab, [&](int64_t b) {  // requests are independent
    const int64_t n_valid = chain_num_valid(a, b);
    int64_t acc = 0;
    int32_t t;
    if (a.greedy) {
      // accept x_i iff x_i == argmax p_i; t = argmax of the first unmatched row
      while (true) {
        t = argmax_host(a.target + b * a.target_sb + acc * a.target_sk, a.vocab);
        if (acc >= n_valid || a.tokens[b * a.tokens_sb + acc] != t) break;
        ++acc;
      }
    } else if (a.block) {
      t = chain_block_host(a, b, n_valid, &acc);
    } else {
      acc = chain_accepted(a, b, n_valid);
      const float* pa = a.target + b * a.target_sb + acc * a.target_sk;
      const float u = a.rng.uniform(b, a.k);
      t = -1;
      if (acc < n_valid) {  // draft acc rejected: t ~ norm(max(p_a - q_a, 0))
        const float* qa = a.draft ? a.draft + b * a.draft_sb + acc * a.draft_sk : nullptr;
        t = draw_residual(pa, qa, a.tokens[b * a.tokens_sb + acc], a.vocab, u);
      }
      if (t < 0) t = draw_positive(pa, a.vocab, u);  // bonus, or residual without mass
    }
    chain_write_prefix(a, b, acc, t);
  });
}

void verify_tree_host(const VerifyTreeArgs& a) {
  const int64_t V = a.vocab;
  parallel_for(a.batch, a.nodes * a.vocab,
               [&](int64_t b) {  // requests are independent (own ws rows)
                 TreeWalk w;
                 tree_walk_init(a, b, w);
                 if (a.greedy) {
                   // one argmax per visited node; the walk tests its children against it
                   int32_t best = argmax_host(a.target + b * a.target_sb, V);
                   while (tree_walk_advance(a, b, w, best) == kTreeDescend)
                     best = argmax_host(a.target + b * a.target_sb + w.cur * a.target_sn, V);
                   tree_walk_finish(a, b, w, best);
                   return;
                 }
                 float* wp = a.ws_p + b * V;
                 float* wq = a.ws_q ? a.ws_q + b * V : nullptr;
                 while (tree_walk_advance(a, b, w, -1) == kTreeReject) {
                   // rejected child x: p <- norm(max(p - q, 0)) (unchanged if no mass); without
                   // replacement also q <- norm(q with q(x) = 0) (all zeros if no mass).  In place:
                   // entry i of the new rows depends only on entry i of the old ones, and both sums
                   // are taken first.
                   const float* p = tree_p(a, b, w);
                   const float* q = tree_q(a, b, w);
                   const double s = resid_sum_host(p, q, w.x, 0, V);
                   const bool wor = a.without_replacement && q != nullptr;
                   const double sq = wor ? drop_sum_host(q, w.x, V) : 0.0;
                   if (wor || s > 0.0)
                     resid_update_host(p, q, w.x, s, sq, wp, wor ? wq : nullptr, V);
                   tree_walk_rejected(a, w, s > 0.0);
                 }
                 const float* p = tree_p(a, b, w);
                 tree_walk_finish(a, b, w, draw_positive(p, V, a.rng.uniform(b, a.nodes - 1)));
               });
}

}  // namespace specops
