#include "specops/features.h"

#include <vector>

namespace specops {

void gather_rows_host(const char* src, int64_t s_b, int64_t s_n, int64_t s_h, int64_t n,
                      const void* index, bool index64, int64_t i_b, int64_t i_m, char* out,
                      int64_t batch, int64_t m, int64_t h, int esize) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = load_index(index, index64, b * i_b + j * i_m);
      const char* row = (i >= 0 && i < n) ? src + b * s_b + i * s_n : nullptr;
      copy_row(out + (b * m + j) * h * esize, row, h, s_h, esize);
    }
  }
}

void drafter_inputs_host(const char* emb, int64_t s_v, int64_t s_e, int64_t vocab, int64_t e,
                         const void* tokens, bool tokens64, int64_t t_b, int64_t t_m,
                         const char* feats, int64_t f_b, int64_t f_m, int64_t f_h, int64_t h,
                         const char* step, int64_t st_b, int64_t st_m, int64_t st_s, int64_t s,
                         int step_mode, char* out, int64_t batch, int64_t m, int esize) {
  const int64_t width = e + h + s;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < m; ++j) {
      char* dst = out + (b * m + j) * width * esize;
      const int64_t t = load_index(tokens, tokens64, b * t_b + j * t_m);
      copy_row(dst, (t >= 0 && t < vocab) ? emb + t * s_v : nullptr, e, s_e, esize);
      copy_row(dst + e * esize, feats + b * f_b + j * f_m, h, f_h, esize);
      if (step_mode == 1) copy_row(dst + (e + h) * esize, step, s, st_s, esize);
      if (step_mode == 2)
        copy_row(dst + (e + h) * esize, step + b * st_b + j * st_m, s, st_s, esize);
    }
  }
}

void feature_cache_write_host(char* store, int32_t* stamps, int64_t cap, int64_t h, const void* pos,
                              bool pos64, int64_t p_b, int64_t p_m, const char* feats, int64_t f_b,
                              int64_t f_m, int64_t f_h, const int64_t* step_ptr,
                              int64_t step_stride, int64_t step_value, int64_t batch, int64_t m,
                              int esize) {
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t step = step_ptr ? step_ptr[b * step_stride] : step_value;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t p = load_index(pos, pos64, b * p_b + j * p_m);
      if (p < 0 || p >= cap) continue;
      copy_row(store + (b * cap + p) * h * esize, feats + b * f_b + j * f_m, h, f_h, esize);
      stamps[b * cap + p] = static_cast<int32_t>(step);
    }
  }
}

void path_similarity_host(const PathSimArgs& a, int64_t batch, float* out) {
  std::vector<double> acc(a.C), row(a.C);
  for (int64_t b = 0; b < batch; ++b) out[b] = path_similarity_row(a, b, acc.data(), row.data());
}

}  // namespace specops
