// Verification by rejection sampling: the per-request cores shared by the C++ CPU twin and the
// CUDA kernels.  The semantics (and which Philox draw every decision uses) are those of
// specops/reference/verify.py, token for token:
//   accept x  iff  u * q(x) < p(x) + pool(x)          (float32; q = one-hot of x without q)
//   on reject p <- max(p - q, 0) (unnormalised; p itself if that has no mass), t ~ p
//   pool(x) (LANTERN): sum of p(n_j) over the neighbours n_1..n_k of x whose cumulative
//   mass c_j = p(n_1) + ... + p(n_j) stays <= delta (float64), 0 without relaxation.
#pragma once
#include <stdint.h>

#include "specops/common.h"

namespace specops {

// Token ids arrive as int32 or int64 tensors; read either without a conversion kernel.
struct TokenView {
  const void* data;
  bool is64;
  SPECOPS_HD int64_t operator[](int64_t i) const {
    return is64 ? static_cast<const int64_t*>(data)[i]
                : static_cast<int64_t>(static_cast<const int32_t*>(data)[i]);
  }
};

struct RelaxArgs {
  const int32_t* neighbors;  // [V, k] or nullptr (exact verification)
  int64_t k;
  double delta;
};

// p(x), 0 for ids outside [0, vocab): an out-of-range draft is a draft of target prob 0.
SPECOPS_HD float prob_at(const float* row, int64_t vocab, int64_t x) {
  return (x >= 0 && x < vocab) ? row[x] : 0.f;
}

SPECOPS_HD float lantern_pool(const float* p, int64_t vocab, int64_t x, const RelaxArgs& relax) {
  if (relax.neighbors == nullptr || x < 0 || x >= vocab) return 0.f;
  const int32_t* nb = relax.neighbors + x * relax.k;
  double cum = 0.0, pool = 0.0;
  for (int64_t j = 0; j < relax.k; ++j) {
    const int64_t n = nb[j];
    const double pn = (n >= 0 && n < vocab && n != x) ? static_cast<double>(p[n]) : 0.0;
    cum += pn;
    if (cum <= relax.delta) pool += pn;
  }
  return static_cast<float>(pool);
}

// accept x iff u * q(x) < p(x) + pool(x); q == nullptr means q = one-hot(x), q(x) = 1.
SPECOPS_HD bool accept_draft(float u, const float* p, const float* q, int64_t vocab, int64_t x,
                             const RelaxArgs& relax) {
  const float px = prob_at(p, vocab, x);
  const float qx = q ? prob_at(q, vocab, x) : 1.f;
  return u * qx < px + lantern_pool(p, vocab, x, relax);
}

// ---- chain ----------------------------------------------------------------------------------
struct VerifyChainArgs {
  const float* target;  // [B, K+1, V], last dim contiguous
  int64_t target_sb, target_sk;
  const float* draft;  // [B, K, V] or nullptr (deterministic drafts)
  int64_t draft_sb, draft_sk;
  TokenView tokens;  // [B, K]
  int64_t tokens_sb;
  const int64_t* num_draft;  // [B] or nullptr
  int64_t batch, k, vocab;
  RelaxArgs relax;
  bool greedy;
  RngArgs rng;        // row b = request b; draw i = test of draft i, draw K = final token
  int32_t* out_tokens;  // [B, K+1]
  int32_t* out_num_accepted;  // [B]
};

// Drafts of request b that take part: the leading ones before num_draft[b] and the first -1.
SPECOPS_HD int64_t chain_num_valid(const VerifyChainArgs& a, int64_t b) {
  int64_t limit = a.k;
  if (a.num_draft) {
    const int64_t nd = a.num_draft[b];
    limit = nd < limit ? (nd < 0 ? 0 : nd) : limit;
  }
  int64_t n = 0;
  while (n < limit && a.tokens[b * a.tokens_sb + n] != -1) ++n;
  return n;
}

// The accepted prefix length of a sampled (non-greedy) chain: one thread's work, K loads.
SPECOPS_HD int64_t chain_accepted(const VerifyChainArgs& a, int64_t b, int64_t n_valid) {
  int64_t acc = 0;
  while (acc < n_valid) {
    const float* p = a.target + b * a.target_sb + acc * a.target_sk;
    const float* q = a.draft ? a.draft + b * a.draft_sb + acc * a.draft_sk : nullptr;
    const int64_t x = a.tokens[b * a.tokens_sb + acc];
    if (!accept_draft(a.rng.uniform(b, acc), p, q, a.vocab, x, a.relax)) break;
    ++acc;
  }
  return acc;
}

SPECOPS_HD void chain_write_prefix(const VerifyChainArgs& a, int64_t b, int64_t acc, int32_t t) {
  int32_t* out = a.out_tokens + b * (a.k + 1);
  for (int64_t i = 0; i <= a.k; ++i) {
    out[i] = i < acc ? static_cast<int32_t>(a.tokens[b * a.tokens_sb + i]) : (i == acc ? t : -1);
  }
  a.out_num_accepted[b] = static_cast<int32_t>(acc);
}

// ---- host (CPU twin) --------------------------------------------------------------------------
// min{i : w_0 + ... + w_i > target, w_i > 0} (float64 sums), else the last positive, else 0.
template <typename W>
inline int32_t inverse_cdf_host(W w, int64_t vocab, double target) {
  double running = 0.0;
  int32_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double wi = static_cast<double>(w(i));
    if (wi > 0.0) {
      running += wi;
      last = static_cast<int32_t>(i);
      if (running > target) return static_cast<int32_t>(i);
    }
  }
  return last;
}

template <typename W>
inline double sum_host(W w, int64_t vocab) {
  double s = 0.0;
  for (int64_t i = 0; i < vocab; ++i) s += static_cast<double>(w(i));
  return s;
}

inline int32_t argmax_host(const float* p, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (p[i] > p[best]) best = i;
  return static_cast<int32_t>(best);
}

void verify_chain_host(const VerifyChainArgs& args);

}  // namespace specops
