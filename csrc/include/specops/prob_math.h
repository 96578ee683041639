// The probability maths shared by the C++ CPU twins (csrc/*.cpp, the vectorised passes of
// csrc/host_simd.cpp) and the CUDA cores (specops/*.cuh): entries read through mass()
// (specops/mass.h), residuals max(p - q, 0), the float64 normalisation, the vocabulary functors
// w(v) every pass sums and draws from (the SJD walk's rows included), and the host sums and
// inverse-CDF draws.  The op headers (verify.h, jacobi.h, sample.h, path_acceptance.h) build on
// it; it includes none of them.
#pragma once
#include <stdint.h>
#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
#include <xmmintrin.h>
#endif

#include "specops/common.h"  // RelaxArgs
#include "specops/mass.h"

namespace specops {

// ---- entries ----------------------------------------------------------------------------------
// mass(p(x)), 0 for ids outside [0, vocab): an out-of-range draft is a draft of target prob 0.
SPECOPS_HD float prob_at(const float* row, int64_t vocab, int64_t x) {
  return (x >= 0 && x < vocab) ? mass(row[x]) : 0.f;
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

// ---- vocabulary functors ------------------------------------------------------------------------
// Each gives w(v) (operator()) and, for the CUDA passes, quad(i, o): o[e] = w(i + e) for e < 4,
// i a multiple of 4 with i + 3 < V, read with one 16-byte load per row where the row allows.
SPECOPS_HD void load4(const float* row, int64_t i, float* o) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(row + i) & 15) == 0) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(row + i));
    o[0] = v.x;
    o[1] = v.y;
    o[2] = v.z;
    o[3] = v.w;
    return;
  }
#endif
  for (int e = 0; e < 4; ++e) o[e] = row[i + e];
}
SPECOPS_HD float relu(float d) { return d > 0.f ? d : 0.f; }

// w(v) = mass(p[v]): a stored row as every pass sums, draws from and takes the argmax of
// (NaN, negative and +inf entries count as 0).
struct MassW {
  const float* p;
  SPECOPS_HD float operator()(int64_t v) const { return mass(p[v]); }
  SPECOPS_HD void quad(int64_t i, float* o) const {
    load4(p, i, o);
    for (int e = 0; e < 4; ++e) o[e] = mass(o[e]);
  }
};
// LANTERN's pool (relaxed acceptance): pool(x) = the sum of w(n_j) over the neighbours n_j of x
// (ids in [0, V) other than x) while their cumulative mass stays <= delta, in float64; w(v) is
// the mass of entry v (a functor as MassW).  0 without neighbours or for x outside [0, V).
template <class W>
SPECOPS_HD float lantern_pool(const W& w, int64_t vocab, int64_t x, const RelaxArgs& relax) {
  if (relax.neighbors == nullptr || x < 0 || x >= vocab) return 0.f;
  const int32_t* nb = relax.neighbors + x * relax.k;
  double cum = 0.0, pool = 0.0;
  for (int64_t j = 0; j < relax.k; ++j) {
    const int64_t n = nb[j];
    const double pn = (n >= 0 && n < vocab && n != x) ? static_cast<double>(w(n)) : 0.0;
    cum += pn;
    if (cum <= relax.delta) pool += pn;
  }
  return static_cast<float>(pool);
}

// ---- GSD grouped acceptance (So et al. 2025; specops/reference/grouped.py) ------------------
// Order the row by the key (w(y), y).  x's window: the w nearest keys below x's and the w nearest
// above, kept in one pass over the row in two sorted arrays of at most kMaxGroupWindow entries
// (GroupWindow: insertion; an entry that does not beat the farthest kept one costs one
// comparison).  A member y joins x's group G iff |w(y) - w(x)| < p_thr (float32) and both are
// image tokens with sum_c (e_x[c] - e_y[c])^2 < d_thr (float64, c in order) (group_member).
// P = sum_G w, Q = sum_G q (float64, in the order x, below nearest first, above nearest first;
// Q = 1 without q).  P = Q = 0 for x outside [0, V).  Accept iff u * Q < P.  One thread runs it
// all in group_sums; the CUDA chain kernel splits the pass over a block (group_block.cuh).
SPECOPS_HD bool key_less(float a, int64_t ia, float b, int64_t ib) {
  return a < b || (a == b && ia < ib);
}

SPECOPS_HD bool group_close(const RelaxArgs& r, int64_t xi, int64_t y) {
  const int64_t yi = y - r.image_start;
  if (yi < 0 || yi >= r.code_rows) return false;
  const float* ex = r.codebook + xi * r.code_dim;
  const float* ey = r.codebook + yi * r.code_dim;
  double d = 0.0;
  for (int64_t c = 0; c < r.code_dim; ++c) {
    const double t = static_cast<double>(ex[c]) - static_cast<double>(ey[c]);
    d += t * t;
  }
  return d < r.d_thr;
}

// x's code row for the distance test (xi) and whether x is an image token with a code (img).
struct GroupCode {
  int64_t xi;
  bool img;
};

SPECOPS_HD GroupCode group_code(const RelaxArgs& r, int64_t x) {
  const int64_t xi = x - r.image_start;
  return GroupCode{xi, r.codebook != nullptr && xi >= 0 && xi < r.code_rows};
}

// Whether window entry (py, y) joins the group of x (w(x) = px; c: x's code row, group_code).
SPECOPS_HD bool group_member(const RelaxArgs& r, float px, const GroupCode& c, float py,
                             int64_t y) {
  const float diff = py - px;
  return (diff < 0.f ? -diff : diff) < r.p_thr && c.img && group_close(r, c.xi, y);
}

// P = w(x) + the members' w and Q = q(x) + the members' q (1 and 0 without q), float64, in
// window order (below nearest first, then above): entry(j, &py, &y) says whether window entry j
// of `count` joins x's group and, if it does, reads it.  group_sums and the block version
// (group_block.cuh) both end here: the same sums, bit for bit.
template <class Entry, class QW>
SPECOPS_HD void group_total(float px, int64_t x, int count, const Entry& entry, const QW& q,
                            bool has_q, float* big_p, float* big_q) {
  double sp = px, sq = has_q ? static_cast<double>(q(x)) : 1.0;
  for (int j = 0; j < count; ++j) {
    float py;
    int64_t y;
    if (!entry(j, &py, &y)) continue;
    sp += py;
    if (has_q) sq += static_cast<double>(q(y));
  }
  *big_p = static_cast<float>(sp);
  *big_q = static_cast<float>(sq);
}

// The n nearest keys below x's (lo, descending: nearest first) and above (hi, ascending) among
// the entries add()ed, x itself left out.
struct GroupWindow {
  float px;
  int64_t x;
  int n;
  float lo_w[kMaxGroupWindow], hi_w[kMaxGroupWindow];
  int64_t lo_id[kMaxGroupWindow], hi_id[kMaxGroupWindow];
  int nlo = 0, nhi = 0;

  SPECOPS_HD GroupWindow(float px_, int64_t x_, int window)
      : px(px_), x(x_), n(window < kMaxGroupWindow ? window : kMaxGroupWindow) {}

  SPECOPS_HD void add(float py, int64_t y) {
    if (y == x) return;
    if (key_less(py, y, px, x)) {
      keep<true>(lo_w, lo_id, &nlo, py, y);
    } else {
      keep<false>(hi_w, hi_id, &nhi, py, y);
    }
  }

  // (a, ia) nearer x than (b, ib) on its side: larger below, smaller above
  template <bool Below>
  SPECOPS_HD static bool nearer(float a, int64_t ia, float b, int64_t ib) {
    return Below ? key_less(b, ib, a, ia) : key_less(a, ia, b, ib);
  }

  // the side's sorted insertion; an entry no nearer than the farthest of n kept: one comparison
  template <bool Below>
  SPECOPS_HD void keep(float* ws, int64_t* ids, int* m, float py, int64_t y) const {
    if (*m == n && !nearer<Below>(py, y, ws[n - 1], ids[n - 1])) return;
    int j = *m < n ? (*m)++ : n - 1;
    for (; j > 0 && nearer<Below>(py, y, ws[j - 1], ids[j - 1]); --j) {
      ws[j] = ws[j - 1];
      ids[j] = ids[j - 1];
    }
    ws[j] = py;
    ids[j] = y;
  }
};

template <class W, class QW>
SPECOPS_HD void group_sums(const W& w, const QW& q, bool has_q, int64_t vocab, int64_t x,
                           const RelaxArgs& r, float* big_p, float* big_q) {
  if (x < 0 || x >= vocab) {
    *big_p = 0.f;
    *big_q = 0.f;
    return;
  }
  GroupWindow g(w(x), x, r.window);
  for (int64_t y = 0; y < vocab; ++y) g.add(w(y), y);
  const GroupCode c = group_code(r, x);
  const auto entry = [&](int j, float* py, int64_t* y) {  // below, then above
    const bool lo = j < g.nlo;
    *py = lo ? g.lo_w[j] : g.hi_w[j - g.nlo];
    *y = lo ? g.lo_id[j] : g.hi_id[j - g.nlo];
    return group_member(r, g.px, c, *py, *y);
  };
  group_total(g.px, x, g.nlo + g.nhi, entry, q, has_q, big_p, big_q);
}

struct ResidW {  // r = max(p - q, 0); q == nullptr: q = one-hot(x) (zero row for x outside [0, V))
  const float* p;
  const float* q;
  int64_t x;
  SPECOPS_HD float operator()(int64_t v) const { return residual_at(p, q, x, v); }
  SPECOPS_HD void quad(int64_t i, float* o) const {
    float qv[4];
    load4(p, i, o);
    if (q) {
      load4(q, i, qv);
      for (int e = 0; e < 4; ++e) qv[e] = mass(qv[e]);
    } else {
      for (int e = 0; e < 4; ++e) qv[e] = i + e == x ? 1.f : 0.f;
    }
    for (int e = 0; e < 4; ++e) o[e] = relu(mass(o[e]) - qv[e]);
  }
};
struct ExclW {  // mass(p) with the ids ex[0..n) set to 0: draw n of the candidates
  const float* p;
  const int32_t* ex;
  int64_t n;
  SPECOPS_HD bool excluded(int64_t v) const {
    for (int64_t i = 0; i < n; ++i)
      if (ex[i] == v) return true;
    return false;
  }
  SPECOPS_HD float operator()(int64_t v) const { return excluded(v) ? 0.f : mass(p[v]); }
  SPECOPS_HD void quad(int64_t i, float* o) const {
    load4(p, i, o);
    for (int e = 0; e < 4; ++e) o[e] = mass(o[e]);
    for (int64_t t = 0; t < n; ++t)
      if (ex[t] >= i && ex[t] < i + 4) o[ex[t] - i] = 0.f;
  }
};

// The SJD tree walk's current rows (specops/jacobi.h): target/draft row of node `cur` after j
// rejected children, recomputed entry by entry from rows p0, q0.
struct WalkRow {
  const float* p0;
  const float* q0;  // nullptr: deterministic drafts (residual against one-hot(x_i))
  int64_t j;
  const int64_t* xs;  // rejected ids x_0..x_{j-1}
  const double* S;    // S_i = 1 / sum max(p_i - q_i, 0), 0 without mass
  const double* T;    // T_i = 1 / sum of q_i without x_i (draft probabilities only), 0 likewise

  // p, q = p_0(v), q_0(v) on entry, p_j(v), q_j(v) on exit, with the reference's roundings.
  SPECOPS_HD void steps(int64_t v, float& p, float& q) const {
    for (int64_t i = 0; i < j; ++i) {
      const int64_t x = xs[i];
      const float r = relu(p - (q0 ? q : (v == x ? 1.f : 0.f)));
      if (S[i] > 0.0) p = scaled(r, S[i]);
      if (q0) q = T[i] > 0.0 ? scaled(v == x ? 0.f : q, T[i]) : 0.f;
    }
  }
  SPECOPS_HD void eval(int64_t v, float* pv, float* qv) const {
    float p = mass(p0[v]), q = q0 ? mass(q0[v]) : 0.f;
    steps(v, p, q);
    *pv = p;
    *qv = q;
  }
  SPECOPS_HD void eval4(int64_t i, float* p, float* q) const {
    load4(p0, i, p);
    if (q0) {
      load4(q0, i, q);
    } else {
      for (int e = 0; e < 4; ++e) q[e] = 0.f;
    }
    for (int e = 0; e < 4; ++e) {
      p[e] = mass(p[e]);
      q[e] = mass(q[e]);
      steps(i + e, p[e], q[e]);
    }
  }
  SPECOPS_HD float p_at(int64_t v) const {
    float p, q;
    eval(v, &p, &q);
    return p;
  }
  SPECOPS_HD float q_at(int64_t v) const {
    float p, q;
    eval(v, &p, &q);
    return q;
  }
};
// The functors hold the row by value: no address of a local on the device.
struct WalkP {
  WalkRow row;
  SPECOPS_HD float operator()(int64_t v) const { return row.p_at(v); }
};
struct WalkQ {
  WalkRow row;
  SPECOPS_HD float operator()(int64_t v) const { return row.q_at(v); }
};
struct WalkPosW {  // p_j (>= 0 and finite after mass): the final draw
  WalkRow row;
  SPECOPS_HD float operator()(int64_t v) const { return relu(row.p_at(v)); }
  SPECOPS_HD void quad(int64_t i, float* o) const {
    float q[4];
    row.eval4(i, o, q);
    for (int e = 0; e < 4; ++e) o[e] = relu(o[e]);
  }
};
// Both terms of a rejection of x at state j: r_v = max(p_j - q_j, 0) and q_j without x.
struct WalkRejectTerms {
  WalkRow row;
  int64_t x;
  SPECOPS_HD void terms(int64_t v, float p, float q, float* r, float* qd) const {
    *r = relu(p - (row.q0 ? q : (v == x ? 1.f : 0.f)));
    *qd = (row.q0 && v != x) ? q : 0.f;
  }
  SPECOPS_HD void operator()(int64_t v, float* r, float* qd) const {
    float p, q;
    row.eval(v, &p, &q);
    terms(v, p, q, r, qd);
  }
  SPECOPS_HD void quad(int64_t i, float* r, float* qd) const {
    float p[4], q[4];
    row.eval4(i, p, q);
    for (int e = 0; e < 4; ++e) terms(i + e, p[e], q[e], r + e, qd + e);
  }
};

// r_v = max(p_j - q_j, 0) of the rejection of x at state j (WalkRejectTerms' first term): what the
// walk's final token is drawn from after a rejection (unnormalised; p_{j+1} is its norm).
struct WalkResidW {
  WalkRejectTerms f;
  SPECOPS_HD float operator()(int64_t v) const {
    float r, qd;
    f(v, &r, &qd);
    return r;
  }
  SPECOPS_HD void quad(int64_t i, float* o) const {
    float qd[4];
    f.quad(i, o, qd);
  }
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

}  // namespace specops
