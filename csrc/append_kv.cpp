#include "specops/append_kv.h"

#include <string.h>

#include <algorithm>

#include "host_parallel.h"

namespace specops {

namespace {

int64_t read_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

// One [Hkv, D] row from src (strides s) to dst (strides t): D elements at a time when both
// rows walk D contiguously, else element by element.
void copy_row(char* dst, const int64_t* t, const char* src, const int64_t* s,
              const AppendKVArgs& a) {
  const int64_t es = a.elem_bytes;
  const bool dense = (a.d <= 1 || (s[3] == es && t[3] == es));
  for (int64_t h = 0; h < a.hkv; ++h) {
    char* dh = dst + h * t[2];
    const char* sh = src + h * s[2];
    if (dense) {
      memcpy(dh, sh, a.d * es);
    } else {
      for (int64_t j = 0; j < a.d; ++j) memcpy(dh + j * t[3], sh + j * s[3], es);
    }
  }
}

}  // namespace

void append_kv_host(const AppendKVArgs& a) {
  // nothing to copy (and no row pointer to hand memcpy: empty tensors may have none)
  if (a.hkv == 0 || a.d == 0 || a.bt.capacity <= 0 || (a.bt.page_size > 0 && a.bt.num_pages <= 0))
    return;
  // a row is a copy of 2 Hkv D elements: cheap per element, so the pool only for large appends
  const int64_t work = std::max<int64_t>(a.hkv * a.d * a.elem_bytes / 32, 1);
  parallel_for(a.batch * a.n, work, [&](int64_t r) {
    const int64_t b = r / a.n, i = r % a.n;
    const int64_t pos = read_index(a.seqlens, a.seqlens64, b * a.seqlens_stride) + i;
    if (pos < 0 || pos >= a.bt.capacity) return;  // dropped: outside the cache
    int64_t page = b, row = pos;
    if (a.bt.page_size > 0) {
      page = a.bt.page(b, pos);
      row = pos % a.bt.page_size;
    }
    const char* ks = a.k + b * a.k_stride[0] + i * a.k_stride[1];
    const char* vs = a.v + b * a.v_stride[0] + i * a.v_stride[1];
    copy_row(a.k_cache + page * a.kc_stride[0] + row * a.kc_stride[1], a.kc_stride, ks, a.k_stride,
             a);
    copy_row(a.v_cache + page * a.vc_stride[0] + row * a.vc_stride[1], a.vc_stride, vs, a.v_stride,
             a);
  });
}

}  // namespace specops
