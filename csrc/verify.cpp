#include <cmath>

#include "specops/verify.h"

namespace specops {

namespace {

struct Positive {  // max(p, 0)
  const float* p;
  float operator()(int64_t i) const { return p[i] > 0.f ? p[i] : 0.f; }
};

struct Residual {  // max(p - q, 0); q == nullptr: q = one-hot(x)
  const float* p;
  const float* q;
  int64_t x;
  float operator()(int64_t i) const {
    const float qi = q ? q[i] : (i == x ? 1.f : 0.f);
    const float r = p[i] - qi;
    return r > 0.f ? r : 0.f;
  }
};

}  // namespace

void verify_chain_host(const VerifyChainArgs& a) {
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t n_valid = chain_num_valid(a, b);
    int64_t acc = 0;
    int32_t t;
    if (a.greedy) {
      // accept x_i iff x_i == argmax p_i; t = argmax of the first unmatched row
      while (acc < n_valid) {
        const float* p = a.target + b * a.target_sb + acc * a.target_sk;
        if (a.tokens[b * a.tokens_sb + acc] != argmax_host(p, a.vocab)) break;
        ++acc;
      }
      t = argmax_host(a.target + b * a.target_sb + acc * a.target_sk, a.vocab);
    } else {
      acc = chain_accepted(a, b, n_valid);
      const float* pa = a.target + b * a.target_sb + acc * a.target_sk;
      const double u = static_cast<double>(a.rng.uniform(b, a.k));
      t = -1;
      if (acc < n_valid) {  // draft acc rejected: t ~ max(p_a - q_a, 0)
        const float* qa = a.draft ? a.draft + b * a.draft_sb + acc * a.draft_sk : nullptr;
        Residual r{pa, qa, a.tokens[b * a.tokens_sb + acc]};
        const double total = sum_host(r, a.vocab);
        if (total > 0.0) t = inverse_cdf_host(r, a.vocab, u * total);
      }
      if (t < 0) {  // all accepted (bonus), or a residual without mass: t ~ p_a
        Positive w{pa};
        t = inverse_cdf_host(w, a.vocab, u * sum_host(w, a.vocab));
      }
    }
    chain_write_prefix(a, b, acc, t);
  }
}

}  // namespace specops
