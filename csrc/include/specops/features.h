// Row gathers, the drafter input, feature-cache writes and VVS path similarity: per-row cores
// (SPECOPS_HD, shared by any device port) and the CPU twins of the Triton kernels.  Maths in
// specops/reference/features.py:
//   gather_rows:     out[b, j] = src[b, index[b, j]]            (0 if index outside [0, N))
//   drafter_inputs:  out[b, j] = [emb[tok[b, j]] | feat[b, j] | step]   (0 row if tok outside
//                    [0, V))
//   cache write:     store[b, p] = feat[b, j], stamp[b, p] = step for p = pos[b, j] in [0, CAP)
//   path similarity: S_l = (||sum_p e_p||^2 - sum_p ||e_p||^2) / (P (P - 1)),
//                    e_p = x_p / max(||x_p||, 1e-12), x_p = codebook[paths[b, p, l]] (0 if the
//                    id is outside [0, V)); out[b] = sum_l alpha^l S_l / sum_l alpha^l over
//                    l = 0, stride, ... < L; float64 sums.
// Strides are in bytes for float data (element size esize) and in elements for index tensors;
// index tensors are int32 or int64 (is64).
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "specops/philox.h"  // SPECOPS_HD

namespace specops {

enum FloatKind : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

SPECOPS_HD int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i]
              : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

// n elements of esize bytes: dst contiguous, src with a byte stride; zeros when src is null.
SPECOPS_HD void copy_row(char* dst, const char* src, int64_t n, int64_t src_stride, int esize) {
  const int64_t bytes = n * esize;
  if (bytes <= 0) return;  // an empty row (H = 0): its pointers may be null
  if (src == nullptr) {
#ifdef __CUDA_ARCH__
    for (int64_t i = 0; i < bytes; ++i) dst[i] = 0;
#else
    memset(dst, 0, static_cast<size_t>(bytes));
#endif
    return;
  }
  if (src_stride == esize) {
#ifdef __CUDA_ARCH__
    for (int64_t i = 0; i < bytes; ++i) dst[i] = src[i];
#else
    memcpy(dst, src, static_cast<size_t>(bytes));
#endif
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < esize; ++k) dst[i * esize + k] = src[i * src_stride + k];
  }
}

// IEEE half / bfloat16 bits -> float (bit manipulation, the same on host and device).
SPECOPS_HD float bits_to_float(uint32_t bits) {
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

SPECOPS_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal: renormalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    man &= 0x3ffu;
    exp = static_cast<uint32_t>(1 - e);
    return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

SPECOPS_HD double load_float(const char* p, int kind) {
  if (kind == kF32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  if (kind == kBF16) return bits_to_float(static_cast<uint32_t>(h) << 16);
  return half_to_float(h);
}

struct PathSimArgs {
  const void* paths;
  bool paths64;
  int64_t s_pb, s_pp, s_pl;  // elements
  int64_t P, L;
  const char* codebook;
  int64_t s_cv, s_cc;  // bytes
  int64_t V, C;
  int kind;  // FloatKind of the codebook
  int esize;
  double alpha_stride;  // alpha ** stride
  int64_t stride;
};

// out for request b; scratch: acc [C] and row [C] doubles.
SPECOPS_HD float path_similarity_row(const PathSimArgs& a, int64_t b, double* acc, double* row) {
  double num = 0.0, den = 0.0, w = 1.0;
  for (int64_t l = 0; l < a.L; l += a.stride) {
    double self_dot = 0.0;  // sum_p ||e_p||^2
    for (int64_t c = 0; c < a.C; ++c) acc[c] = 0.0;
    for (int64_t p = 0; p < a.P; ++p) {
      const int64_t id = load_index(a.paths, a.paths64, b * a.s_pb + p * a.s_pp + l * a.s_pl);
      if (id < 0 || id >= a.V) continue;  // a zero vector
      const char* x = a.codebook + id * a.s_cv;
      double sq = 0.0;
      for (int64_t c = 0; c < a.C; ++c) {
        row[c] = load_float(x + c * a.s_cc, a.kind);
        sq += row[c] * row[c];
      }
      const double norm = sqrt(sq);
      const double inv = 1.0 / (norm > 1e-12 ? norm : 1e-12);
      self_dot += sq * inv * inv;
      for (int64_t c = 0; c < a.C; ++c) acc[c] += row[c] * inv;  // sum_p e_p
    }
    double tot = 0.0;  // ||sum_p e_p||^2
    for (int64_t c = 0; c < a.C; ++c) tot += acc[c] * acc[c];
    const double s_l = (tot - self_dot) / (static_cast<double>(a.P) * (a.P - 1.0));
    num += w * s_l;
    den += w;
    w *= a.alpha_stride;
  }
  return static_cast<float>(num / den);
}

// CPU twins (csrc/features.cpp).
void gather_rows_host(const char* src, int64_t s_b, int64_t s_n, int64_t s_h, int64_t n,
                      const void* index, bool index64, int64_t i_b, int64_t i_m, char* out,
                      int64_t batch, int64_t m, int64_t h, int esize);

void drafter_inputs_host(const char* emb, int64_t s_v, int64_t s_e, int64_t vocab, int64_t e,
                         const void* tokens, bool tokens64, int64_t t_b, int64_t t_m,
                         const char* feats, int64_t f_b, int64_t f_m, int64_t f_h, int64_t h,
                         const char* step, int64_t st_b, int64_t st_m, int64_t st_s, int64_t s,
                         int step_mode, char* out, int64_t batch, int64_t m, int esize);

void feature_cache_write_host(char* store, int32_t* stamps, int64_t cap, int64_t h, const void* pos,
                              bool pos64, int64_t p_b, int64_t p_m, const char* feats, int64_t f_b,
                              int64_t f_m, int64_t f_h, const int64_t* step_ptr,
                              int64_t step_stride, int64_t step_value, int64_t batch, int64_t m,
                              int esize);

void path_similarity_host(const PathSimArgs& a, int64_t batch, float* out);

}  // namespace specops
