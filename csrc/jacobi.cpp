// CPU twin of verify_jacobi: the shared cores of specops/jacobi.h with host vocabulary passes
// (float64 sums, chunked inverse-CDF draws from specops/verify.h).  Independent work
// items run on host_threads() threads (csrc/host_parallel.h): chain slots once the prefixes are
// known; in tree mode the requests' walks, then every continuation node; results do not depend on
// the thread count.  The tree mode's continuation is computed only along the line actually reached
// (the CUDA kernel computes it speculatively for every first child instead).
#include "specops/jacobi.h"

#include <vector>

#include "host_parallel.h"
#include "host_simd.h"

namespace specops {

namespace {

// Per-thread scratch for one row's compacted lists (RowLists below).
struct ListBuffers {
  std::vector<int32_t> idx;
  std::vector<float> pos, res;
};

ListBuffers& list_buffers(int64_t vocab) {
  thread_local ListBuffers b;
  if (static_cast<int64_t>(b.idx.size()) < vocab + 16) {
    b.idx.resize(vocab + 16);
    b.pos.resize(vocab + 16);
    b.res.resize(vocab + 16);
  }
  return b;
}

// One row's entries that can carry mass, compacted in order (idx: their ids):
//   kPos    the positive entries of a target row p, pos = mass(p);
//   kResid  the same, res = their residuals r = max(p - q, 0) against (q, x) (a line node);
//   kUnion  the entries where the walk's rows p0 or q0 are positive, pos = mass(p0),
//           res = mass(q0) (the walk's passes at one node, rejection after rejection).
// A work item's passes over the row read the lists instead: entries outside them are 0 in every
// sum and draw, and zero entries add nothing to a draw's prefix sums, so a pass over a list is
// the pass over the row (summation order aside), and the row is read once.
struct RowLists {
  enum Kind { kNone, kPos, kResid, kUnion } kind = kNone;
  const float* p = nullptr;  // the rows (and x) the lists were built from
  const float* q = nullptr;
  int64_t x = -1;
  int64_t m = 0;  // list length
  ListBuffers* buf = nullptr;
  bool holds(Kind k, const float* p_, const float* q_, int64_t x_) const {
    return kind == k && p == p_ && q == q_ && x == x_;
  }
};

// Vocabulary passes of the CPU twin.  One object per work item (copied from a template): its
// RowLists live as long as the item.
struct HostJacobiOps {
  int64_t vocab;
  const RngArgs* rng;
  RowLists lists;

  bool leader() const { return true; }
  void sync() const {}

  template <class W>
  double sum(const W& w) const {
    return sum_host(w, vocab);
  }
  // The residual's sum, compacting p and the residual on the way (one pass over p and q).
  double sum(const ResidW& r) {
    ListBuffers& b = list_buffers(vocab);
    double s = 0.0;
    const int64_t m =
        compact_resid_host(r.p, r.q, r.x, vocab, b.idx.data(), b.pos.data(), b.res.data(), &s);
    lists = RowLists{RowLists::kResid, r.p, r.q, r.x, m, &b};
    return s;
  }

  template <class F>
  void sum2(const F& f, double* s1, double* s2) const {
    sum2_range_host(f, 0, vocab, s1, s2);
  }
  // The walk's last rejection: nothing to keep (draw_final draws afresh, over the union lists
  // the rejection's sum2 built when the node has draft rows).
  void sum2_final(const WalkRejectTerms& f, double* s1, double* s2) { sum2(f, s1, s2); }
  int32_t draw_final(const WalkResidW& w, float u) {
    const WalkRow& r = w.f.row;
    if (r.q0 == nullptr) return draw(w, u);
    union_lists(r.p0, r.q0);
    if (lists.m == 0) return 0;  // no mass: the fallback token
    const ListBuffers& b = *lists.buf;
    const float *pl = b.pos.data(), *ql = b.res.data();
    const int32_t* ids = b.idx.data();
    const WalkRejectTerms lf{WalkRow{pl, ql, r.j, r.xs, r.S, r.T}, w.f.x};
    const auto weight = [&](int64_t i) {  // r of list entry i (WalkResidW at its id)
      float p = pl[i], q = ql[i], res, qd;
      lf.row.steps(ids[i], p, q);
      lf.terms(ids[i], p, q, &res, &qd);
      return res;
    };
    const auto chunk_sum = [&](int64_t lo, int64_t hi) {
      double s = 0.0, t = 0.0;
      walk_terms_sum_host(pl + lo, ql + lo, ids + lo, r.j, r.xs, r.S, r.T, w.f.x, hi - lo, &s, &t);
      return s;
    };
    return ids[draw_host_chunked(weight, lists.m, u, chunk_sum)];
  }

  template <class W>
  int32_t draw(const W& w, float u) const {
    return draw_host(w, vocab, u);
  }
  // The walk at a node with draft rows: its passes run over the union list of p0 and q0.
  void sum2(const WalkRejectTerms& f, double* s1, double* s2) {
    const WalkRow& r = f.row;
    if (r.q0 == nullptr)
      return walk_terms_sum_host(r.p0, r.q0, nullptr, r.j, r.xs, r.S, r.T, f.x, vocab, s1, s2);
    union_lists(r.p0, r.q0);
    const ListBuffers& b = *lists.buf;
    walk_terms_sum_host(b.pos.data(), b.res.data(), b.idx.data(), r.j, r.xs, r.S, r.T, f.x, lists.m,
                        s1, s2);
  }
  int32_t draw(const WalkPosW& w, float u) {
    const WalkRow& r = w.row;
    if (r.q0 == nullptr)
      return draw_host_chunked(w, vocab, u, [&](int64_t lo, int64_t hi) {
        return walk_pos_sum_host(r.p0, r.q0, nullptr, r.j, r.xs, r.S, r.T, lo, hi);
      });
    union_lists(r.p0, r.q0);
    if (lists.m == 0) return 0;  // no mass: the fallback token
    const ListBuffers& b = *lists.buf;
    const float *pl = b.pos.data(), *ql = b.res.data();
    const int32_t* ids = b.idx.data();
    const WalkRow lr{pl, ql, r.j, r.xs, r.S, r.T};
    const auto weight = [&](int64_t i) {  // relu(p_j) of list entry i (WalkPosW at its id)
      float p = pl[i], q = ql[i];
      lr.steps(ids[i], p, q);
      return relu(p);
    };
    const auto chunk_sum = [&](int64_t lo, int64_t hi) {
      return walk_pos_sum_host(pl, ql, ids, r.j, r.xs, r.S, r.T, lo, hi);
    };
    return ids[draw_host_chunked(weight, lists.m, u, chunk_sum)];
  }
  int32_t draw(const MassW& w, float u) {  // over p's list (compacted here if not yet)
    pos_lists(w.p);
    if (lists.m == 0) return 0;  // no mass: the fallback token
    const float* pos = lists.buf->pos.data();
    const auto chunk_sum = [&](int64_t lo, int64_t hi) { return mass_sum_host(pos, lo, hi); };
    return lists.buf->idx[draw_host_chunked(MassW{pos}, lists.m, u, chunk_sum)];
  }
  // The draw from r = max(p - q, 0) over the residual's list (compacted by the sum); -1 when r
  // has no mass.
  int32_t draw_residual(const ResidW& r, float u) {
    if (!(sum(r) > 0.0)) return -1;
    const float* res = lists.buf->res.data();
    const auto chunk_sum = [&](int64_t lo, int64_t hi) { return mass_sum_host(res, lo, hi); };
    return lists.buf->idx[draw_host_chunked(MassW{res}, lists.m, u, chunk_sum)];
  }

  // Candidate j is the draw over p's list with candidates 0..j-1 zeroed in place: the draw from
  // mass(p) without them.  j >= the number of positive entries: -1.  The list's chunk sums are
  // taken once; after each draw only the chunk that lost the drawn entry is summed again.  At
  // most one pass over the row (none after a draw that compacted it) and k uniforms.
  void candidates(const float* p, int64_t row, int64_t draw0, int64_t k, int32_t* out) {
    pos_lists(p);
    float* w = lists.buf->pos.data();
    const int64_t m = lists.m;
    lists.kind = RowLists::kNone;  // the list is consumed below
    const auto chunk_sum = [&](int64_t lo, int64_t hi) { return mass_sum_host(w, lo, hi); };
    DrawChunks ch(m);
    if (k > 0 && m > 0) ch.fill(chunk_sum);
    for (int64_t j = 0; j < k; ++j) {
      if (j >= m) {
        out[j] = -1;
        continue;
      }
      const int32_t i = draw_in_chunks(MassW{w}, ch, rng->uniform(row, draw0 + j));
      out[j] = lists.buf->idx[i];
      w[i] = 0.f;
      const int64_t c = i / ch.size;
      ch.sums[c] = chunk_sum(ch.lo(c), ch.hi(c));
    }
  }

 private:
  // p's positive entries (a residual's lists hold them too)
  void pos_lists(const float* p) {
    if ((lists.kind == RowLists::kPos || lists.kind == RowLists::kResid) && lists.p == p) return;
    ListBuffers& b = list_buffers(vocab);
    const int64_t m = compact_above_host(p, 0, vocab, 0.f, b.idx.data(), b.pos.data());
    lists = RowLists{RowLists::kPos, p, nullptr, -1, m, &b};
  }
  void union_lists(const float* p0, const float* q0) {
    if (lists.holds(RowLists::kUnion, p0, q0, -1)) return;
    ListBuffers& b = list_buffers(vocab);
    const int64_t m = compact_union_host(p0, q0, vocab, b.idx.data(), b.pos.data(), b.res.data());
    lists = RowLists{RowLists::kUnion, p0, q0, -1, m, &b};
  }
};

// Request b's tree.  Emulating the CUDA kernel: cached tokens, parents and fresh tests (tok,
// parent, ok0: [B, L] scratch, filled on the first call for b; the walk's call comes first).
TreeView view(const JacobiArgs& A, int64_t b, int64_t* tok, int32_t* parent, int32_t* ok0) {
  TreeView tv = jacobi_tree_view(A, b);
  if (!A.emulate_cuda) return tv;
  const int64_t L = A.len;
  tok += b * L;
  parent += b * L;
  ok0 += b * L;
  tv.tok = tok;
  tv.ok0 = ok0;
  return tv;
}

void emulate_setup(const JacobiArgs& A, int64_t b, int64_t* tok, int32_t* parent, int32_t* ok0) {
  const int64_t L = A.len;
  tok += b * L;
  parent += b * L;
  ok0 += b * L;
  const TreeView tv = jacobi_tree_view(A, b);
  for (int64_t n = 0; n < L; ++n) {
    tok[n] = A.tokens[b * A.tokens_sb + n];
    parent[n] = -1;
  }
  for (int64_t m = 0; m < L; ++m) jacobi_set_parents(tv, m, parent);
  for (int64_t c = 0; c < L; ++c)
    ok0[c] = parent[c] >= 0 && tok[c] != -1 && jacobi_fresh_test(A, b, parent[c], c, tok[c]);
}

}  // namespace

void verify_jacobi_host(const JacobiArgs& A) {
  const int64_t L = A.len, B = A.batch;
  const HostJacobiOps ops{A.vocab, &A.rng};
  if (A.first_child == nullptr) {  // chain mode: the prefixes, then every slot on its own
    std::vector<int64_t> acc(B);
    for (int64_t b = 0; b < B; ++b) {
      int64_t a = 0;
      while (a < L && jacobi_chain_ok(A, b, a)) ++a;
      acc[b] = a;
    }
    parallel_for(B * L, A.vocab, [&](int64_t bi) {
      HostJacobiOps o = ops;
      jacobi_chain_slot(A, bi / L, bi % L, acc[bi / L], o);
    });
    return;
  }
  // Tree mode, in three phases: (1) every request's walk; (2) the continuation work of every
  // (request, node) item that the line below the walk's end needs (or, emulating the CUDA kernel,
  // of every node that could be on a line), each writing its own workspace slots; (3) assembly.
  const int64_t wsz = jacobi_ws_size(L, A.num_candidates);
  std::vector<int32_t> ws(B * wsz), parent(B * L), ok0(B * L);
  std::vector<int64_t> tok(B * L);
  parallel_for(B, L * A.vocab, [&](int64_t b) {
    std::vector<int64_t> xs(L);
    std::vector<double> S(L), T(L);
    HostJacobiOps o = ops;
    if (A.emulate_cuda) emulate_setup(A, b, tok.data(), parent.data(), ok0.data());
    jacobi_tree_walk(A, b, view(A, b, tok.data(), parent.data(), ok0.data()), o, xs.data(),
                     S.data(), T.data(), ws.data() + b * wsz);
  });
  struct Item {
    int64_t b, node, depth;
    bool need_tok;
  };
  std::vector<Item> items;
  for (int64_t b = 0; b < B; ++b) {
    const TreeView tv = view(A, b, tok.data(), parent.data(), ok0.data());
    const int32_t* w = ws.data() + b * wsz;
    if (A.emulate_cuda) {  // every node that could be on the line, speculatively
      const int32_t* par = parent.data() + b * L;
      for (int64_t n = 1; n < L; ++n) {
        const int64_t depth = jacobi_depth(par, n, L);
        if (depth >= 0 && jacobi_on_line(tv, par, n)) items.push_back({b, n, depth, true});
      }
      continue;
    }
    // the line below the last accepted node m: l_d at position d
    int64_t prev = tv.first_child(w[kWsM]);
    int64_t d = w[kWsA] + 1;
    bool alive = w[kWsRej] != 0 && prev >= 0 && d < L;
    while (alive) {
      const int64_t node = tv.first_child(prev);
      const bool go = node >= 0 && tv.token(A, node) != -1;
      items.push_back({b, prev, d, go});
      if (!go) break;
      prev = node;
      ++d;
      alive = d < L;
    }
  }
  parallel_for(static_cast<int64_t>(items.size()), A.vocab, [&](int64_t i) {
    const Item& it = items[i];
    HostJacobiOps o = ops;
    jacobi_tree_node(A, it.b, view(A, it.b, tok.data(), parent.data(), ok0.data()), it.node,
                     it.depth, it.need_tok, true, o, ws.data() + it.b * wsz);
  });
  std::vector<int32_t> tok_src(L), cand_src(L);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* cws = ws.data() + b * wsz;
    const TreeView tv = view(A, b, tok.data(), parent.data(), ok0.data());
    jacobi_tree_line(A, b, tv, cws, tok_src.data(), cand_src.data());
    for (int64_t d = 0; d < L; ++d)
      jacobi_tree_write(A, b, cws, tok_src.data(), cand_src.data(), d);
  }
}

}  // namespace specops
