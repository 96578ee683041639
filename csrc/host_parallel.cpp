// Host threading (OpenMP when the build has it) and the block Philox of csrc/host_parallel.h.
#include "host_parallel.h"

#include <atomic>
#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SPECOPS_HOST_AVX512 1
#endif

namespace specops {

namespace {
std::atomic<int> g_threads{1};
}  // namespace

int host_threads() { return g_threads.load(std::memory_order_relaxed); }
void set_host_threads(int n) { g_threads.store(n < 1 ? 1 : n, std::memory_order_relaxed); }

void parallel_run(int64_t n, void (*call)(const void*, int64_t), const void* ctx) {
#if defined(_OPENMP)
  const int t = static_cast<int>(host_threads() < n ? host_threads() : n);
#pragma omp parallel for num_threads(t) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) call(ctx, i);
#else
  for (int64_t i = 0; i < n; ++i) call(ctx, i);
#endif
}

namespace {

void uniforms_scalar(const RngArgs& rng, int64_t row, int64_t draw0, const int32_t* idx, int64_t n,
                     float* u) {
  for (int64_t i = 0; i < n; ++i) u[i] = rng.uniform(row, draw0 + idx[i]);
}

#if defined(SPECOPS_HOST_AVX512)
// Philox-4x32-10 on 8 counters per vector, each 32-bit word in the low half of a 64-bit lane (so
// _mm512_mul_epu32 gives the full 32 x 32 -> 64 product); two vectors in flight.  Counter
// (draw, row, offset lo, offset hi), key (seed lo, seed hi): word 0 only, as philox_uniform.
__attribute__((target("avx512f,avx512dq"))) void uniforms_avx512(const RngArgs& rng, int64_t row,
                                                                 int64_t draw0, const int32_t* idx,
                                                                 int64_t n, float* u) {
  const uint64_t seed = rng.seed_of(row), off = rng.offset();
  const __m512i lo32 = _mm512_set1_epi64(0xffffffffll);
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53ll), m1 = _mm512_set1_epi64(0xCD9E8D57ll);
  const __m512i c1i = _mm512_set1_epi64(static_cast<uint32_t>(row));
  const __m512i c2i = _mm512_set1_epi64(static_cast<uint32_t>(off));
  const __m512i c3i = _mm512_set1_epi64(static_cast<uint32_t>(off >> 32));
  const __m512i d0 = _mm512_set1_epi64(draw0);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i a0 = _mm512_and_si512(
        _mm512_add_epi64(d0, _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i*)(idx + i)))),
        lo32);
    __m512i b0 = _mm512_and_si512(
        _mm512_add_epi64(d0,
                         _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i*)(idx + i + 8)))),
        lo32);
    __m512i a1 = c1i, a2 = c2i, a3 = c3i, b1 = c1i, b2 = c2i, b3 = c3i;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      const __m512i kk0 = _mm512_set1_epi64(k0), kk1 = _mm512_set1_epi64(k1);
      const __m512i pa0 = _mm512_mul_epu32(m0, a0), pa1 = _mm512_mul_epu32(m1, a2);
      const __m512i pb0 = _mm512_mul_epu32(m0, b0), pb1 = _mm512_mul_epu32(m1, b2);
      // n0 = hi1 ^ c1 ^ k0, c1 = lo1, n2 = hi0 ^ c3 ^ k1, c3 = lo0
      a0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pa1, 32), a1), kk0);
      a2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pa0, 32), a3), kk1);
      a1 = _mm512_and_si512(pa1, lo32);
      a3 = _mm512_and_si512(pa0, lo32);
      b0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pb1, 32), b1), kk0);
      b2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pb0, 32), b3), kk1);
      b1 = _mm512_and_si512(pb1, lo32);
      b3 = _mm512_and_si512(pb0, lo32);
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // u = ((word0 >> 9) + 0.5) * 2^-23, exact in float32
    const __m512 half = _mm512_set1_ps(0.5f), scale = _mm512_set1_ps(1.1920928955078125e-07f);
    const __m256 ua = _mm512_cvtepi64_ps(_mm512_srli_epi64(a0, 9));
    const __m256 ub = _mm512_cvtepi64_ps(_mm512_srli_epi64(b0, 9));
    const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(ua), ub, 1);
    _mm512_storeu_ps(u + i, _mm512_mul_ps(_mm512_add_ps(v, half), scale));
  }
  uniforms_scalar(rng, row, draw0, idx + i, n - i, u + i);
}

bool have_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return ok;
}
#endif

}  // namespace

void uniforms_at(const RngArgs& rng, int64_t row, int64_t draw0, const int32_t* idx, int64_t n,
                 float* u) {
#if defined(SPECOPS_HOST_AVX512)
  if (rng.uniforms == nullptr && have_avx512()) return uniforms_avx512(rng, row, draw0, idx, n, u);
#endif
  uniforms_scalar(rng, row, draw0, idx, n, u);
}

}  // namespace specops
