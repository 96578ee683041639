// append_kv: write the new tokens' K and V rows at logical positions seqlens[b] + n.
//
//     cache[slot(b, L_b + n)] <- new[b, n]      for 0 <= L_b + n < capacity   (else dropped)
//
// slot(b, s) = row s of request b (contiguous cache) or row s % page of page
// block_table[b, s / page] clamped into [0, P) (paged), as specops.reference.append_kv and the
// Triton kernel.  Every tensor is addressed through its own strides (bytes); the caches have
// the new rows' dtype, so a row is copied as it is (raw elements).  Rows of one request never
// share a slot; two requests whose block tables map one slot write it in an unspecified order.
#pragma once
#include <stdint.h>

#include "specops/block_table.h"

namespace specops {

struct AppendKVArgs {
  char* k_cache;
  char* v_cache;
  const char* k;
  const char* v;
  int64_t elem_bytes;
  int64_t batch, n, hkv, d;
  int64_t kc_stride[4], vc_stride[4];  // [B or P, S or page, Hkv, D], bytes
  int64_t k_stride[4], v_stride[4];    // [B, N, Hkv, D], bytes
  const void* seqlens;                 // [B] int32 or int64
  bool seqlens64;
  int64_t seqlens_stride;  // elements
  BlockTable bt;           // the caches' layout: contiguous, or paged through block_table
};

// CPU twin: the (b, n) rows in parallel, each copied to its slot when in range.
void append_kv_host(const AppendKVArgs& a);

}  // namespace specops
