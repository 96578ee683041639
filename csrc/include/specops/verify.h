// Verification by rejection sampling: the per-request cores shared by the C++ CPU twin and the
// CUDA kernels.  The semantics (and which Philox draw every decision uses) are those of
// specops/reference/verify.py, token for token:
//   accept x  iff  u * q(x) < p(x) + pool(x)          (float32; q = one-hot of x without q)
//   on reject r = max(p - q, 0) (float32), p <- norm(r) = float32(float64(r) * (1 / s)),
//   s = sum(float64(r)) (1 / s the float64 reciprocal, so a pass multiplies instead of dividing)
//   (p unchanged if r has no mass); the final token t ~ p by inverse CDF (float64 sums).  A
//   chain draws its corrected token from r itself (inverse CDF scales u by sum(r): same law).
//   pool(x) (LANTERN): sum of p(n_j) over the neighbours n_1..n_k of x whose cumulative
//   mass c_j = p(n_1) + ... + p(n_j) stays <= delta (float64), 0 without relaxation.
// The normalisation is replicated exactly (product by the float64 reciprocal, rounded to float32
// per entry): the rounded row, not r / s, is what the reference samples from and tests against.
// NaN policy: every entry of p and q is read through mass() (specops/mass.h): NaN, negative and
// +inf entries count as 0 everywhere above; a row left without mass gives token 0.
#pragma once
#include <stdint.h>

#include "specops/common.h"
#include "specops/prob_math.h"

namespace specops {

// Row: a const float* or any type with float operator[](int64_t) (the tree walk's TreeRow);
// RowMass reads its entries through mass(), as lantern_pool's w.
template <class Row>
struct RowMass {
  Row p;
  SPECOPS_HD float operator()(int64_t v) const { return mass(p[v]); }
};

// accept x iff u * q(x) < p(x) + pool(x); q == nullptr means q = one-hot(x), q(x) = 1.  With
// GSD's grouping (relax.codebook): u * Q < P over x's group (prob_math.h group_sums).
template <class Row>
SPECOPS_HD bool accept_draft(float u, const Row& p, const float* q, int64_t vocab, int64_t x,
                             const RelaxArgs& relax) {
  if (relax.codebook) {  // GSD: u * Q < P over x's group
    float big_p, big_q;
    group_sums(RowMass<Row>{p}, MassW{q}, q != nullptr, vocab, x, relax, &big_p, &big_q);
    return u * big_q < big_p;
  }
  const float px = (x >= 0 && x < vocab) ? mass(p[x]) : 0.f;  // prob_at over any Row
  const float qx = q ? prob_at(q, vocab, x) : 1.f;
  return u * qx < px + lantern_pool(RowMass<Row>{p}, vocab, x, relax);
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
  bool block = false;         // block verification (below); not with greedy or relax
  RngArgs rng;                // row b = request b; draw i = test of draft i, draw K = final token
  int32_t* out_tokens;        // [B, K+1]
  int32_t* out_num_accepted;  // [B]
  RowSplit split;             // CUDA, not block: sampled, the final draw's split over B rows;
                              // greedy, the argmaxes' split over the B * (K+1) rows
  float* greedy_best = nullptr;  // CUDA, greedy split: [B * (K+1) * chunks, 2] (max, first id)
  int32_t* group_ok = nullptr;   // CUDA, GSD (not greedy): [B, K] the drafts' test decisions
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

// The acceptance test of draft i of request b (it reads draw i: the tests are independent);
// CUDA with GSD's grouping reads the decision its pre-pass wrote (group_ok).
SPECOPS_HD bool chain_test(const VerifyChainArgs& a, int64_t b, int64_t i) {
  if (a.group_ok) return a.group_ok[b * a.k + i] != 0;
  const float* p = a.target + b * a.target_sb + i * a.target_sk;
  const float* q = a.draft ? a.draft + b * a.draft_sb + i * a.draft_sk : nullptr;
  return accept_draft(a.rng.uniform(b, i), p, q, a.vocab, a.tokens[b * a.tokens_sb + i], a.relax);
}

// The accepted prefix length of a sampled (non-greedy) chain: one thread's work, K loads.
SPECOPS_HD int64_t chain_accepted(const VerifyChainArgs& a, int64_t b, int64_t n_valid) {
  int64_t acc = 0;
  while (acc < n_valid && chain_test(a, b, acc)) ++acc;
  return acc;
}

SPECOPS_HD void chain_write_prefix(const VerifyChainArgs& a, int64_t b, int64_t acc, int32_t t) {
  int32_t* out = a.out_tokens + b * (a.k + 1);
  for (int64_t i = 0; i <= a.k; ++i) {
    out[i] = i < acc ? static_cast<int32_t>(a.tokens[b * a.tokens_sb + i]) : (i == acc ? t : -1);
  }
  a.out_num_accepted[b] = static_cast<int32_t>(acc);
}

// ---- block verification ---------------------------------------------------------------------
// Sun et al. 2024, Algorithm 2 (specops/reference/block.py), for n valid drafts x_1..x_n:
//   w_0 = 1, w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1)   (float64; 0 when w_{i-1} or p_i(x_i)
//        is 0, 1 when q_i(x_i) = 0 < p_i(x_i))
//   r_i(y) = max(float32(w_i p_{i+1}(y) - q_{i+1}(y)), 0),  Z_i = sum float64(r_i)
//   h_i = Z_i / (Z_i + 1 - w_i) for i < n (1 when the denominator is 0), h_n = w_n
//   tau = max{i : u_{i-1} < h_i} (0 if none); t ~ p_{n+1} if tau = n, else t ~ norm(r_tau)
// The scan runs from n down and stops at the first acceptance (the maximum): one pass over the
// vocabulary per position it tests below n.
SPECOPS_HD double block_step(double w, float px, float qx) {
  if (!(w > 0.0) || !(px > 0.f)) return 0.0;
  if (!(qx > 0.f)) return 1.0;
  const double r = w * static_cast<double>(px) / static_cast<double>(qx);
  return r < 1.0 ? r : 1.0;
}

// w_j of request b: the recurrence over its drafts 0..j-1 (j <= its valid drafts).
SPECOPS_HD double chain_block_weight(const VerifyChainArgs& a, int64_t b, int64_t j) {
  double w = 1.0;
  for (int64_t i = 0; i < j; ++i) {
    const float* p = a.target + b * a.target_sb + i * a.target_sk;
    const float* q = a.draft ? a.draft + b * a.draft_sb + i * a.draft_sk : nullptr;
    const int64_t x = a.tokens[b * a.tokens_sb + i];
    w = block_step(w, prob_at(p, a.vocab, x), q ? prob_at(q, a.vocab, x) : 1.f);
  }
  return w;
}

// r(y) = max(float32(w p(y) - q(y)), 0); q == nullptr: q = one-hot(x).
SPECOPS_HD float block_residual_at(const float* p, const float* q, int64_t x, double w, int64_t i) {
  const double qi = q ? static_cast<double>(mass(q[i])) : (i == x ? 1.0 : 0.0);
  return clamp0(static_cast<float>(w * static_cast<double>(mass(p[i])) - qi));
}
struct BlockResidual {  // w(i) = block_residual_at(p, q, x, w, i)
  const float* p;
  const float* q;
  int64_t x;
  double w;
  SPECOPS_HD float operator()(int64_t i) const { return block_residual_at(p, q, x, w, i); }
};
struct NormBlockResidual {  // norm(r): the draw's row after a rejection at tau
  BlockResidual r;
  double inv;  // 1 / sum(r)
  SPECOPS_HD float operator()(int64_t i) const { return scaled(r(i), inv); }
};

SPECOPS_HD double block_stop(double z, double w) {
  const double den = z + (1.0 - w);
  return den > 0.0 ? z / den : 1.0;
}

// ---- tree -----------------------------------------------------------------------------------
// Recursive rejection sampling down a tree (reference verify_tree / _tree_walk).  Node n's
// children are first_child[n], next_sibling[...] in index order; node n's test uses draw n - 1,
// the final token draw N - 1.  The current target row p starts as target row `cur`; after the
// first rejected child it lives in the workspace ws_p (its normalised residual), likewise q
// (draft row `cur`, or its renormalised remainder in ws_q without replacement).
struct VerifyTreeArgs {
  const float* target;  // [B, N, V], last dim contiguous
  int64_t target_sb, target_sn;
  const float* draft;  // [B, N, V] or nullptr (deterministic drafts: q = one-hot)
  int64_t draft_sb, draft_sn;
  TokenView tokens;  // [B, N] (entry 0 ignored, -1 = padding node)
  int64_t tokens_sb;
  const int32_t* first_child;   // [B or 1, N]
  const int32_t* next_sibling;  // [B or 1, N]
  int64_t tree_sb;              // N, or 0 for one tree shared by the batch
  int64_t batch, nodes, vocab, width;
  bool without_replacement, greedy;
  RelaxArgs relax;
  RngArgs rng;     // draws_per_row = N
  float* ws_p;     // [B, V] workspace (not needed with greedy)
  float* ws_q;     // [B, V] workspace (only without_replacement with draft probabilities)
  RowSplit split;  // CUDA, greedy at small batch: the argmaxes' split over the B * N rows
  float* greedy_best = nullptr;  // with it: [B * N * chunks, 2] (max, first id) of each chunk
  int32_t* out_path;             // [B, W]
  int32_t* out_tokens;           // [B, W]
  int32_t* out_num_accepted;     // [B]
};

// The walk's scalar state (one request).  Sampling with replacement (q the same draft row for
// every child of a node, or one-hot without q) the CUDA kernel does not write the residual rows:
// it keeps node cur's rejections with mass, (x_j, 1 / s_j), and folds them in wherever it reads
// the row, p_j(i) = scaled(max(mass(p_{j-1}(i)) - q_j(i), 0), 1 / s_j) from tree_p's row
// (tree_fold): the same float32 values the workspace would hold.  The CPU twin never folds.
constexpr int kTreeFold = 16;
struct TreeWalk {
  int64_t cur;    // last accepted node
  int64_t cand;   // next child of `cur` to test, -1 when none is left
  int64_t a;      // accepted so far
  int64_t steps;  // children looked at (a valid tree needs at most N - 1)
  int64_t x;      // token of the child just rejected (kTreeReject)
  bool p_ws, q_ws;
  int nfold;                   // rejections of node cur folded in on top of tree_p's row
  int64_t fold_x[kTreeFold];   // their tokens
  double fold_inv[kTreeFold];  // 1 / s_j
};

// q_j(i) of the rejection of x_j: the node's draft entry qm = mass(q[i]), or one-hot(x_j) when
// the drafts are deterministic (q == nullptr).
SPECOPS_HD float tree_q_at(const float* q, float qm, int64_t i, int64_t x) {
  return q ? qm : (i == x ? 1.f : 0.f);
}
// Entry i of the current target row: v = tree_p's entry with the folded rejections applied, the
// draft entry qm already read by the caller (ignored without q).
SPECOPS_HD float tree_fold_at(const TreeWalk& w, float v, int64_t i, const float* q, float qm) {
  for (int j = 0; j < w.nfold; ++j)
    v = scaled(clamp0(mass(v) - tree_q_at(q, qm, i, w.fold_x[j])), w.fold_inv[j]);
  return v;
}
SPECOPS_HD float tree_fold(const TreeWalk& w, float v, int64_t i, const float* q) {
  return tree_fold_at(w, v, i, q, q && w.nfold > 0 ? mass(q[i]) : 0.f);
}
struct TreeRow {  // the current target row as the acceptance tests read it
  const float* p;
  const float* q;
  const TreeWalk* w;
  SPECOPS_HD float operator[](int64_t i) const { return tree_fold(*w, p[i], i, q); }
};

enum TreeEvent : int { kTreeDone = 0, kTreeReject = 1, kTreeDescend = 2 };

SPECOPS_HD int64_t tree_link(const int32_t* arr, const VerifyTreeArgs& a, int64_t b, int64_t n) {
  const int64_t m = arr[b * a.tree_sb + n];
  return (m > 0 && m < a.nodes) ? m : -1;  // never index outside the tree, whatever the input
}

// Current target row of the walk (target row cur, or its residual in the workspace).
SPECOPS_HD const float* tree_p(const VerifyTreeArgs& a, int64_t b, const TreeWalk& w) {
  return w.p_ws ? a.ws_p + b * a.vocab : a.target + b * a.target_sb + w.cur * a.target_sn;
}

// Current draft row (nullptr: deterministic drafts).
SPECOPS_HD const float* tree_q(const VerifyTreeArgs& a, int64_t b, const TreeWalk& w) {
  if (a.draft == nullptr) return nullptr;
  return w.q_ws ? a.ws_q + b * a.vocab : a.draft + b * a.draft_sb + w.cur * a.draft_sn;
}

// Start: outputs -1 except path[0] = 0 (the root); cur = 0.
SPECOPS_HD void tree_walk_init(const VerifyTreeArgs& a, int64_t b, TreeWalk& w) {
  for (int64_t i = 0; i < a.width; ++i) {
    a.out_path[b * a.width + i] = i == 0 ? 0 : -1;
    a.out_tokens[b * a.width + i] = -1;
  }
  w.cur = 0;
  w.cand = tree_link(a.first_child, a, b, 0);
  w.a = 0;
  w.steps = 0;
  w.x = -1;
  w.p_ws = w.q_ws = false;
  w.nfold = 0;
}

// Runs the walk's scalar decisions until it needs a pass over the vocabulary:
//   kTreeReject  child with token w.x of node w.cur was rejected: the caller replaces p by
//                norm(max(p - q, 0)) (and q by norm(q without x) without replacement), then
//                calls tree_walk_rejected;
//   kTreeDescend (greedy only) moved to a new node: the caller computes its argmax;
//   kTreeDone    no child left: the caller draws the final token from p (or the argmax).
// greedy_best: argmax of target row cur (greedy), ignored otherwise.
SPECOPS_HD int tree_walk_advance(const VerifyTreeArgs& a, int64_t b, TreeWalk& w,
                                 int64_t greedy_best) {
  while (w.cand >= 0 && w.steps < a.nodes) {
    const int64_t c = w.cand;
    const int64_t x = a.tokens[b * a.tokens_sb + c];
    ++w.steps;
    if (x == -1) {  // padding node: skipped, its subtree is never reached
      w.cand = tree_link(a.next_sibling, a, b, c);
      continue;
    }
    bool acc;
    if (a.greedy) {
      acc = x == greedy_best;
    } else {
      const float u = a.rng.uniform(b, c - 1);
      const float* q = tree_q(a, b, w);
      acc = accept_draft(u, TreeRow{tree_p(a, b, w), q, &w}, q, a.vocab, x, a.relax);
    }
    if (acc) {  // descend: path[a + 1] = c, tokens[a] = x; fresh rows of c
      if (w.a + 1 < a.width) a.out_path[b * a.width + w.a + 1] = static_cast<int32_t>(c);
      if (w.a < a.width) a.out_tokens[b * a.width + w.a] = static_cast<int32_t>(x);
      ++w.a;
      w.cur = c;
      w.p_ws = w.q_ws = false;
      w.nfold = 0;
      w.cand = tree_link(a.first_child, a, b, c);
      if (a.greedy) return kTreeDescend;
      continue;
    }
    w.cand = tree_link(a.next_sibling, a, b, c);
    if (!a.greedy) {
      w.x = x;
      return kTreeReject;
    }
  }
  return kTreeDone;
}

// After the caller wrote the residual into the workspace.  p_mass: the residual had mass (else p
// is unchanged, as in the reference).  q moves to ws_q when it was renormalised.
SPECOPS_HD void tree_walk_rejected(const VerifyTreeArgs& a, TreeWalk& w, bool p_mass) {
  if (p_mass) w.p_ws = true;
  if (a.without_replacement && a.draft != nullptr) w.q_ws = true;
}

SPECOPS_HD void tree_walk_finish(const VerifyTreeArgs& a, int64_t b, const TreeWalk& w, int32_t t) {
  if (w.a < a.width) a.out_tokens[b * a.width + w.a] = t;
  a.out_num_accepted[b] = static_cast<int32_t>(w.a);
}

void verify_chain_host(const VerifyChainArgs& args);
void verify_tree_host(const VerifyTreeArgs& args);

}  // namespace specops
