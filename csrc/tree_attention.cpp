// tree_attention CPU twin: flash-style attention of query rows over the visible keys
// (specops/tree_attention.h states the maths).  One item = (request b, KV head h), its rows
// r = n * G + g in tiles of kTile; per tile:
//
//   qt [D][Rp]      the tile's queries, transposed, times sm_scale * log2(e)  (Rp = rows padded
//                   to 16, padded rows zero and discarded)
//   s  [kBlock][Rp] scores y of a key block (key-major, so the softmax runs down the rows)
//   o  [Rp][Dp]     the running sum_j p_j v_j (Dp = D padded to 16)
//
// Scores: s[j][r] = sum_d k_j[d] qt[d][r] (a broadcast of k_j[d] times a vector of 16 rows);
// output: o[r][:] += sum_j s[j][r] v_j[:] (a broadcast of p times a vector of 16 dims).  Each
// key block is converted to float32 once and used by every tile, so each K/V row is read once
// for all G heads of its group.  AVX-512 when the CPU has it (checked at run time), the same
// maths in plain loops otherwise (checked against each other once by hand: max |diff| 6e-8 in
// out, 1e-6 in lse).
#include "specops/tree_attention.h"

#include <math.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "host_parallel.h"
#include "host_simd.h"         // SPECOPS_HOST_AVX512, SPECOPS_AVX512, have_avx512
#include "specops/features.h"  // FloatKind, half_to_float, bits_to_float

namespace specops {

namespace {

constexpr int64_t kBlock = 64;  // keys per block
constexpr int64_t kTile = 64;   // query rows per item
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
const float kNegInf = -__builtin_inff();

int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }

// One row of D elements at p (byte stride sd) as float32 into dst[0, D); dst[D, Dp) = 0.
void load_row_scalar(const char* p, int64_t sd, int kind, int64_t d, int64_t dp, float* dst) {
  for (int64_t i = 0; i < d; ++i) {
    const char* e = p + i * sd;
    if (kind == kF32) {
      memcpy(dst + i, e, 4);
    } else {
      uint16_t h;
      memcpy(&h, e, 2);
      dst[i] = kind == kBF16 ? bits_to_float(static_cast<uint32_t>(h) << 16) : half_to_float(h);
    }
  }
  for (int64_t i = d; i < dp; ++i) dst[i] = 0.f;
}

// ---- plain-loop kernels --------------------------------------------------------------------
// s[j][r] = sum_d krow[j][d] qt[d][r], j < nb, r < rp
void qk_scalar(const float* const* krow, int64_t nb, const float* qt, int64_t rp, int64_t d,
               float* s) {
  for (int64_t j = 0; j < nb; ++j) {
    float* sj = s + j * rp;
    for (int64_t r = 0; r < rp; ++r) sj[r] = 0.f;
    for (int64_t i = 0; i < d; ++i) {
      const float kv = krow[j][i];
      const float* q = qt + i * rp;
      for (int64_t r = 0; r < rp; ++r) sj[r] += kv * q[r];
    }
  }
}

// The online-softmax update of a block (rows r < rp): m, l updated, alpha[r] = 2^(m - m'),
// s[j][r] replaced by p_j = 2^(y_j - m').  m' = -inf (nothing seen yet) subtracts 0 instead.
void softmax_scalar(float* s, int64_t nb, int64_t rp, float* m, float* l, float* alpha) {
  for (int64_t r = 0; r < rp; ++r) {
    float mx = m[r];
    for (int64_t j = 0; j < nb; ++j) {
      const float y = s[j * rp + r];
      if (y > mx || y != y) mx = y;  // NaN propagates
    }
    const float mu = mx == kNegInf ? 0.f : mx;
    alpha[r] = exp2f(m[r] - mu);
    float sum = 0.f;
    for (int64_t j = 0; j < nb; ++j) {
      const float p = exp2f(s[j * rp + r] - mu);
      s[j * rp + r] = p;
      sum += p;
    }
    l[r] = l[r] * alpha[r] + sum;
    m[r] = mx;
  }
}

// o[r][:] = alpha[r] o[r][:] + sum_j p[j][r] vrow[j][:], r < rp, over dp dims
void pv_scalar(const float* p, int64_t nb, int64_t rp, const float* const* vrow, int64_t dp,
               const float* alpha, float* o) {
  for (int64_t r = 0; r < rp; ++r) {
    float* orow = o + r * dp;
    for (int64_t i = 0; i < dp; ++i) orow[i] *= alpha[r];
    for (int64_t j = 0; j < nb; ++j) {
      const float pj = p[j * rp + r];
      for (int64_t i = 0; i < dp; ++i) orow[i] += pj * vrow[j][i];
    }
  }
}

// ---- AVX-512 kernels -----------------------------------------------------------------------
#if defined(SPECOPS_HOST_AVX512)

// 2^x (Cephes exp2f: x = n + f, |f| <= 1/2, 2^f by a degree-6 polynomial, relative error
// ~2e-7; 2^n by scalef).  x is clamped into [-200, 200] with the variable as the second operand
// of max/min so that NaN passes through; -inf gives 0, +inf gives +inf.
SPECOPS_AVX512 inline __m512 exp2_16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-200.f), x);
  x = _mm512_min_ps(_mm512_set1_ps(200.f), x);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

SPECOPS_AVX512 void load_row_avx512(const char* p, int64_t sd, int kind, int64_t d, int64_t dp,
                                    float* dst) {
  const int64_t es = kind == kF32 ? 4 : 2;
  if (sd != es) return load_row_scalar(p, sd, kind, d, dp, dst);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    __m512 x;
    if (kind == kF32) {
      x = _mm512_loadu_ps(p + 4 * i);
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i));
      x = kind == kF16 ? _mm512_cvtph_ps(h)
                       : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    _mm512_storeu_ps(dst + i, x);
  }
  load_row_scalar(p + es * i, sd, kind, d - i, dp - i, dst + i);
}

// s[j][r] for JK keys (krow[0, JK)) and RV vectors of 16 rows
template <int RV, int JK>
SPECOPS_AVX512 void qk_tile(const float* const* krow, const float* qt, int64_t rp, int64_t d,
                            float* s) {
  __m512 acc[JK][RV];
  for (int j = 0; j < JK; ++j)
    for (int v = 0; v < RV; ++v) acc[j][v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < d; ++i) {
    __m512 q[RV];
    for (int v = 0; v < RV; ++v) q[v] = _mm512_loadu_ps(qt + i * rp + 16 * v);
    for (int j = 0; j < JK; ++j) {
      const __m512 k = _mm512_set1_ps(krow[j][i]);
      for (int v = 0; v < RV; ++v) acc[j][v] = _mm512_fmadd_ps(k, q[v], acc[j][v]);
    }
  }
  for (int j = 0; j < JK; ++j)
    for (int v = 0; v < RV; ++v) _mm512_storeu_ps(s + j * rp + 16 * v, acc[j][v]);
}

// krow holds nbp >= nb rows (a multiple of 8; the extra ones point at zeros)
template <int RV>
SPECOPS_AVX512 void qk_rows(const float* const* krow, int64_t nbp, const float* qt, int64_t rp,
                            int64_t d, float* s) {
  constexpr int JK = RV >= 3 ? 4 : 8;
  for (int64_t j = 0; j < nbp; j += JK) qk_tile<RV, JK>(krow + j, qt, rp, d, s + j * rp);
}

SPECOPS_AVX512 void qk_avx512(const float* const* krow, int64_t nbp, const float* qt, int64_t rp,
                              int64_t d, float* s) {
  for (int64_t r = 0; r < rp; r += 64) {  // rp <= kTile = 64 in practice
    switch (std::min<int64_t>(rp - r, 64) / 16) {
      case 1:
        qk_rows<1>(krow, nbp, qt + r, rp, d, s + r);
        break;
      case 2:
        qk_rows<2>(krow, nbp, qt + r, rp, d, s + r);
        break;
      case 3:
        qk_rows<3>(krow, nbp, qt + r, rp, d, s + r);
        break;
      default:
        qk_rows<4>(krow, nbp, qt + r, rp, d, s + r);
    }
  }
}

SPECOPS_AVX512 void softmax_avx512(float* s, int64_t nb, int64_t rp, float* m, float* l,
                                   float* alpha) {
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  for (int64_t r = 0; r < rp; r += 16) {
    const __m512 mo = _mm512_loadu_ps(m + r);
    __m512 mx = mo;
    for (int64_t j = 0; j < nb; ++j) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j * rp + r));
    const __mmask16 none = _mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ);
    const __m512 mu = _mm512_mask_blend_ps(none, mx, _mm512_setzero_ps());
    const __m512 a = exp2_16(_mm512_sub_ps(mo, mu));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; ++j) {
      const __m512 p = exp2_16(_mm512_sub_ps(_mm512_loadu_ps(s + j * rp + r), mu));
      _mm512_storeu_ps(s + j * rp + r, p);
      sum = _mm512_add_ps(sum, p);
    }
    _mm512_storeu_ps(l + r, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l + r), a), sum));
    _mm512_storeu_ps(m + r, mx);
    _mm512_storeu_ps(alpha + r, a);
  }
}

// o[r + 0..3][d0 + 16 * DV] = alpha o + sum_j p v
template <int DV>
SPECOPS_AVX512 void pv_tile(const float* p, int64_t nb, int64_t rp, const float* const* vrow,
                            int64_t d0, const float* alpha, float* o, int64_t dp) {
  __m512 acc[4][DV];
  for (int r = 0; r < 4; ++r)
    for (int v = 0; v < DV; ++v)
      acc[r][v] =
          _mm512_mul_ps(_mm512_loadu_ps(o + r * dp + d0 + 16 * v), _mm512_set1_ps(alpha[r]));
  for (int64_t j = 0; j < nb; ++j) {
    __m512 x[DV];
    for (int v = 0; v < DV; ++v) x[v] = _mm512_loadu_ps(vrow[j] + d0 + 16 * v);
    for (int r = 0; r < 4; ++r) {
      const __m512 pr = _mm512_set1_ps(p[j * rp + r]);
      for (int v = 0; v < DV; ++v) acc[r][v] = _mm512_fmadd_ps(pr, x[v], acc[r][v]);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int v = 0; v < DV; ++v) _mm512_storeu_ps(o + r * dp + d0 + 16 * v, acc[r][v]);
}

// rows r < rows (rounded up to 4; rp is the row stride of p): padded rows are not computed
SPECOPS_AVX512 void pv_avx512(const float* p, int64_t nb, int64_t rp, int64_t rows,
                              const float* const* vrow, int64_t dp, const float* alpha, float* o) {
  for (int64_t r = 0; r < rows; r += 4) {
    for (int64_t d0 = 0; d0 < dp; d0 += 64) {
      const float* pr = p + r;
      float* orow = o + r * dp;
      switch (std::min<int64_t>(dp - d0, 64) / 16) {
        case 1:
          pv_tile<1>(pr, nb, rp, vrow, d0, alpha + r, orow, dp);
          break;
        case 2:
          pv_tile<2>(pr, nb, rp, vrow, d0, alpha + r, orow, dp);
          break;
        case 3:
          pv_tile<3>(pr, nb, rp, vrow, d0, alpha + r, orow, dp);
          break;
        default:
          pv_tile<4>(pr, nb, rp, vrow, d0, alpha + r, orow, dp);
      }
    }
  }
}
#else
bool have_avx512() { return false; }
#endif

// ---- the driver ----------------------------------------------------------------------------
struct Scratch {
  std::vector<float> qt, kf, vf, s, o, m, l, alpha, zero, qrow;
  const float* krow[kBlock];
  const float* vrow[kBlock];
};

// The calling thread's scratch, looked up once per item: in a shared library each access to a
// thread_local goes through __tls_get_addr, which the compiler repeated inside the key loop.
__attribute__((noinline)) Scratch& thread_scratch() {
  thread_local Scratch w;
  return w;
}

// One (request b, KV head h): all N * G query rows, in tiles of kTile rows (tile t: rows
// [t kTile, ...), its qt at qt + t D kTile with row stride rp_t, its o at o + t kTile Dp, its
// m, l, alpha at + t kTile).  Each key block is loaded once and used by every tile.
struct Item {
  const TreeAttnArgs& a;
  bool simd;
  int64_t g, rows_all, tiles, dp;

  int64_t rows_of(int64_t t) const { return std::min(kTile, rows_all - t * kTile); }

  // The K (or V) row of request b, KV head h at logical position pos (0 <= pos < capacity).
  const char* row(const char* base, int64_t s0, int64_t s1, int64_t sh, int64_t b, int64_t h,
                  int64_t pos) const {
    if (!a.bt.data) return base + b * s0 + pos * s1 + h * sh;
    return base + a.bt.page(b, pos) * s0 + (pos % a.bt.page_size) * s1 + h * sh;
  }

  void load(const char* p, int64_t sd, int64_t width, float* dst) const {
#if defined(SPECOPS_HOST_AVX512)
    if (simd) return load_row_avx512(p, sd, a.kind, a.d, width, dst);
#endif
    load_row_scalar(p, sd, a.kind, a.d, width, dst);
  }

  // Prefetch the K/V rows at positions [pos0, pos1) (clamped to the capacity): the next block,
  // while this one computes (rows are D elements every Hkv * D, too short for the hardware's
  // stream prefetcher to run ahead).
  void prefetch(int64_t b, int64_t h, int64_t pos0, int64_t pos1) const {
#if defined(SPECOPS_HOST_AVX512)
    const int64_t es = a.kind == kF32 ? 4 : 2, bytes = a.d * es;
    if (a.k_sd != es || a.v_sd != es) return;
    for (int64_t pos = pos0; pos < std::min(pos1, a.bt.capacity); ++pos) {
      const char* kr = row(a.k, a.k_s0, a.k_s1, a.k_sh, b, h, pos);
      const char* vr = row(a.v, a.v_s0, a.v_s1, a.v_sh, b, h, pos);
      for (int64_t c = 0; c < bytes; c += 64) {
        _mm_prefetch(kr + c, _MM_HINT_T1);
        _mm_prefetch(vr + c, _MM_HINT_T1);
      }
    }
#endif
  }

  // One block of nb keys at positions pos0 + i (tree: slots j0 + i, masked per row); next0 is
  // the first position of the block after it (prefetched).
  void block(Scratch& w, int64_t b, int64_t h, int64_t pos0, int64_t nb, bool tree, int64_t j0,
             int64_t next0) const {
    const int64_t d = a.d;
    // K/V rows are copied (as float32) into contiguous blocks even when they are float32 already:
    // in the cache they sit Hkv * D elements apart, a power of two that maps a block's rows onto
    // a few L1 sets
    for (int64_t i = 0; i < nb; ++i) {
      load(row(a.k, a.k_s0, a.k_s1, a.k_sh, b, h, pos0 + i), a.k_sd, d, w.kf.data() + i * d);
      load(row(a.v, a.v_s0, a.v_s1, a.v_sh, b, h, pos0 + i), a.v_sd, dp, w.vf.data() + i * dp);
      w.krow[i] = w.kf.data() + i * d;
      w.vrow[i] = w.vf.data() + i * dp;
    }
    if (next0 >= 0) prefetch(b, h, next0, next0 + kBlock);
    const int64_t nbp = (nb + 7) / 8 * 8;
    for (int64_t i = nb; i < nbp; ++i) w.krow[i] = w.zero.data();
    float* s = w.s.data();
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r0 = t * kTile, rows = rows_of(t), rp = round16(rows);
      const float* qt = w.qt.data() + r0 * d;
      float *o = w.o.data() + r0 * dp, *m = w.m.data() + r0, *l = w.l.data() + r0;
      float* alpha = w.alpha.data() + r0;
#if defined(SPECOPS_HOST_AVX512)
      if (simd) qk_avx512(w.krow, nbp, qt, rp, d, s);
#endif
      if (!simd) qk_scalar(w.krow, nb, qt, rp, d, s);
      if (tree) {  // slot j0 + i is visible to row r iff bit j0 + i of mask row n = r / G is set
        const int32_t* mrow = a.mask + b * a.mask_sb;
        for (int64_t r = 0; r < rows; ++r) {
          const int32_t* mn = mrow + ((r0 + r) / g) * a.mask_sn;
          for (int64_t i = 0; i < nb; ++i) {
            const int64_t j = j0 + i;
            const uint32_t word = static_cast<uint32_t>(mn[(j >> 5) * a.mask_sw]);
            if (!((word >> (j & 31)) & 1u)) s[i * rp + r] = kNegInf;
          }
        }
      }
#if defined(SPECOPS_HOST_AVX512)
      if (simd) {
        softmax_avx512(s, nb, rp, m, l, alpha);
        pv_avx512(s, nb, rp, rows, w.vrow, dp, alpha, o);
        continue;
      }
#endif
      softmax_scalar(s, nb, rp, m, l, alpha);
      pv_scalar(s, nb, rp, w.vrow, dp, alpha, o);
    }
  }

  void operator()(int64_t item) const {
    const int64_t b = item / a.hkv, h = item % a.hkv, d = a.d;
    const size_t all = static_cast<size_t>(tiles * kTile);
    Scratch& w = thread_scratch();
    w.qt.assign(static_cast<size_t>(d) * all, 0.f);
    w.kf.resize(static_cast<size_t>(kBlock * d));
    w.vf.resize(static_cast<size_t>(kBlock * dp));
    w.s.resize(static_cast<size_t>(kBlock * kTile));
    w.o.assign(static_cast<size_t>(dp) * all, 0.f);
    w.m.assign(all, kNegInf);
    w.l.assign(all, 0.f);
    w.alpha.resize(all);
    w.zero.assign(static_cast<size_t>(std::max<int64_t>(dp, 1)), 0.f);
    w.qrow.resize(static_cast<size_t>(dp));
    // qt of tile t: qt[i][r] = q[b, n, h G + g, i] * sm_scale * log2(e), r = n G + g - t kTile
    const float qs = a.scale * kLog2e;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r0 = t * kTile, rows = rows_of(t), rp = round16(rows);
      float* qt = w.qt.data() + r0 * d;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = (r0 + r) / g, head = h * g + (r0 + r) % g;
        load(a.q + b * a.q_sb + n * a.q_sn + head * a.q_sh, a.q_sd, dp, w.qrow.data());
        for (int64_t i = 0; i < d; ++i) qt[i * rp + r] = w.qrow[i] * qs;
      }
    }
    // visible keys: the prefix [0, clamp(L, 0, C)), then the slots j with 0 <= L + j < C
    const int64_t L = a.seqlens64 ? static_cast<const int64_t*>(a.seqlens)[b * a.seqlens_s]
                                  : static_cast<const int32_t*>(a.seqlens)[b * a.seqlens_s];
    const int64_t cap = a.bt.capacity, pre = std::min(std::max<int64_t>(L, 0), cap);
    const int64_t j_lo = L < 0 ? (L <= -a.n ? a.n : -L) : 0;
    const int64_t j_hi = L >= cap ? 0 : std::min(a.n, cap - L);
    prefetch(b, h, 0, std::min(kBlock, pre));
    for (int64_t p0 = 0; p0 < pre; p0 += kBlock) {
      const int64_t nb = std::min(kBlock, pre - p0);
      block(w, b, h, p0, nb, false, 0, p0 + nb < pre ? p0 + nb : (j_lo < j_hi ? L + j_lo : -1));
    }
    for (int64_t j = j_lo; j < j_hi; j += kBlock) {
      const int64_t nb = std::min(kBlock, j_hi - j);
      block(w, b, h, L + j, nb, true, j, j + nb < j_hi ? L + j + nb : -1);
    }
    // out = o / l, lse = (m + log2 l) ln 2; no visible key (l = 0): out 0, lse -inf
    for (int64_t r = 0; r < rows_all; ++r) {
      const int64_t n = r / g, head = h * g + r % g;
      const int64_t at = (b * a.n + n) * a.hq + head;
      const float l = w.l[r];
      float* out = a.out + at * d;
      for (int64_t i = 0; i < d; ++i) out[i] = l == 0.f ? 0.f : w.o[r * dp + i] / l;
      a.lse[at] = l == 0.f ? kNegInf : (w.m[r] + log2f(l)) * kLn2;
    }
  }
};

}  // namespace

void tree_attention_host(const TreeAttnArgs& a) {
  if (a.batch == 0 || a.n == 0 || a.hq == 0 || a.hkv == 0) return;
  const int64_t g = a.hq / a.hkv, tiles = (a.n * g + kTile - 1) / kTile;
  const Item item{a, have_avx512(), g, a.n * g, tiles, round16(a.d)};
  // work of an item (b, h): its visible keys times its n * G query rows times D; a decode-sized
  // call stays on this thread (waking the pool costs more than it saves, and far more when the
  // other core is busy: the wait for a worker is then a scheduler time slice)
  int64_t keys = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t L = a.seqlens64 ? static_cast<const int64_t*>(a.seqlens)[b * a.seqlens_s]
                                  : static_cast<const int32_t*>(a.seqlens)[b * a.seqlens_s];
    keys += std::min(std::max<int64_t>(L, 0), a.bt.capacity) + a.n;
  }
  parallel_for(a.batch * a.hkv, keys / a.batch * a.n * g * a.d, item);
}

}  // namespace specops
