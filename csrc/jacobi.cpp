// CPU twin of verify_jacobi: the shared cores of specops/jacobi.h with host vocabulary passes
// (float64 sums, chunked inverse-CDF draw, Gumbel top-k from specops/verify.h).  Requests and
// slots run in sequence; the tree mode's continuation is computed only along the line actually
// reached (the CUDA kernel computes it speculatively for every first child instead).
#include "specops/jacobi.h"

#include <vector>

namespace specops {

namespace {

struct HostJacobiOps {
  int64_t vocab;
  const RngArgs* rng;

  bool leader() const { return true; }

  template <class W>
  double sum(const W& w) const {
    return sum_host(w, vocab);
  }

  template <class F>
  void sum2(const F& f, double* s1, double* s2) const {
    double a = 0.0, b = 0.0;
    for (int64_t v = 0; v < vocab; ++v) {
      float r, q;
      f(v, &r, &q);
      a += static_cast<double>(r);
      b += static_cast<double>(q);
    }
    *s1 = a;
    *s2 = b;
  }

  template <class W>
  int32_t draw(const W& w, float u) const {
    return draw_host(w, vocab, u);
  }

  void topk(const float* p, int64_t row, int64_t draw0, int64_t k, int32_t* out) const {
    gumbel_topk_host(p, vocab, *rng, row, draw0, k, out);
  }
};

}  // namespace

void verify_jacobi_host(const JacobiArgs& A) {
  const int64_t L = A.len;
  HostJacobiOps ops{A.vocab, &A.rng};
  if (A.first_child == nullptr) {  // chain mode
    for (int64_t b = 0; b < A.batch; ++b) {
      int64_t a = 0;
      while (a < L && jacobi_chain_ok(A, b, a)) ++a;
      for (int64_t i = 0; i < L; ++i) jacobi_chain_slot(A, b, i, a, ops);
    }
    return;
  }
  std::vector<int64_t> xs(L);
  std::vector<double> S(L), T(L);
  std::vector<int32_t> ws(jacobi_ws_size(L, A.num_candidates));
  std::vector<int32_t> depth(L), parent(L);
  for (int64_t b = 0; b < A.batch; ++b) {
    jacobi_tree_walk(A, b, ops, xs.data(), S.data(), T.data(), ws.data());
    if (A.emulate_cuda) {  // the CUDA kernel's blocks n >= 1, in sequence
      jacobi_tree_shape(A, b, depth.data(), parent.data());
      for (int64_t n = 1; n < L; ++n) {
        if (parent[n] >= 0 && jacobi_link(A.first_child, A, b, parent[n]) == n)
          jacobi_tree_node(A, b, n, depth[n], true, true, ops, ws.data());
      }
      jacobi_tree_finish(A, b, static_cast<const int32_t*>(ws.data()));
      continue;
    }
    // continuation along the line below the last accepted node m: l_d at position d
    const int64_t a = ws[kWsA];
    int64_t prev = jacobi_link(A.first_child, A, b, ws[kWsM]);
    int64_t d = a + 1;
    bool alive = ws[kWsRej] != 0 && prev >= 0 && d < L;
    while (alive) {
      const int64_t node = jacobi_link(A.first_child, A, b, prev);
      const bool go = node >= 0 && jacobi_tok(A, b, node) != -1;
      jacobi_tree_node(A, b, prev, d, go, true, ops, ws.data());
      if (!go) break;
      prev = node;
      ++d;
      alive = d < L;
    }
    jacobi_tree_finish(A, b, static_cast<const int32_t*>(ws.data()));
  }
}

}  // namespace specops
