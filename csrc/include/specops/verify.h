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
#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
#include <xmmintrin.h>
#endif

#include "specops/common.h"
#include "specops/mass.h"

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

// mass(p(x)), 0 for ids outside [0, vocab): an out-of-range draft is a draft of target prob 0.
SPECOPS_HD float prob_at(const float* row, int64_t vocab, int64_t x) {
  return (x >= 0 && x < vocab) ? mass(row[x]) : 0.f;
}

SPECOPS_HD float lantern_pool(const float* p, int64_t vocab, int64_t x, const RelaxArgs& relax) {
  if (relax.neighbors == nullptr || x < 0 || x >= vocab) return 0.f;
  const int32_t* nb = relax.neighbors + x * relax.k;
  double cum = 0.0, pool = 0.0;
  for (int64_t j = 0; j < relax.k; ++j) {
    const int64_t n = nb[j];
    const double pn = (n >= 0 && n < vocab && n != x) ? static_cast<double>(mass(p[n])) : 0.0;
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

// max(r, 0) (NaN -> 0), branch-free: a sign that flips at random costs a mispredicted branch
// per entry on the CPU otherwise (the compiler turns `r > 0 ? r : 0` feeding a sum into jumps).
SPECOPS_HD float clamp0(float r) {
#if defined(__CUDA_ARCH__)
  return fmaxf(r, 0.f);
#elif defined(__x86_64__) || defined(_M_X64)
  return _mm_cvtss_f32(_mm_max_ss(_mm_set_ss(r), _mm_setzero_ps()));  // r > 0 ? r : 0
#else
  return r > 0.f ? r : 0.f;
#endif
}

// r_i = max(mass(p_i) - mass(q_i), 0) in float32; q == nullptr: q = one-hot(x) (x may be out
// of range).  Both terms are finite and >= 0, so the difference never overflows.
SPECOPS_HD float residual_at(const float* p, const float* q, int64_t x, int64_t i) {
  const float qi = q ? mass(q[i]) : (i == x ? 1.f : 0.f);
  return clamp0(mass(p[i]) - qi);
}

// norm(r)_i = float32(float64(r_i) * inv), inv = 1 / s (float64), s = sum of float64(r): the
// reference's _normalise.  Passes take inv once (inverse_of) and call scaled per entry.
SPECOPS_HD double inverse_of(double s) { return 1.0 / s; }
SPECOPS_HD float scaled(float r, double inv) {
  return static_cast<float>(static_cast<double>(r) * inv);
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
  RowSplit split;             // CUDA, sampled (not greedy, not block): the final draw's split
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

// The acceptance test of draft i of request b (it reads draw i: the tests are independent).
SPECOPS_HD bool chain_test(const VerifyChainArgs& a, int64_t b, int64_t i) {
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
  RngArgs rng;          // draws_per_row = N
  float* ws_p;          // [B, V] workspace (not needed with greedy)
  float* ws_q;          // [B, V] workspace (only without_replacement with draft probabilities)
  int32_t* out_path;    // [B, W]
  int32_t* out_tokens;  // [B, W]
  int32_t* out_num_accepted;  // [B]
};

// The walk's scalar state (one request).
struct TreeWalk {
  int64_t cur;    // last accepted node
  int64_t cand;   // next child of `cur` to test, -1 when none is left
  int64_t a;      // accepted so far
  int64_t steps;  // children looked at (a valid tree needs at most N - 1)
  int64_t x;      // token of the child just rejected (kTreeReject)
  bool p_ws, q_ws;
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
      acc = accept_draft(u, tree_p(a, b, w), tree_q(a, b, w), a.vocab, x, a.relax);
    }
    if (acc) {  // descend: path[a + 1] = c, tokens[a] = x; fresh rows of c
      if (w.a + 1 < a.width) a.out_path[b * a.width + w.a + 1] = static_cast<int32_t>(c);
      if (w.a < a.width) a.out_tokens[b * a.width + w.a] = static_cast<int32_t>(x);
      ++w.a;
      w.cur = c;
      w.p_ws = w.q_ws = false;
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

// ---- sampling without replacement (Gumbel top-k) ----------------------------------------------
// key_v = log(p_v) - log(-log(u_v)) in float32 (entries with mass(p_v) = 0 never chosen); the
// k largest keys, largest first, ties to the lower id.
struct KeyId {
  float key;
  int32_t id;
};

// The uniform a Gumbel key uses: Philox's lie in [2^-24, 1 - 2^-24]; a caller's below 2^-24
// (0 and NaN included) counts as 2^-24, so an entry with mass always has a key > -inf and can be
// chosen (u = 1 gives +inf: first).  The same rule in reference.sample_without_replacement.
SPECOPS_HD float gumbel_uniform(float u) { return u > 0x1p-24f ? u : 0x1p-24f; }

// a ranks strictly before b: larger key, or equal key and lower id.
SPECOPS_HD bool key_before(KeyId a, KeyId b) {
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}

struct SampleWorArgs {
  const float* probs;  // [R, V], last dim contiguous
  int64_t row_stride, rows, vocab, k;
  RngArgs rng;   // row r = flat row r; draw v = entry v (draws_per_row = V)
  int32_t* out;  // [R, k]
};

// ---- host (CPU twin) --------------------------------------------------------------------------
// float64 sum of w(i) over [lo, hi): four interleaved accumulators (the order only moves the
// result at the 1e-16 level, where every backend's sums differ anyway).
template <typename W>
inline double sum_range_host(W w, int64_t lo, int64_t hi) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = lo;
  for (; i + 4 <= hi; i += 4) {
    s0 += static_cast<double>(w(i));
    s1 += static_cast<double>(w(i + 1));
    s2 += static_cast<double>(w(i + 2));
    s3 += static_cast<double>(w(i + 3));
  }
  for (; i < hi; ++i) s0 += static_cast<double>(w(i));
  return (s0 + s1) + (s2 + s3);
}

template <typename W>
inline double sum_host(W w, int64_t vocab) {
  return sum_range_host(w, 0, vocab);
}

// Two float64 sums over [lo, hi) in one pass, entry by entry in order: f(v, &a, &b) gives entry v
// of both rows.
template <typename F>
inline void sum2_range_host(const F& f, int64_t lo, int64_t hi, double* s1, double* s2) {
  double a = 0.0, b = 0.0;
  for (int64_t v = lo; v < hi; ++v) {
    float x, y;
    f(v, &x, &y);
    a += static_cast<double>(x);
    b += static_cast<double>(y);
  }
  *s1 = a;
  *s2 = b;
}

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

// The chunks of a host draw over n entries (at most kMax of at least 256 entries) and their
// float64 sums; the total is their sum in chunk order.
struct DrawChunks {
  static constexpr int64_t kMax = 256;
  int64_t n, size, count;
  double sums[kMax];
  explicit DrawChunks(int64_t n_) : n(n_) {
    size = (n + kMax - 1) / kMax;
    size = size < 256 ? 256 : size;
    count = (n + size - 1) / size;
  }
  int64_t lo(int64_t c) const { return c * size; }
  int64_t hi(int64_t c) const { return (c + 1) * size < n ? (c + 1) * size : n; }
  // chunk_sum(lo, hi) = sum of w over [lo, hi) in float64 (any order)
  template <typename ChunkSum>
  void fill(const ChunkSum& chunk_sum) {
    for (int64_t c = 0; c < count; ++c) sums[c] = chunk_sum(lo(c), hi(c));
  }
  double total() const {
    double t = 0.0;
    for (int64_t c = 0; c < count; ++c) t += sums[c];
    return t;
  }
};

// The draw t ~ w with uniform u given w's chunk sums: min{i : w_0 + ... + w_i > u * total,
// w_i > 0}, else the last i with w_i > 0, else 0.  The scan skips whole chunks and walks entry by
// entry only through the chunk holding u * total.
template <typename W>
inline int32_t draw_in_chunks(W w, const DrawChunks& ch, float u) {
  const double target = static_cast<double>(u) * ch.total();
  double running = 0.0;
  for (int64_t c = 0; c < ch.count; ++c) {
    if (running + ch.sums[c] <= target) {
      running += ch.sums[c];
      continue;
    }
    for (int64_t i = ch.lo(c); i < ch.hi(c); ++i) {
      const double wi = static_cast<double>(w(i));
      if (wi > 0.0) {
        running += wi;
        if (running > target) return static_cast<int32_t>(i);
      }
    }
  }
  for (int64_t i = ch.n - 1; i >= 0; --i)  // rounding ran past the end: last positive entry
    if (static_cast<double>(w(i)) > 0.0) return static_cast<int32_t>(i);
  return 0;
}

// The whole draw t ~ w with uniform u (draw_in_chunks): one pass computes the chunk sums
// (chunk_sum: a vectorised pass may stand in for sum_range_host), then the scan.
template <typename W, typename ChunkSum>
inline int32_t draw_host_chunked(W w, int64_t vocab, float u, const ChunkSum& chunk_sum) {
  DrawChunks ch(vocab);
  ch.fill(chunk_sum);
  return draw_in_chunks(w, ch, u);
}

template <typename W>
inline int32_t draw_host(W w, int64_t vocab, float u) {
  return draw_host_chunked(w, vocab, u,
                           [&](int64_t lo, int64_t hi) { return sum_range_host(w, lo, hi); });
}

// First maximal id of mass(p) (torch.argmax of reference.mass(p)): 0 for a row without mass.
inline int32_t argmax_host(const float* p, int64_t vocab) {
  int64_t best = 0;
  float bv = mass(p[0]);
  for (int64_t i = 1; i < vocab; ++i) {
    const float pi = mass(p[i]);
    if (pi > bv) {
      bv = pi;
      best = i;
    }
  }
  return static_cast<int32_t>(best);
}

void verify_chain_host(const VerifyChainArgs& args);
void verify_tree_host(const VerifyTreeArgs& args);
// Gumbel top-k of one row: out[0..k) (-1 padded), uniforms at draws draw0 + v of `row`.
void gumbel_topk_host(const float* p, int64_t vocab, const RngArgs& rng, int64_t row, int64_t draw0,
                      int64_t k, int32_t* out);
void sample_wor_host(const SampleWorArgs& args);

}  // namespace specops
