// Vectorised host passes over a probability row (AVX-512 where the CPU has it, checked at run
// time; the same maths scalar otherwise).  Used by the C++ CPU twins' hot loops; results equal the
// scalar functors' (specops/prob_math.h) entry by entry, and sums differ only by summation order
// (float64, 1e-16 level, as between any two backends).
//   r_v      = max(mass(p_v) - mass(q_v), 0)      (q == nullptr: q = one-hot(x))
#pragma once
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SPECOPS_HOST_AVX512 1
// the AVX-512 subset the host kernels use, enabled per function (the build targets baseline x86-64)
#define SPECOPS_AVX512 __attribute__((target("avx512f,avx512dq")))
#endif

namespace specops {

#if defined(SPECOPS_HOST_AVX512)
// Whether this CPU runs the SPECOPS_AVX512 functions (checked once).
bool have_avx512();
#endif

// sum over v in [lo, hi) of float64(r_v)
double resid_sum_host(const float* p, const float* q, int64_t x, int64_t lo, int64_t hi);
// sum over v != x of float64(mass(q_v)) (the draft row without the rejected token)
double drop_sum_host(const float* q, int64_t x, int64_t n);
// verify_tree's update after a rejected x (in place allowed: wp == p, wq == q):
//   wp_v = float32(float64(r_v) * (1 / s)) when s > 0 (wp untouched otherwise);
//   wq_v = float32(float64(q_v without x) * (1 / sq)) when sq > 0, else 0 (only when wq !=
//   nullptr).
void resid_update_host(const float* p, const float* q, int64_t x, double s, double sq, float* wp,
                       float* wq, int64_t n);
// verify_jacobi's tree walk after j rejected children x_0..x_{j-1} (WalkRow, specops/prob_math.h):
// p_j, q_j recomputed per entry from p0, q0 (q0 != nullptr) with the reference's roundings.
// Entry v has id v, or ids[v] when p0, q0 are compacted lists (compact_union_host; q0 == nullptr,
// one-hot drafts, only with ids == nullptr).
//   walk_terms_sum_host: s = sum max(p_j - q_j, 0), t = sum of q_j without x (WalkRejectTerms)
//   walk_pos_sum_host:   sum over [lo, hi) of max(p_j, 0) (WalkPosW)
void walk_terms_sum_host(const float* p0, const float* q0, const int32_t* ids, int64_t j,
                         const int64_t* xs, const double* S, const double* T, int64_t x, int64_t n,
                         double* s, double* t);
double walk_pos_sum_host(const float* p0, const float* q0, const int32_t* ids, int64_t j,
                         const int64_t* xs, const double* S, const double* T, int64_t lo,
                         int64_t hi);
// The entries of [0, n) with mass(p_v) > 0 or mass(q_v) > 0, in order: idx[j] = v,
// pl[j] = mass(p_v), ql[j] = mass(q_v); returns their count (the arrays hold n + 16 entries).
int64_t compact_union_host(const float* p, const float* q, int64_t n, int32_t* idx, float* pl,
                           float* ql);
// sum over v in [lo, hi) of float64(mass(p_v))
double mass_sum_host(const float* p, int64_t lo, int64_t hi);
// probs_from_logits pass 1 (specops/probs.h): o_v = x_v = l_v / div with l = u + s (c - u) (three
// roundings, -inf if c_v or u_v is -inf; u == nullptr: l = c), -0.0 -> +0.0, NaN -> -inf; returns
// max x.
float logits_to_x_host(const float* c, const float* u, float s, float div, float* o, int64_t n);
// key(x): the order-preserving unsigned key of a float (x < y <=> key(x) < key(y), x not NaN):
// the bits with the sign bit flipped for x >= 0, all bits flipped for x < 0.
// keys[j] = the keys of o whose top 11 bits equal `bin`, in order; returns their count (keys holds
// n + 16 entries).
int64_t keys_in_bin_host(const float* o, int64_t n, uint32_t bin, uint32_t* keys);
// The kept entries of o (key(x) >= tau_k when use_k, and x >= tau_p): idx / xs receive their ids
// and values in order (n + 16 entries each), o is zeroed; returns their count.
int64_t take_kept_host(float* o, int64_t n, bool use_k, uint32_t tau_k, float tau_p, int32_t* idx,
                       float* xs);
// The entries of [lo, hi) with mass(p_v) > thr (thr >= 0), in order: idx[j] = v, pos[j] = p_v;
// returns their count (idx/pos hold hi - lo + 16 entries).
int64_t compact_above_host(const float* p, int64_t lo, int64_t hi, float thr, int32_t* idx,
                           float* pos);
// The entries of [0, n) with mass(p_v) > 0, in order, and their residuals: idx[j] = v,
// pos[j] = mass(p_v), res[j] = r_v; *s = sum over every v of float64(r_v) (r_v = 0 wherever
// mass(p_v) = 0, so the lists hold every positive residual).  One pass over p and q; returns the
// count (idx/pos/res hold n + 16 entries).
int64_t compact_resid_host(const float* p, const float* q, int64_t x, int64_t n, int32_t* idx,
                           float* pos, float* res, double* s);
// Gumbel top-k pre-filter: sel receives the j < m (in order) with 1 - u_j < pos_j * scale
// (float32; sel holds m + 16 entries); returns their count.
int64_t gumbel_survivors_host(const float* u, const float* pos, int64_t m, float scale,
                              int32_t* sel);

}  // namespace specops
