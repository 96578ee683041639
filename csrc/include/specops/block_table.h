// The KV cache layout shared by append_kv and tree_attention (their CPU twins): a contiguous
// cache [B, S, ...] holds position s of request b at row s of batch entry b; a paged cache
// [P, page, ...] at row s % page of page block_table[b, s / page], clamped into [0, P) as the
// reference's gather does.  Set by the bindings' one check (bind.h block_table_arg).
#pragma once
#include <stdint.h>

#include <algorithm>

namespace specops {

struct BlockTable {
  const void* data;  // [B, pages] int32 or int64, or nullptr (contiguous cache)
  bool is64;
  int64_t stride_b, stride_p;  // elements
  int64_t page_size;           // 0: contiguous
  int64_t num_pages;           // 0: contiguous
  int64_t capacity;            // positions per request: S, or pages * page_size

  // The page holding position pos (0 <= pos < capacity) of request b in a paged cache.
  int64_t page(int64_t b, int64_t pos) const {
    const int64_t at = b * stride_b + (pos / page_size) * stride_p;
    const int64_t p =
        is64 ? static_cast<const int64_t*>(data)[at] : static_cast<const int32_t*>(data)[at];
    return std::min(std::max<int64_t>(p, 0), num_pages - 1);
  }
};

}  // namespace specops
