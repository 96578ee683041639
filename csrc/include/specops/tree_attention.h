// tree_attention CPU twin (csrc/tree_attention.cpp); semantics: specops/reference/attention.py.
//
// Request b with prefix length L = seqlens[b], KV head h, query n, query head h * G + g
// (G = Hq / Hkv).  Key position s (logical, 0 <= s < capacity) is visible to query n iff
//
//     s < L                                             (the committed prefix), or
//     s = L + j, 0 <= j < N, and bit j of mask row n    (a tree slot: n or one of its ancestors)
//
// so the visible set is [0, clamp(L, 0, C)) plus the slots j with 0 <= L + j < C (C = capacity;
// a negative or too-large L in fast mode reads what the reference reads, and nothing outside the
// cache).  With x_s = sm_scale <q, k_s>:
//
//     out = sum_s exp(x_s - lse) v_s,   lse = log sum_s exp(x_s)     (natural log)
//
// and a query that sees no key gets out = 0, lse = -inf.  Paged caches address position s of
// request b as page block_table[b][s / page] (clamped into [0, P), as the reference's gather
// does) at row s % page.
//
// The kernel works on one (request, KV head) at a time (the work items of the thread pool): its
// N * G query rows r = n * G + g, in tiles of 64, all take each block of 64 keys in turn, so each
// K/V row is read once for all G heads of its group.  Keys go through an online (flash) softmax
// in base 2: with y = x * log2(e), per row
//
//     m' = max(m, max_j y_j),  a = 2^(m - m'),  p_j = 2^(y_j - m'),
//     l' = a l + sum_j p_j,    o' = a o + sum_j p_j v_j
//
// and finally out = o / l, lse = (m + log2 l) ln 2.  Float32 accumulation whatever the input
// dtype; the result of an item does not depend on the thread that computes it.
#pragma once
#include <stdint.h>

#include "specops/block_table.h"

namespace specops {

struct TreeAttnArgs {
  int kind;  // element type of q, k, v: 0 float32, 1 float16, 2 bfloat16 (features.h FloatKind)
  // q [B, N, Hq, D]; strides in bytes
  const char* q;
  int64_t q_sb, q_sn, q_sh, q_sd;
  // k, v: [B, S, Hkv, D] (contiguous cache) or [P, page, Hkv, D] (paged); strides in bytes
  const char* k;
  int64_t k_s0, k_s1, k_sh, k_sd;
  const char* v;
  int64_t v_s0, v_s1, v_sh, v_sd;
  // cache_seqlens [B] int32 or int64; stride in elements
  const void* seqlens;
  bool seqlens64;
  int64_t seqlens_s;
  // mask_bits [1 or B, N, W] int32; strides in elements (mask_sb = 0 for one row shared)
  const int32_t* mask;
  int64_t mask_sb, mask_sn, mask_sw;
  // the caches' layout: block_table [B, max_pages] int32 or int64 (data nullptr: contiguous
  // cache), capacity S or max_pages * page
  BlockTable bt;
  int64_t batch, n, hq, hkv, d;
  float scale;  // sm_scale
  // outputs, contiguous float32: out [B, N, Hq, D], lse [B, N, Hq]
  float* out;
  float* lse;
};

// Every (request, KV head, row tile) through host_parallel's pool.
void tree_attention_host(const TreeAttnArgs& a);

}  // namespace specops
