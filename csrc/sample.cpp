// C++ CPU twins of sample and sample_without_replacement: rows in parallel on host_threads()
// threads (csrc/host_parallel.h), each one's result independent of it.
#include "specops/sample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "host_parallel.h"
#include "host_simd.h"
#include "specops/prob_math.h"  // draw_host_chunked

namespace specops {

void sample_host(const float* probs, int64_t rows, int64_t vocab, int64_t row_stride, RngArgs rng,
                 int32_t* out) {
  parallel_for(rows, vocab, [&](int64_t r) {  // rows are independent
    const float* p = probs + r * row_stride;
    out[r] = draw_host_chunked(MassW{p}, vocab, rng.uniform(r, 0),
                               [p](int64_t lo, int64_t hi) { return mass_sum_host(p, lo, hi); });
  });
}

// Gumbel top-k: keep the k best (key, id) seen so far, sorted best first; ids are visited in
// increasing order, so an equal key never displaces an earlier id.
//
// Once k keys are held, with kappa the k-th, a later entry v gets in only if its key beats kappa:
//   log p - log(-log u) > kappa  <=>  -log u < p e^-kappa  =>  1 - u < p e^-kappa
// (1 - u <= -log u).  With scale = e^-kappa (1 + 1e-3) (the margin covers the float32 rounding of
// the computed key and of these tests; 1 - u is exact on the 2^-23 grid):
//   * an entry with 1 - u >= p scale is skipped without its two logs;
//   * Philox uniforms have 1 - u >= 2^-24, so an entry with p scale <= 2^-24 is skipped without
//     drawing its uniform at all (not with caller-supplied uniforms, which may come closer to 1).
// Neither skip drops an entry the full computation would keep: the same top-k, the same stream.
// Per block of the vocabulary: compaction of the entries above the threshold, their uniforms
// (uniforms_at: vectorised Philox), a vectorised pre-filter, then the exact test and the logs.
void gumbel_topk_host(const float* p, int64_t vocab, const RngArgs& rng, int64_t row, int64_t draw0,
                      int64_t k, int32_t* out) {
  const int64_t kk = std::min<int64_t>(k, vocab);
  KeyId best_stack[64];
  std::vector<KeyId> best_heap;
  KeyId* best = best_stack;
  if (kk > 64) {
    best_heap.resize(kk);
    best = best_heap.data();
  }
  constexpr int64_t kBlock = 512;
  int32_t idx[kBlock + 16], sel[kBlock + 16];
  float pos[kBlock + 16], u[kBlock + 16];
  int64_t n = 0;
  double scale = HUGE_VAL;  // e^-kappa (1 + 1e-3) once k keys are held
  for (int64_t base = 0; base < vocab && kk > 0; base += kBlock) {
    const int64_t hi = std::min(base + kBlock, vocab);
    float thr = 0.f;  // entries with mass(p) <= thr are never drawn
    if (n == kk && rng.uniforms == nullptr) {
      // p <= thr implies p scale <= 2^-24 (thr rounded down)
      thr = std::nextafter(static_cast<float>(0x1p-24 / scale), 0.f);
      thr = thr > 0.f ? thr : 0.f;
    }
    const int64_t m = compact_above_host(p, base, hi, thr, idx, pos);
    uniforms_at(rng, row, draw0, idx, m, u);
    if (rng.uniforms != nullptr)  // Philox's own are in range already
      for (int64_t i = 0; i < m; ++i) u[i] = gumbel_uniform(u[i]);
    int64_t ns = m;
    if (n == kk) {  // vectorised pre-filter at this block's scale (it only shrinks later)
      const float sf = std::nextafter(static_cast<float>(scale * (1.0 + 1e-6)), HUGE_VALF);
      ns = gumbel_survivors_host(u, pos, m, sf, sel);
    } else {
      for (int64_t i = 0; i < m; ++i) sel[i] = static_cast<int32_t>(i);
    }
    for (int64_t t = 0; t < ns; ++t) {
      const int64_t i = sel[t];
      if (n == kk && !(static_cast<double>(1.f - u[i]) < static_cast<double>(pos[i]) * scale))
        continue;
      const KeyId e{std::log(pos[i]) - std::log(-std::log(u[i])), idx[i]};
      if (n == kk && !key_before(e, best[kk - 1])) continue;
      int64_t j = n < kk ? n++ : kk - 1;
      while (j > 0 && key_before(e, best[j - 1])) {
        best[j] = best[j - 1];
        --j;
      }
      best[j] = e;
      if (n == kk) scale = std::exp(-static_cast<double>(best[kk - 1].key)) * (1.0 + 1e-3);
    }
  }
  for (int64_t j = 0; j < k; ++j) out[j] = j < n ? best[j].id : -1;
}

void sample_wor_host(const SampleWorArgs& a) {
  parallel_for(a.rows, a.vocab, [&](int64_t r) {
    gumbel_topk_host(a.probs + r * a.row_stride, a.vocab, a.rng, r, 0, a.k, a.out + r * a.k);
  });
}

}  // namespace specops
