// AVX-512 and scalar versions of csrc/host_simd.h.
#include "host_simd.h"

#include "host_simd_inl.h"
#include "specops/prob_math.h"  // mass, clamp0, residual_at, scaled, WalkRow, host sums

namespace specops {

namespace {

// Entries [v, n) of the walk passes over rows p0, q0 (or their compacted lists, ids != nullptr):
// each entry's p_j, q_j through WalkRow::steps at its id.
void walk_terms_tail(const float* p0, const float* q0, const int32_t* ids, int64_t j,
                     const int64_t* xs, const double* S, const double* T, int64_t x, int64_t v,
                     int64_t n, double* s1, double* s2) {
  const WalkRejectTerms f{WalkRow{p0, q0, j, xs, S, T}, x};
  for (; v < n; ++v) {
    const int64_t id = ids ? ids[v] : v;
    float p = mass(p0[v]), q = mass(q0[v]), r, qd;
    f.row.steps(id, p, q);
    f.terms(id, p, q, &r, &qd);
    *s1 += static_cast<double>(r);
    *s2 += static_cast<double>(qd);
  }
}

double walk_pos_tail(const float* p0, const float* q0, const int32_t* ids, int64_t j,
                     const int64_t* xs, const double* S, const double* T, int64_t v, int64_t hi) {
  const WalkRow row{p0, q0, j, xs, S, T};
  double s = 0.0;
  for (; v < hi; ++v) {
    float p = mass(p0[v]), q = mass(q0[v]);
    row.steps(ids ? ids[v] : v, p, q);
    s += static_cast<double>(clamp0(p));
  }
  return s;
}

// Entries [v, n) of compact_resid_host, written from idx/pos/res[0] (their residuals added to
// *s); returns their count.
int64_t compact_resid_tail(const float* p, const float* q, int64_t x, int64_t v, int64_t n,
                           int32_t* idx, float* pos, float* res, double* s) {
  int64_t m = 0;
  for (; v < n; ++v) {  // branch-free compaction
    const float pv = mass(p[v]), r = residual_at(p, q, x, v);
    *s += static_cast<double>(r);
    idx[m] = static_cast<int32_t>(v);
    pos[m] = pv;
    res[m] = r;
    m += pv > 0.f ? 1 : 0;
  }
  return m;
}

// Entries [v, n) of compact_union_host, written from idx/pl/ql[0]; returns their count.
int64_t compact_union_tail(const float* p, const float* q, int64_t v, int64_t n, int32_t* idx,
                           float* pl, float* ql) {
  int64_t m = 0;
  for (; v < n; ++v) {  // branch-free compaction
    const float pv = mass(p[v]), qv = mass(q[v]);
    idx[m] = static_cast<int32_t>(v);
    pl[m] = pv;
    ql[m] = qv;
    m += (pv > 0.f || qv > 0.f) ? 1 : 0;
  }
  return m;
}

#if defined(SPECOPS_HOST_AVX512)

using simd::append16;
using simd::append_ids16;
using simd::mass16;

// r for 16 entries at v (q rows only; one-hot drafts are fixed up by the caller)
SPECOPS_AVX512 inline __m512 resid16(const float* p, const float* q, int64_t v) {
  const __m512 d = _mm512_sub_ps(mass16(_mm512_loadu_ps(p + v)), mass16(_mm512_loadu_ps(q + v)));
  return _mm512_max_ps(d, _mm512_setzero_ps());  // as clamp0: +0 for d <= 0
}

// lo += float64(r[0..8)), hi += float64(r[8..16)): two independent add chains (one chain per
// 16 entries would bound a pass at 8 entries per add latency)
SPECOPS_AVX512 inline void add_f32x16(__m512d& lo, __m512d& hi, __m512 r) {
  lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(r)));
  hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(r, 1)));
}

SPECOPS_AVX512 inline double reduce4(__m512d a0, __m512d a1, __m512d a2, __m512d a3) {
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

SPECOPS_AVX512 double resid_sum_avx512(const float* p, const float* q, int64_t lo, int64_t hi) {
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t v = lo;
  for (; v + 32 <= hi; v += 32) {
    add_f32x16(a0, a1, resid16(p, q, v));
    add_f32x16(a2, a3, resid16(p, q, v + 16));
  }
  double s = reduce4(a0, a1, a2, a3);
  for (; v < hi; ++v) s += static_cast<double>(residual_at(p, q, -1, v));
  return s;
}

SPECOPS_AVX512 double mass_sum_avx512(const float* p, int64_t lo, int64_t hi) {
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t v = lo;
  for (; v + 32 <= hi; v += 32) {
    add_f32x16(a0, a1, mass16(_mm512_loadu_ps(p + v)));
    add_f32x16(a2, a3, mass16(_mm512_loadu_ps(p + v + 16)));
  }
  double s = reduce4(a0, a1, a2, a3);
  for (; v < hi; ++v) s += static_cast<double>(mass(p[v]));
  return s;
}

SPECOPS_AVX512 double drop_sum_avx512(const float* q, int64_t x, int64_t n) {
  const __m512i step = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512d a0 = _mm512_setzero_pd(), a1 = a0;
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) {
    __m512 m = mass16(_mm512_loadu_ps(q + v));
    if (x >= v && x < v + 16) {  // zero entry x
      const __mmask16 is_x = _mm512_cmpeq_epi32_mask(step, _mm512_set1_epi32(int(x - v)));
      m = _mm512_maskz_mov_ps(static_cast<__mmask16>(~is_x), m);
    }
    add_f32x16(a0, a1, m);
  }
  double t = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  for (; v < n; ++v) t += v == x ? 0.0 : static_cast<double>(mass(q[v]));
  return t;
}

// float32(float64(r) * inv) for 16 entries (scaled)
SPECOPS_AVX512 inline __m512 scaled16(__m512 r, __m512d inv) {
  const __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(r)), inv));
  const __m256 hi =
      _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(r, 1)), inv));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

SPECOPS_AVX512 void resid_update_avx512(const float* p, const float* q, int64_t x, double s,
                                        double sq, float* wp, float* wq, int64_t n) {
  const __m512i step = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const double ip = s > 0.0 ? inverse_of(s) : 0.0, iq = sq > 0.0 ? inverse_of(sq) : 0.0;
  const __m512d sv = _mm512_set1_pd(ip), sqv = _mm512_set1_pd(iq);
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) {
    const __m512 mq = mass16(_mm512_loadu_ps(q + v));
    const __m512 r =
        _mm512_max_ps(_mm512_sub_ps(mass16(_mm512_loadu_ps(p + v)), mq), _mm512_setzero_ps());
    __m512 d = mq;
    if (x >= v && x < v + 16)
      d = _mm512_maskz_mov_ps(
          static_cast<__mmask16>(~_mm512_cmpeq_epi32_mask(step, _mm512_set1_epi32(int(x - v)))), d);
    if (s > 0.0) _mm512_storeu_ps(wp + v, scaled16(r, sv));
    if (wq) _mm512_storeu_ps(wq + v, sq > 0.0 ? scaled16(d, sqv) : _mm512_setzero_ps());
  }
  for (; v < n; ++v) {
    const float r = residual_at(p, q, x, v);
    const float d = v == x ? 0.f : mass(q[v]);
    if (s > 0.0) wp[v] = scaled(r, ip);
    if (wq) wq[v] = sq > 0.0 ? scaled(d, iq) : 0.f;
  }
}

// The ids of entries v..v+15: ids[v..v+16) of a compacted list, or v..v+15 (ids == nullptr).
SPECOPS_AVX512 inline __m512i ids16(const int32_t* ids, int64_t v) {
  const __m512i step = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return ids ? _mm512_loadu_si512(ids + v) : _mm512_add_epi32(_mm512_set1_epi32(int32_t(v)), step);
}

// The lanes whose id is not x (an x outside [0, 2^31) matches none).
SPECOPS_AVX512 inline __mmask16 not_id16(__m512i id, int64_t x) {
  if (x < 0 || x > INT32_MAX) return 0xffff;
  return static_cast<__mmask16>(~_mm512_cmpeq_epi32_mask(id, _mm512_set1_epi32(int32_t(x))));
}

// p_j, q_j of 16 entries from v with ids `id` (WalkRow::steps): for each earlier rejection i
//   p <- norm(max(p - q, 0)) when S_i > 0;  q <- norm(q without x_i) when T_i > 0, else 0
SPECOPS_AVX512 inline void walk16(const float* p0, const float* q0, __m512i id, int64_t j,
                                  const int64_t* xs, const double* S, const double* T, int64_t v,
                                  __m512* P, __m512* Q) {
  __m512 p = mass16(_mm512_loadu_ps(p0 + v)), q = mass16(_mm512_loadu_ps(q0 + v));
  for (int64_t i = 0; i < j; ++i) {
    const __m512 r = _mm512_max_ps(_mm512_sub_ps(p, q), _mm512_setzero_ps());
    if (S[i] > 0.0) p = scaled16(r, _mm512_set1_pd(S[i]));  // S, T: reciprocal sums
    if (T[i] > 0.0) {
      q = scaled16(_mm512_maskz_mov_ps(not_id16(id, xs[i]), q), _mm512_set1_pd(T[i]));
    } else {
      q = _mm512_setzero_ps();
    }
  }
  *P = p;
  *Q = q;
}

SPECOPS_AVX512 void walk_terms_avx512(const float* p0, const float* q0, const int32_t* ids,
                                      int64_t j, const int64_t* xs, const double* S,
                                      const double* T, int64_t x, int64_t n, double* s, double* t) {
  __m512d as0 = _mm512_setzero_pd(), as1 = as0, at0 = as0, at1 = as0;
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) {
    const __m512i id = ids16(ids, v);
    __m512 p, q;
    walk16(p0, q0, id, j, xs, S, T, v, &p, &q);
    add_f32x16(as0, as1, _mm512_max_ps(_mm512_sub_ps(p, q), _mm512_setzero_ps()));
    add_f32x16(at0, at1, _mm512_maskz_mov_ps(not_id16(id, x), q));
  }
  double s1 = _mm512_reduce_add_pd(_mm512_add_pd(as0, as1));
  double s2 = _mm512_reduce_add_pd(_mm512_add_pd(at0, at1));
  walk_terms_tail(p0, q0, ids, j, xs, S, T, x, v, n, &s1, &s2);
  *s = s1;
  *t = s2;
}

SPECOPS_AVX512 double walk_pos_avx512(const float* p0, const float* q0, const int32_t* ids,
                                      int64_t j, const int64_t* xs, const double* S,
                                      const double* T, int64_t lo, int64_t hi) {
  __m512d a0 = _mm512_setzero_pd(), a1 = a0;
  int64_t v = lo;
  for (; v + 16 <= hi; v += 16) {
    __m512 p, q;
    walk16(p0, q0, ids16(ids, v), j, xs, S, T, v, &p, &q);
    add_f32x16(a0, a1, _mm512_max_ps(p, _mm512_setzero_ps()));
  }
  const double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  return s + walk_pos_tail(p0, q0, ids, j, xs, S, T, v, hi);
}

SPECOPS_AVX512 int64_t compact_union_avx512(const float* p, const float* q, int64_t n, int32_t* idx,
                                            float* pl, float* ql) {
  int64_t m = 0, v = 0;
  for (; v + 16 <= n; v += 16) {
    const __m512 pv = mass16(_mm512_loadu_ps(p + v)), qv = mass16(_mm512_loadu_ps(q + v));
    const __mmask16 ok = _mm512_cmp_ps_mask(pv, _mm512_setzero_ps(), _CMP_GT_OQ) |
                         _mm512_cmp_ps_mask(qv, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_storeu_ps(ql + m, _mm512_maskz_compress_ps(ok, qv));
    m += append16(ok, pv, v, pl + m, idx + m);
  }
  return m + compact_union_tail(p, q, v, n, idx + m, pl + m, ql + m);
}

SPECOPS_AVX512 int64_t compact_resid_avx512(const float* p, const float* q, int64_t x, int64_t n,
                                            int32_t* idx, float* pos, float* res, double* s) {
  const __m512i step = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512d a0 = _mm512_setzero_pd(), a1 = a0;
  int64_t m = 0, v = 0;
  for (; v + 16 <= n; v += 16) {
    const __m512 pv = mass16(_mm512_loadu_ps(p + v));
    __m512 qv;
    if (q) {
      qv = mass16(_mm512_loadu_ps(q + v));
    } else {  // one-hot(x)
      const __mmask16 is_x =
          (x >= v && x < v + 16) ? _mm512_cmpeq_epi32_mask(step, _mm512_set1_epi32(int(x - v))) : 0;
      qv = _mm512_maskz_mov_ps(is_x, _mm512_set1_ps(1.f));
    }
    const __m512 r = _mm512_max_ps(_mm512_sub_ps(pv, qv), _mm512_setzero_ps());
    add_f32x16(a0, a1, r);
    const __mmask16 ok = _mm512_cmp_ps_mask(pv, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_storeu_ps(res + m, _mm512_maskz_compress_ps(ok, r));
    m += append16(ok, pv, v, pos + m, idx + m);
  }
  *s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  return m + compact_resid_tail(p, q, x, v, n, idx + m, pos + m, res + m, s);
}

SPECOPS_AVX512 int64_t survivors_avx512(const float* u, const float* pos, int64_t m, float scale,
                                        int32_t* sel) {
  const __m512 one = _mm512_set1_ps(1.f), sv = _mm512_set1_ps(scale);
  int64_t n = 0, j = 0;
  for (; j + 16 <= m; j += 16) {
    const __mmask16 ok =
        _mm512_cmp_ps_mask(_mm512_sub_ps(one, _mm512_loadu_ps(u + j)),
                           _mm512_mul_ps(_mm512_loadu_ps(pos + j), sv), _CMP_LT_OQ);
    n += append_ids16(ok, j, sel + n);
  }
  for (; j < m; ++j) {
    sel[n] = static_cast<int32_t>(j);
    n += (1.f - u[j]) < pos[j] * scale ? 1 : 0;
  }
  return n;
}

SPECOPS_AVX512 int64_t compact_avx512(const float* p, int64_t lo, int64_t hi, float thr,
                                      int32_t* idx, float* pos) {
  int64_t m = 0, v = lo;
  for (; v + 16 <= hi; v += 16) {
    const __m512 x = _mm512_loadu_ps(p + v);
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(thr), _CMP_GT_OQ) &
                         _mm512_cmp_ps_mask(x, _mm512_set1_ps(3.402823466e+38f), _CMP_LE_OQ);
    m += append16(ok, x, v, pos + m, idx + m);  // within idx/pos: m + 16 <= v + 16 - lo
  }
  for (; v < hi; ++v) {
    const float pv = mass(p[v]);
    idx[m] = static_cast<int32_t>(v);
    pos[m] = pv;
    m += pv > thr ? 1 : 0;
  }
  return m;
}
#endif

}  // namespace

double resid_sum_host(const float* p, const float* q, int64_t x, int64_t lo, int64_t hi) {
#if defined(SPECOPS_HOST_AVX512)
  if (q != nullptr && have_avx512()) return resid_sum_avx512(p, q, lo, hi);
#endif
  double s0 = 0.0, s1 = 0.0;
  int64_t v = lo;
  for (; v + 2 <= hi; v += 2) {
    s0 += static_cast<double>(residual_at(p, q, x, v));
    s1 += static_cast<double>(residual_at(p, q, x, v + 1));
  }
  for (; v < hi; ++v) s0 += static_cast<double>(residual_at(p, q, x, v));
  return s0 + s1;
}

double drop_sum_host(const float* q, int64_t x, int64_t n) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return drop_sum_avx512(q, x, n);
#endif
  return sum_range_host([q, x](int64_t v) { return v == x ? 0.f : mass(q[v]); }, 0, n);
}

void resid_update_host(const float* p, const float* q, int64_t x, double s, double sq, float* wp,
                       float* wq, int64_t n) {
#if defined(SPECOPS_HOST_AVX512)
  if (q != nullptr && have_avx512()) return resid_update_avx512(p, q, x, s, sq, wp, wq, n);
#endif
  const double ip = s > 0.0 ? inverse_of(s) : 0.0, iq = sq > 0.0 ? inverse_of(sq) : 0.0;
  for (int64_t v = 0; v < n; ++v) {
    const float r = residual_at(p, q, x, v);
    if (s > 0.0) wp[v] = scaled(r, ip);
    if (wq) wq[v] = sq > 0.0 ? scaled(v == x ? 0.f : mass(q[v]), iq) : 0.f;
  }
}

void walk_terms_sum_host(const float* p0, const float* q0, const int32_t* ids, int64_t j,
                         const int64_t* xs, const double* S, const double* T, int64_t x, int64_t n,
                         double* s, double* t) {
  if (q0 == nullptr)  // deterministic drafts (full rows only): the generic pass
    return sum2_range_host(WalkRejectTerms{WalkRow{p0, q0, j, xs, S, T}, x}, 0, n, s, t);
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return walk_terms_avx512(p0, q0, ids, j, xs, S, T, x, n, s, t);
#endif
  *s = *t = 0.0;
  walk_terms_tail(p0, q0, ids, j, xs, S, T, x, 0, n, s, t);
}

double walk_pos_sum_host(const float* p0, const float* q0, const int32_t* ids, int64_t j,
                         const int64_t* xs, const double* S, const double* T, int64_t lo,
                         int64_t hi) {
  if (q0 == nullptr) return sum_range_host(WalkPosW{WalkRow{p0, q0, j, xs, S, T}}, lo, hi);
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return walk_pos_avx512(p0, q0, ids, j, xs, S, T, lo, hi);
#endif
  return walk_pos_tail(p0, q0, ids, j, xs, S, T, lo, hi);
}

int64_t compact_union_host(const float* p, const float* q, int64_t n, int32_t* idx, float* pl,
                           float* ql) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return compact_union_avx512(p, q, n, idx, pl, ql);
#endif
  return compact_union_tail(p, q, 0, n, idx, pl, ql);
}

double mass_sum_host(const float* p, int64_t lo, int64_t hi) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return mass_sum_avx512(p, lo, hi);
#endif
  return sum_range_host(MassW{p}, lo, hi);
}

int64_t compact_above_host(const float* p, int64_t lo, int64_t hi, float thr, int32_t* idx,
                           float* pos) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return compact_avx512(p, lo, hi, thr, idx, pos);
#endif
  int64_t m = 0;
  for (int64_t v = lo; v < hi; ++v) {  // branch-free compaction
    const float pv = mass(p[v]);
    idx[m] = static_cast<int32_t>(v);
    pos[m] = pv;
    m += pv > thr ? 1 : 0;
  }
  return m;
}

int64_t compact_resid_host(const float* p, const float* q, int64_t x, int64_t n, int32_t* idx,
                           float* pos, float* res, double* s) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return compact_resid_avx512(p, q, x, n, idx, pos, res, s);
#endif
  *s = 0.0;
  return compact_resid_tail(p, q, x, 0, n, idx, pos, res, s);
}

int64_t gumbel_survivors_host(const float* u, const float* pos, int64_t m, float scale,
                              int32_t* sel) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return survivors_avx512(u, pos, m, scale, sel);
#endif
  int64_t n = 0;
  for (int64_t j = 0; j < m; ++j) {
    sel[n] = static_cast<int32_t>(j);
    n += (1.f - u[j]) < pos[j] * scale ? 1 : 0;
  }
  return n;
}

#if defined(SPECOPS_HOST_AVX512)
bool have_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return ok;
}
#endif

}  // namespace specops
