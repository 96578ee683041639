// C++ CPU twin of probs_from_logits (semantics: specops/probs.h, specops/reference/probs.py).
// Rows run on host_threads() threads; each row is three passes over the vocabulary:
//   1. x = cfg(c, u) / T written to the output row, max / arg-max, and (top-k) a histogram of the
//      top 11 bits of the order-preserving key of x;
//   2. tau_k: the bin holding the k-th largest key, its keys gathered and nth_element'd (no
//      sort); top-p gathers the kept (x, w) pairs and finds tau_p by quickselect on the mass;
//   3. p = w / sum_kept w.
#include "specops/probs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "host_parallel.h"
#include "host_simd.h"

namespace specops {

namespace {

constexpr float kGreedyT = 1e-5f;  // specops.reference.probs.GREEDY_TEMPERATURE
constexpr int kBins = 2048;        // top 11 bits of the key

// x < y  <=>  key(x) < key(y) as unsigned (x not NaN; -0.0 was folded into +0.0).  Branch-free:
// the sign of x is random across a row, a branch on it mispredicts half the time.
inline uint32_t key_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  const uint32_t neg = static_cast<uint32_t>(static_cast<int32_t>(b) >> 31);  // all ones if x < 0
  return b ^ (neg | 0x80000000u);
}

struct Scratch {
  std::vector<uint32_t> keys;
  std::vector<std::pair<float, float>> kept;  // (x, w)
  std::vector<int32_t> idx;                   // kept ids
  std::vector<float> xs;                      // kept x, then w
};

// tau_p = max{x_j : M(x_j) >= target}, M(t) = sum of w over x >= t: three-way quickselect on x
// with the mass above the current range carried in `above` (float64).  Falls back to the smallest
// x (keep all) if rounding leaves the total below the target.  The caller's target is
// max(p * Z, 1e-30) (every backend's rule): p at or below 0 (a float32 p that rounded to 0
// included) keeps the arg-max ties, as any target in (0, 1] does (w_max = 1).
float top_p_threshold(std::pair<float, float>* e, int64_t n, double target) {
  double above = 0.0;
  int64_t lo = 0, hi = n;
  float smallest = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) smallest = std::min(smallest, e[i].first);
  while (lo < hi) {
    const float a = e[lo].first, b = e[lo + (hi - lo) / 2].first, c = e[hi - 1].first;
    const float pivot = std::max(std::min(a, b), std::min(std::max(a, b), c));  // median of 3
    // [lo, gt): x > pivot, [gt, lt): x == pivot, [lt, hi): x < pivot (Dutch flag)
    int64_t gt = lo, i = lo, lt = hi;
    double m_gt = 0.0, m_eq = 0.0;
    while (i < lt) {
      const float x = e[i].first;
      if (x > pivot) {
        m_gt += e[i].second;
        std::swap(e[i++], e[gt++]);
      } else if (x < pivot) {
        std::swap(e[i], e[--lt]);
      } else {
        m_eq += e[i++].second;
      }
    }
    if (above + m_gt >= target) {
      hi = gt;  // tau_p > pivot
    } else if (above + m_gt + m_eq >= target) {
      return pivot;
    } else {
      above += m_gt + m_eq;
      lo = lt;
    }
  }
  return smallest;
}

void one_row(const ProbsArgs& a, int64_t r, Scratch& sc) {
  const int64_t V = a.vocab, b = r / a.rows_per_req;
  const float* c = a.cond + r * a.cond_s0;
  const float* u = a.uncond ? a.uncond + r * a.uncond_s0 : nullptr;
  float* o = a.out + r * V;
  float T = a.temperature ? a.temperature[b * a.temperature_s] : a.temperature_v;
  if (std::isnan(T)) T = 1.f;
  const bool greedy = T < kGreedyT;
  const float div = greedy ? 1.f : T;
  const float s = a.cfg ? a.cfg[b * a.cfg_s] : a.cfg_v;
  const bool cfg = u != nullptr && !std::isnan(s);
  const int64_t k = a.top_k ? a.top_k[b * a.top_k_s] : a.top_k_v;
  const bool use_k = !greedy && k >= 1 && k < V;
  const float pp = a.top_p ? a.top_p[b * a.top_p_s] : a.top_p_v;
  const bool use_p = !greedy && pp < 1.f;  // NaN: false (keeps everything)
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  // pass 1: x (vectorised, csrc/host_simd.h), max, arg-max (first maximal index)
  const float m = logits_to_x_host(c, cfg ? u : nullptr, s, div, o, V);
  int64_t arg = 0;
  while (arg < V && !(o[arg] == m)) ++arg;
  if (arg == V) arg = 0;
  // histogram of the keys' top 11 bits, four interleaved copies (repeated bins do not wait on
  // each other's increments)
  int32_t hist[4][kBins];
  if (use_k && !greedy && m != kNegInf) {
    std::memset(hist, 0, sizeof(hist));
    int64_t v = 0;
    for (; v + 4 <= V; v += 4)
      for (int h = 0; h < 4; ++h) ++hist[h][key_of(o[v + h]) >> 21];
    for (; v < V; ++v) ++hist[0][key_of(o[v]) >> 21];
  }
  if (greedy || m == kNegInf) {  // one-hot of the arg-max (0 for a row without mass)
    std::fill(o, o + V, 0.f);
    o[arg] = 1.f;
    return;
  }
  // tau_k as a key: the bin j with #(bins > j) < k <= #(bins >= j), then the (k - #(> j))-th
  // largest key inside it
  uint32_t tau_k = 0;
  if (use_k) {
    auto count = [&](int64_t j) {
      return static_cast<int64_t>(hist[0][j]) + hist[1][j] + hist[2][j] + hist[3][j];
    };
    int64_t above = 0, j = kBins - 1;
    for (; j > 0 && above + count(j) < k; --j) above += count(j);
    if (static_cast<int64_t>(sc.keys.size()) < V + 16) sc.keys.resize(V + 16);
    const int64_t nk = keys_in_bin_host(o, V, static_cast<uint32_t>(j), sc.keys.data());
    const int64_t rank = k - above - 1;  // 0-based, descending
    std::nth_element(sc.keys.begin(), sc.keys.begin() + rank, sc.keys.begin() + nk,
                     [](uint32_t x, uint32_t y) { return x > y; });
    tau_k = sc.keys[rank];
  }
  float tau_p = kNegInf;  // x >= -inf: every entry (top-p off)
  if (use_p) {
    sc.kept.clear();
    double z = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const float x = o[v];
      if (use_k && key_of(x) < tau_k) continue;
      const float w = std::exp(x - m);
      if (w > 0.f) {
        sc.kept.emplace_back(x, w);
        z += w;
      }
    }
    tau_p = top_p_threshold(sc.kept.data(), static_cast<int64_t>(sc.kept.size()),
                            std::max(static_cast<double>(pp) * z, 1e-30));
  }
  // pass 3: the kept entries (o zeroed), w = exp(x - m) on them, their float64 sum, p = w / sum
  if (static_cast<int64_t>(sc.idx.size()) < V + 16) {
    sc.idx.resize(V + 16);
    sc.xs.resize(V + 16);
  }
  const int64_t nkeep = take_kept_host(o, V, use_k, tau_k, tau_p, sc.idx.data(), sc.xs.data());
  double z0 = 0.0, z1 = 0.0;
  int64_t i = 0;
  for (; i + 2 <= nkeep; i += 2) {
    const float w0 = std::exp(sc.xs[i] - m), w1 = std::exp(sc.xs[i + 1] - m);
    sc.xs[i] = w0;
    sc.xs[i + 1] = w1;
    z0 += w0;
    z1 += w1;
  }
  if (i < nkeep) {
    sc.xs[i] = std::exp(sc.xs[i] - m);
    z0 += sc.xs[i];
  }
  const double z = z0 + z1;
  for (i = 0; i < nkeep; ++i) o[sc.idx[i]] = static_cast<float>(static_cast<double>(sc.xs[i]) / z);
}

}  // namespace

void probs_from_logits_host(const ProbsArgs& a) {
  parallel_for(a.rows, a.vocab, [&](int64_t r) {
    thread_local Scratch sc;
    one_row(a, r, sc);
  });
}

}  // namespace specops
