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
  std::vector<int64_t> xs(L), tok(L);
  std::vector<double> S(L), T(L);
  std::vector<int32_t> ws(jacobi_ws_size(L, A.num_candidates));
  std::vector<int32_t> parent(L), ok0(L), tok_src(L), cand_src(L);
  for (int64_t b = 0; b < A.batch; ++b) {
    TreeView tv = jacobi_tree_view(A, b);
    if (A.emulate_cuda) {  // the CUDA kernel's plan: cached tokens, parents, fresh tests
      for (int64_t n = 0; n < L; ++n) {
        tok[n] = A.tokens[b * A.tokens_sb + n];
        parent[n] = -1;
      }
      for (int64_t m = 0; m < L; ++m) jacobi_set_parents(tv, m, parent.data());
      for (int64_t c = 0; c < L; ++c)
        ok0[c] = parent[c] >= 0 && tok[c] != -1 && jacobi_fresh_test(A, b, parent[c], c, tok[c]);
      tv.tok = tok.data();
      tv.ok0 = ok0.data();
    }
    jacobi_tree_walk(A, b, tv, ops, xs.data(), S.data(), T.data(), ws.data());
    if (A.emulate_cuda) {  // blocks n >= 1: every node that could be on the line, speculatively
      for (int64_t n = 1; n < L; ++n) {
        const int64_t depth = jacobi_depth(parent.data(), n, L);
        if (depth >= 0 && jacobi_on_line(tv, parent.data(), n))
          jacobi_tree_node(A, b, tv, n, depth, true, true, ops, ws.data());
      }
    } else {  // continuation along the line below the last accepted node m: l_d at position d
      int64_t prev = tv.first_child(ws[kWsM]);
      int64_t d = ws[kWsA] + 1;
      bool alive = ws[kWsRej] != 0 && prev >= 0 && d < L;
      while (alive) {
        const int64_t node = tv.first_child(prev);
        const bool go = node >= 0 && tv.token(A, node) != -1;
        jacobi_tree_node(A, b, tv, prev, d, go, true, ops, ws.data());
        if (!go) break;
        prev = node;
        ++d;
        alive = d < L;
      }
    }
    const int32_t* cws = ws.data();
    jacobi_tree_line(A, b, tv, cws, tok_src.data(), cand_src.data());
    for (int64_t d = 0; d < L; ++d)
      jacobi_tree_write(A, b, cws, tok_src.data(), cand_src.data(), d);
  }
}

}  // namespace specops
