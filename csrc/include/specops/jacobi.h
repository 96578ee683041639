// Speculative Jacobi Decoding verification (SJD, SJD-PAC): the per-request cores shared by the
// C++ CPU twin (csrc/jacobi.cpp) and the CUDA kernels (specops/jacobi.cuh).  Semantics, token
// for token and draw for draw, are those of specops/reference/verify.py verify_jacobi:
//
//   test of a draft x against (p, q):   accept  iff  u * q(x) < p(x) + pool(x)   (float32)
//   residual:                           r = max(p - q, 0),  norm(r) = f32(f64(r) / sum f64(r))
//                                       (p itself when r has no mass)
//   draw t ~ w with uniform u:          min{i : w_0 + ... + w_i > u * sum(w), w_i > 0} (f64)
//   candidates (proactive drafting):    k draws without replacement from p: c_j = draw from p with
//                                       c_0..c_{j-1} set to 0 (uniform u_j); -1 once p has no
//                                       positive entry left (Gumbel top-k's distribution, k draws)
//   NaN policy: p and q entries are read through mass() (specops/mass.h): NaN, negative and
//   +inf entries count as 0 in all of the above.
//
// Chain mode (tree == nullptr), slot i of request b: test draw i, resample draw L + i; the
// accepted prefix a = number of leading passing slots.  Slots are independent once a is known,
// and a costs L scalar tests, so every slot can be finished on its own (one CUDA block each).
//
// Tree mode (SJD-PAC window, e.g. Tree.kary_chain): the accepted prefix is verify_tree's walk
// without replacement.  After a rejected child x of the current node the walk continues with
//   p_{j+1} = norm(max(p_j - q_j, 0))     (p_j if that has no mass)
//   q_{j+1} = norm(q_j with q_j(x) = 0)   (all zeros if no mass is left)
// These rows are never stored: an entry p_j(v), q_j(v) is recomputed from p_0(v), q_0(v), the
// rejected ids x_0..x_{j-1} and the sums S_i = sum max(p_i - q_i, 0), T_i = sum of q_i without
// x_i, with exactly the reference's float32/float64 roundings (WalkRow::eval in
// specops/prob_math.h, with the other row functors).  Continuation runs along the first-child
// line below the last accepted node m: position d > a holds the token of the first child of l_d
// (l_{a+1} = first child of m), kept if it passes its test against target/draft row l_d (draw
// c - 1 for node c), else resampled (draw L + c - 1).  Since d = depth(l_d), that work depends
// on the node alone: the CUDA kernel does it for every node that can lie on a line (every first
// child) while another block walks, and the last block of a request to finish assembles the
// outputs (jacobi_tree_line, jacobi_tree_write).
#pragma once
#include <math.h>
#include <stdint.h>

#include "specops/common.h"
#include "specops/prob_math.h"

#if defined(__CUDACC__)
// Templates below are __host__ __device__ and take an `Ops` that is host-only or device-only.
#define SPECOPS_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define SPECOPS_EXEC_CHECK_DISABLE
#endif

namespace specops {

struct JacobiArgs {
  const float* target;  // [B, L, V], last dim contiguous
  int64_t target_sb, target_sl;
  const float* draft;  // [B, L, V] or nullptr (q = one-hot of the drafted token)
  int64_t draft_sb, draft_sl;
  TokenView tokens;  // [B, L]
  int64_t tokens_sb;
  const int32_t* first_child;   // [B or 1, L] or nullptr (chain mode)
  const int32_t* next_sibling;  // [B or 1, L]
  int64_t tree_sb;              // L, or 0 for one tree shared by the batch
  int64_t batch, len, vocab;
  bool cont;               // continue_after_reject (SJD-PAC adaptive continuation)
  int64_t num_candidates;  // k; candidates are produced when k > 1
  RelaxArgs relax;
  RngArgs rng;                // row b = request b; draws_per_row = 2L (+ L * k with candidates)
  int32_t* out_num_accepted;  // [B]
  int32_t* out_next_window;   // [B, L]
  int32_t* out_first_reject;  // [B]
  int32_t* out_candidates;    // [B, L, k] when k > 1, else nullptr
  int32_t* out_path;          // [B, L] in tree mode, else nullptr
  // CUDA tree mode: per-request scratch ([B, ws_stride] int32, layout in jacobi_ws_*) and
  // completion counters ([B] int32, zero before the launch; the kernel leaves them zero).  CUDA
  // chain mode with GSD's grouping: [B, ws_stride >= L] int32, the slots' test decisions.
  int32_t* workspace;
  int64_t ws_stride;
  int32_t* counters;
  // CPU twin only (tests): run the tree mode the CUDA kernel's way, continuation work for every
  // node that could be on the line (at its depth's draws), then the assembly.
  bool emulate_cuda;
};

// ---- small accessors ----------------------------------------------------------------------------
SPECOPS_HD const float* jacobi_p(const JacobiArgs& A, int64_t b, int64_t i) {
  return A.target + b * A.target_sb + i * A.target_sl;
}
SPECOPS_HD const float* jacobi_q(const JacobiArgs& A, int64_t b, int64_t i) {
  return A.draft ? A.draft + b * A.draft_sb + i * A.draft_sl : nullptr;
}
SPECOPS_HD int64_t jacobi_tok(const JacobiArgs& A, int64_t b, int64_t i) {
  return A.tokens[b * A.tokens_sb + i];
}
SPECOPS_HD int64_t jacobi_draws(const JacobiArgs& A) {
  return 2 * A.len + (A.num_candidates > 1 ? A.len * A.num_candidates : 0);
}
// First draw of the candidates of slot / position d: draw 2L + d k + j is candidate j's uniform.
SPECOPS_HD int64_t jacobi_cand_draw0(const JacobiArgs& A, int64_t d) {
  return 2 * A.len + d * A.num_candidates;
}

// Per-request workspace layout (int32): the walk's result, then per-node continuation tokens and
// candidates (indexed by node), then the walk's path and tokens (indexed by position).
SPECOPS_HD int64_t jacobi_ws_size(int64_t L, int64_t k) { return 4 + 3 * L + L * (k > 1 ? k : 0); }
enum : int { kWsA = 0, kWsM = 1, kWsRej = 2 };
SPECOPS_HD int64_t jacobi_ws_path(int64_t L) { return 4 + 0 * L; }
SPECOPS_HD int64_t jacobi_ws_tok(int64_t L) { return 4 + 1 * L; }
SPECOPS_HD int64_t jacobi_ws_node_tok(int64_t L) { return 4 + 2 * L; }
SPECOPS_HD int64_t jacobi_ws_cand(int64_t L) { return 4 + 3 * L; }

// ---- acceptance with any row functor ------------------------------------------------------------
// Test of draft x: u * q(x) < p(x) + pool(x); has_q false means q = one-hot(x), q(x) = 1.
// Ids outside [0, V) have p(x) = q(x) = 0 and are always rejected.
template <class PF, class QF>
SPECOPS_HD bool jacobi_accept(float u, const PF& p, const QF& q, bool has_q, int64_t vocab,
                              int64_t x, const RelaxArgs& relax) {
  if (relax.codebook) {  // GSD: u * Q < P over x's group
    float big_p, big_q;
    group_sums(p, q, has_q, vocab, x, relax, &big_p, &big_q);
    return u * big_q < big_p;
  }
  const bool in = x >= 0 && x < vocab;
  const float px = in ? p(x) : 0.f;
  const float qx = has_q ? (in ? q(x) : 0.f) : 1.f;
  return u * qx < px + lantern_pool(p, vocab, x, relax);
}

// Test of slot i in chain mode; a -1 token ("no draft") never passes.  CUDA with GSD's grouping:
// the decision jacobi_group_test_kernel wrote to the workspace (each test is a pass over a row,
// done once a slot by a whole block, not once a slot in every block of the request).
SPECOPS_HD bool jacobi_chain_ok(const JacobiArgs& A, int64_t b, int64_t i) {
  if (A.relax.codebook && A.workspace) return A.workspace[b * A.ws_stride + i] != 0;
  const int64_t x = jacobi_tok(A, b, i);
  if (x == -1) return false;
  const float* q = jacobi_q(A, b, i);
  return jacobi_accept(A.rng.uniform(b, i), MassW{jacobi_p(A, b, i)}, MassW{q}, q != nullptr,
                       A.vocab, x, A.relax);
}

// ---- shared per-request procedures (Ops: HostJacobiOps or the CUDA BlockJacobiOps) -------------
// Ops provides, collectively over the vocabulary (every thread of a block calls them alike):
//   double sum(w), void sum2(f, &s1, &s2), int32_t draw(w, u), int32_t draw_residual(r, u)
//   (the draw from ResidW r, -1 when r has no mass), void sum2_final(f, &s1, &s2) (sum2 of the
//   walk's last rejection, which may keep what draw_final(w, u) = draw(w, u) needs of f's first
//   term, w = WalkResidW{f}),
//   void candidates(p, row, draw0, k, out) (k draws without replacement from raw row p into
//   out[0..k), uniform j = draw draw0 + j of `row`), bool leader(), void sync() (a block
//   barrier: the leader's shared-memory stores are then visible to every thread).

// t ~ norm(r), r = max(p - q, 0), drawn from r itself (the inverse CDF scales u by sum(r): the
// same law without norm(r)'s pass and divisions); t ~ p when r has no mass.
SPECOPS_EXEC_CHECK_DISABLE
template <class Ops>
SPECOPS_HD int32_t jacobi_residual_draw(Ops& ops, const float* p, const float* q, int64_t x,
                                        float u) {
  const int32_t t = ops.draw_residual(ResidW{p, q, x}, u);  // -1: r has no mass
  return t >= 0 ? t : ops.draw(MassW{p}, u);
}

// Chain mode, slot i of request b, given the accepted prefix a: next_window[i] and the slot's
// candidates (k draws without replacement from p_i at draws 2L + i k + j when a < L and i > a).
SPECOPS_EXEC_CHECK_DISABLE
template <class Ops>
SPECOPS_HD void jacobi_chain_slot(const JacobiArgs& A, int64_t b, int64_t i, int64_t a, Ops& ops) {
  const int64_t L = A.len;
  const int64_t x = jacobi_tok(A, b, i);
  const float* p = jacobi_p(A, b, i);
  // no draft (-1): q = 0, so the residual is p itself
  const float* q = x == -1 ? nullptr : jacobi_q(A, b, i);
  const float u = A.rng.uniform(b, L + i);
  int32_t t;
  if (A.cont) {
    const bool ok = i < a || (i > a && jacobi_chain_ok(A, b, i));
    t = ok ? static_cast<int32_t>(x) : jacobi_residual_draw(ops, p, q, x, u);
  } else if (i < a) {
    t = static_cast<int32_t>(x);
  } else if (i == a) {
    t = jacobi_residual_draw(ops, p, q, x, u);
  } else {
    t = ops.draw(MassW{p}, u);  // plain SJD: later slots sampled afresh from p
  }
  if (ops.leader()) A.out_next_window[b * L + i] = t;
  if (A.num_candidates > 1) {
    int32_t* out = A.out_candidates + (b * L + i) * A.num_candidates;
    if (a < L && i > a) {
      ops.candidates(p, b, jacobi_cand_draw0(A, i), A.num_candidates, out);
    } else if (ops.leader()) {
      for (int64_t j = 0; j < A.num_candidates; ++j) out[j] = -1;
    }
  }
  if (i == 0 && ops.leader()) {
    A.out_num_accepted[b] = static_cast<int32_t>(a);
    A.out_first_reject[b] = a < L ? static_cast<int32_t>(a) : -1;
  }
}

// ---- tree mode ---------------------------------------------------------------------------------
// One request's tree and window tokens: the global rows (CPU twin) or shared-memory copies (CUDA),
// plus, optionally, every node's test against its parent's untouched rows (ok0, see
// jacobi_fresh_test), which is the walk's test whenever no sibling was rejected before it.
struct TreeView {
  const int32_t* fc;   // first_child row [L]
  const int32_t* ns;   // next_sibling row [L]
  const int64_t* tok;  // window tokens [L] (cached), or nullptr: read A.tokens
  const int32_t* ok0;  // [L] or nullptr
  int64_t len;
  int64_t tok_base;  // b * tokens_sb (uncached tokens)
  SPECOPS_HD int64_t link(int64_t m) const { return (m > 0 && m < len) ? m : -1; }
  SPECOPS_HD int64_t first_child(int64_t n) const { return link(fc[n]); }
  SPECOPS_HD int64_t next_sibling(int64_t n) const { return link(ns[n]); }
  SPECOPS_HD int64_t token(const JacobiArgs& A, int64_t n) const {
    return tok ? tok[n] : A.tokens[tok_base + n];
  }
};

SPECOPS_HD TreeView jacobi_tree_view(const JacobiArgs& A, int64_t b) {
  return TreeView{A.first_child + b * A.tree_sb,
                  A.next_sibling + b * A.tree_sb,
                  nullptr,
                  nullptr,
                  A.len,
                  b * A.tokens_sb};
}

// Test of node c's token x against its parent m's target/draft rows as they are (no sibling of c
// rejected before it): draw c - 1.
SPECOPS_HD bool jacobi_fresh_test(const JacobiArgs& A, int64_t b, int64_t m, int64_t c, int64_t x) {
  const float* q = jacobi_q(A, b, m);
  return jacobi_accept(A.rng.uniform(b, c - 1), MassW{jacobi_p(A, b, m)}, MassW{q}, q != nullptr,
                       A.vocab, x, A.relax);
}

// parent[c] = m for the children c of node m (children lists are disjoint: one writer per entry,
// so every m can run in parallel); parent must hold -1 beforehand.
SPECOPS_HD void jacobi_set_parents(const TreeView& tv, int64_t m, int32_t* parent) {
  int64_t c = tv.first_child(m);
  for (int64_t guard = 0; c > m && guard < tv.len; ++guard) {
    parent[c] = static_cast<int32_t>(m);
    c = tv.next_sibling(c);
  }
}

// Depth of node n (root 0) from the parents; -1 if the root is not reached.
SPECOPS_HD int64_t jacobi_depth(const int32_t* parent, int64_t n, int64_t L) {
  int64_t d = 0, x = n;
  for (; x > 0 && d < L; ++d) x = parent[x];
  return x == 0 ? d : -1;
}

// Node n can be l_d (at position d = depth(n)) only if it is its parent's first child.
SPECOPS_HD bool jacobi_on_line(const TreeView& tv, const int32_t* parent, int64_t n) {
  return n >= 1 && parent[n] >= 0 && tv.first_child(parent[n]) == n;
}

// The next sibling of c that is not padding, -1 when none.
SPECOPS_HD int64_t jacobi_next_real(const JacobiArgs& A, const TreeView& tv, int64_t c) {
  int64_t n = tv.next_sibling(c);
  for (int64_t hops = 0; n >= 0 && tv.token(A, n) == -1 && hops < tv.len; ++hops)
    n = tv.next_sibling(n);
  return n >= 0 && tv.token(A, n) == -1 ? -1 : n;
}

// The walk (verify_tree without replacement, draws n - 1 and L - 1).  Writes the walk's result
// and its path/tokens into the request's workspace ws (leader only).  Scratch xs/S/T hold the
// rejections at the current node (at most L - 1 entries).
SPECOPS_EXEC_CHECK_DISABLE
template <class Ops>
SPECOPS_HD void jacobi_tree_walk(const JacobiArgs& A, int64_t b, const TreeView& tv, Ops& ops,
                                 int64_t* xs, double* S, double* T, int32_t* ws) {
  const int64_t L = A.len, V = A.vocab;
  int32_t* path = ws + jacobi_ws_path(L);
  int32_t* toks = ws + jacobi_ws_tok(L);
  if (ops.leader()) {
    for (int64_t d = 0; d < L; ++d) {
      path[d] = d == 0 ? 0 : -1;
      toks[d] = -1;
    }
  }
  int64_t cur = 0, a = 0, j = 0;
  int64_t cand = tv.first_child(0);
  bool rej = false, last_kept = false;
  for (int64_t step = 0; step < L && cand >= 0; ++step) {
    const int64_t c = cand;
    const int64_t x = tv.token(A, c);
    if (x == -1) {  // padding node: skipped as if absent
      cand = tv.next_sibling(c);
      continue;
    }
    const float* q0 = jacobi_q(A, b, cur);
    const WalkRow row{jacobi_p(A, b, cur), q0, j, xs, S, T};
    bool ok;
    if (j == 0) {  // p, q are rows cur as they are
      ok = tv.ok0 ? tv.ok0[c] != 0 : jacobi_fresh_test(A, b, cur, c, x);
    } else {
      ok = jacobi_accept(A.rng.uniform(b, c - 1), WalkP{row}, WalkQ{row}, q0 != nullptr, V, x,
                         A.relax);
    }
    if (ok) {
      if (ops.leader()) {
        if (a + 1 < L) path[a + 1] = static_cast<int32_t>(c);
        toks[a] = static_cast<int32_t>(x);
      }
      ++a;
      cur = c;
      j = 0;
      rej = false;
      cand = tv.first_child(c);
      continue;
    }
    // rejected: p <- norm(max(p - q, 0)), q <- norm(q without x); only the sums' reciprocals
    // are stored (a later pass multiplies by them).  Without a real sibling left the walk ends
    // here: the pass also keeps what the final draw from r needs (sum2_final).
    double s = 0.0, t = 0.0;
    last_kept = jacobi_next_real(A, tv, c) < 0;
    if (last_kept) {
      ops.sum2_final(WalkRejectTerms{row, x}, &s, &t);
    } else {
      ops.sum2(WalkRejectTerms{row, x}, &s, &t);
    }
    // the walk's rejection state, in shared memory: stored once and published (stores of the
    // same value by every thread would race; found by cuda_sim's ThreadSanitizer stage)
    if (ops.leader()) {
      xs[j] = x;
      S[j] = s > 0.0 ? inverse_of(s) : 0.0;
      T[j] = t > 0.0 ? inverse_of(t) : 0.0;
    }
    ops.sync();
    ++j;
    rej = true;
    cand = tv.next_sibling(c);
  }
  // the final token: after a rejection with mass, from its residual r (p_j = norm(r): the same
  // law); else from p_j (row cur, or p_{j-1} when the last residual had no mass)
  const float* p = jacobi_p(A, b, cur);
  const float* q = jacobi_q(A, b, cur);
  const float u = A.rng.uniform(b, L - 1);
  int32_t tok;
  if (rej && S[j - 1] > 0.0) {
    const WalkResidW w{WalkRejectTerms{WalkRow{p, q, j - 1, xs, S, T}, xs[j - 1]}};
    tok = last_kept ? ops.draw_final(w, u) : ops.draw(w, u);
  } else {
    tok = ops.draw(WalkPosW{WalkRow{p, q, j, xs, S, T}}, u);
  }
  if (ops.leader()) {
    toks[a < L ? a : L - 1] = tok;
    ws[kWsA] = static_cast<int32_t>(a);
    ws[kWsM] = static_cast<int32_t>(cur);
    ws[kWsRej] = rej ? 1 : 0;
  }
}

// Continuation work of node n (n = l_d at position d = depth(n)): the token for position d (its
// first child's token kept or resampled; -1 when it has no real first child) and the candidates
// from target row n.  Written to ws node slots n (leader).
SPECOPS_EXEC_CHECK_DISABLE
template <class Ops>
SPECOPS_HD void jacobi_tree_node(const JacobiArgs& A, int64_t b, const TreeView& tv, int64_t n,
                                 int64_t depth, bool need_tok, bool need_cand, Ops& ops,
                                 int32_t* ws) {
  const int64_t L = A.len;
  const float* p = jacobi_p(A, b, n);
  if (need_tok) {
    const int64_t c = tv.first_child(n);
    const int64_t x = c >= 0 ? tv.token(A, c) : -1;
    int32_t t = -1;
    if (x != -1) {
      const float* q = jacobi_q(A, b, n);
      const float u = A.rng.uniform(b, L + c - 1);
      if (A.cont) {
        const bool keep = jacobi_fresh_test(A, b, n, c, x);
        t = keep ? static_cast<int32_t>(x) : jacobi_residual_draw(ops, p, q, x, u);
      } else {
        t = ops.draw(MassW{p}, u);
      }
    }
    if (ops.leader()) ws[jacobi_ws_node_tok(L) + n] = t;
  }
  if (need_cand && A.num_candidates > 1) {
    ops.candidates(p, b, jacobi_cand_draw0(A, depth), A.num_candidates,
                   ws + jacobi_ws_cand(L) + n * A.num_candidates);
  }
}

// The continuation line of a finished walk (one thread): tok_src[d] = the node whose
// continuation token fills position d, cand_src[d] = the node whose candidates go to position d
// (-1 elsewhere).  l_{a+1} = first child of m, l_{d+1} = first child of l_d; the line stops at a
// missing or padding first child.  Also writes num_accepted and first_reject.
template <class WsPtr>
SPECOPS_HD void jacobi_tree_line(const JacobiArgs& A, int64_t b, const TreeView& tv, WsPtr ws,
                                 int32_t* tok_src, int32_t* cand_src) {
  const int64_t L = A.len;
  const int64_t a = ws[kWsA], m = ws[kWsM];
  const bool rej = ws[kWsRej] != 0;
  for (int64_t d = 0; d < L; ++d) tok_src[d] = cand_src[d] = -1;
  A.out_num_accepted[b] = static_cast<int32_t>(a);
  A.out_first_reject[b] = rej ? static_cast<int32_t>(a) : -1;
  int64_t prev = tv.first_child(m);
  int64_t d = a + 1;
  bool alive = rej && prev >= 0 && d < L;
  while (alive) {
    cand_src[d] = static_cast<int32_t>(prev);
    const int64_t node = tv.first_child(prev);
    if (node < 0 || tv.token(A, node) == -1) break;
    tok_src[d] = static_cast<int32_t>(prev);
    prev = node;
    ++d;
    alive = d < L;
  }
}

// Position d's outputs (positions are independent: one thread each on the GPU): path, next_window
// (the walk's tokens up to a, then the line's), candidates.  WsPtr may be volatile.
template <class WsPtr>
SPECOPS_HD void jacobi_tree_write(const JacobiArgs& A, int64_t b, WsPtr ws, const int32_t* tok_src,
                                  const int32_t* cand_src, int64_t d) {
  const int64_t L = A.len, k = A.num_candidates;
  A.out_path[b * L + d] = ws[jacobi_ws_path(L) + d];
  const int64_t ts = tok_src[d];
  A.out_next_window[b * L + d] =
      ts >= 0 ? ws[jacobi_ws_node_tok(L) + ts] : ws[jacobi_ws_tok(L) + d];
  if (k > 1) {
    const int64_t cs = cand_src[d];
    int32_t* out = A.out_candidates + (b * L + d) * k;
    for (int64_t j = 0; j < k; ++j) out[j] = cs >= 0 ? ws[jacobi_ws_cand(L) + cs * k + j] : -1;
  }
}

void verify_jacobi_host(const JacobiArgs& args);

}  // namespace specops
