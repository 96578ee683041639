// The host passes of probs_from_logits (csrc/probs.cpp): AVX-512 and scalar versions of
// logits_to_x_host, keys_in_bin_host and take_kept_host (declared in csrc/host_simd.h).
#include "host_simd.h"
#include "host_simd_inl.h"

namespace specops {

namespace {

inline float logits_to_x_scalar(const float* c, const float* u, float s, float div, int64_t v) {
  const float ninf = -__builtin_inff();
  float l = c[v];
  if (u) l = (l == ninf || u[v] == ninf) ? ninf : u[v] + s * (l - u[v]);
  float x = l / div + 0.f;  // -0.0 -> +0.0
  return x != x ? ninf : x;
}

inline uint32_t key_scalar(float x) {
  uint32_t b;
  __builtin_memcpy(&b, &x, 4);
  return b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
}

// Entries [v, n) of keys_in_bin / take_kept (the AVX-512 tails and the scalar fallbacks).
int64_t keys_in_bin_tail(const float* o, int64_t v, int64_t n, uint32_t bin, uint32_t* keys,
                         int64_t m) {
  for (; v < n; ++v) {
    const uint32_t k = key_scalar(o[v]);
    if ((k >> 21) == bin) keys[m++] = k;
  }
  return m;
}

int64_t take_kept_tail(float* o, int64_t v, int64_t n, bool use_k, uint32_t tau_k, float tau_p,
                       int32_t* idx, float* xs, int64_t m) {
  for (; v < n; ++v) {
    const float x = o[v];
    o[v] = 0.f;
    if ((use_k && key_scalar(x) < tau_k) || !(x >= tau_p)) continue;
    idx[m] = static_cast<int32_t>(v);
    xs[m++] = x;
  }
  return m;
}

#if defined(SPECOPS_HOST_AVX512)

using simd::append16;

SPECOPS_AVX512 float logits_to_x_avx512(const float* c, const float* u, float s, float div,
                                        float* o, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff()), sv = _mm512_set1_ps(s),
               dv = _mm512_set1_ps(div), zero = _mm512_setzero_ps();
  __m512 m = ninf;
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) {
    __m512 l = _mm512_loadu_ps(c + v);
    if (u) {
      const __m512 uv = _mm512_loadu_ps(u + v);
      const __mmask16 masked =
          _mm512_cmp_ps_mask(l, ninf, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(uv, ninf, _CMP_EQ_OQ);
      const __m512 comb = _mm512_add_ps(uv, _mm512_mul_ps(sv, _mm512_sub_ps(l, uv)));
      l = _mm512_mask_blend_ps(masked, comb, ninf);
    }
    __m512 x = _mm512_add_ps(_mm512_div_ps(l, dv), zero);  // + 0: -0.0 -> +0.0
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, ninf);
    _mm512_storeu_ps(o + v, x);
    m = _mm512_max_ps(m, x);
  }
  float mm = _mm512_reduce_max_ps(m);
  for (; v < n; ++v) {
    const float x = logits_to_x_scalar(c, u, s, div, v);
    o[v] = x;
    mm = x > mm ? x : mm;
  }
  return mm;
}

SPECOPS_AVX512 inline __m512i key16(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  return _mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi32(b, 31),
                                             _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

SPECOPS_AVX512 int64_t keys_in_bin_avx512(const float* o, int64_t n, uint32_t bin, uint32_t* keys) {
  const __m512i bv = _mm512_set1_epi32(static_cast<int>(bin));
  int64_t m = 0, v = 0;
  for (; v + 16 <= n; v += 16) {
    const __m512i k = key16(_mm512_loadu_ps(o + v));
    const __mmask16 in = _mm512_cmpeq_epi32_mask(_mm512_srli_epi32(k, 21), bv);
    _mm512_storeu_si512(keys + m, _mm512_maskz_compress_epi32(in, k));  // register compress
    m += __builtin_popcount(in);
  }
  return keys_in_bin_tail(o, v, n, bin, keys, m);
}

SPECOPS_AVX512 int64_t take_kept_avx512(float* o, int64_t n, bool use_k, uint32_t tau_k,
                                        float tau_p, int32_t* idx, float* xs) {
  const __m512i tk = _mm512_set1_epi32(static_cast<int>(tau_k));
  const __m512 tp = _mm512_set1_ps(tau_p);
  int64_t m = 0, v = 0;
  for (; v + 16 <= n; v += 16) {
    const __m512 x = _mm512_loadu_ps(o + v);
    __mmask16 keep = _mm512_cmp_ps_mask(x, tp, _CMP_GE_OQ);
    if (use_k) keep &= _mm512_cmp_epu32_mask(key16(x), tk, _MM_CMPINT_NLT);
    _mm512_storeu_ps(o + v, _mm512_setzero_ps());
    m += append16(keep, x, v, xs + m, idx + m);
  }
  return take_kept_tail(o, v, n, use_k, tau_k, tau_p, idx, xs, m);
}

#endif

}  // namespace

float logits_to_x_host(const float* c, const float* u, float s, float div, float* o, int64_t n) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return logits_to_x_avx512(c, u, s, div, o, n);
#endif
  float m = -__builtin_inff();
  for (int64_t v = 0; v < n; ++v) {
    const float x = logits_to_x_scalar(c, u, s, div, v);
    o[v] = x;
    m = x > m ? x : m;
  }
  return m;
}

int64_t keys_in_bin_host(const float* o, int64_t n, uint32_t bin, uint32_t* keys) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return keys_in_bin_avx512(o, n, bin, keys);
#endif
  return keys_in_bin_tail(o, 0, n, bin, keys, 0);
}

int64_t take_kept_host(float* o, int64_t n, bool use_k, uint32_t tau_k, float tau_p, int32_t* idx,
                       float* xs) {
#if defined(SPECOPS_HOST_AVX512)
  if (have_avx512()) return take_kept_avx512(o, n, use_k, tau_k, tau_p, idx, xs);
#endif
  return take_kept_tail(o, 0, n, use_k, tau_k, tau_p, idx, xs, 0);
}

}  // namespace specops
