// commit_kv: after verification, move the accepted path's K/V entries to the committed prefix.
//
// For request b with committed length cs = seqlens[b] and accepted slots s_0, s_1, ... (offsets
// from cs of the accepted nodes, in path order, -1 padded), every layer and both K and V get
//
//     cache[cs + i] <- cache[cs + s_i]        for i < m_b   (values of the pre-call state)
//     seqlens[b]    <- cs + m_b
//
// where m_b is the length of the longest prefix of valid entries (commit_entry below):
// s_i >= 0, s_i > s_{i-1}, cs >= 0, cs + s_i < capacity, and (paged) both pages in [0, P).
// Well-formed input (what validation mode enforces) makes m_b the number of non -1 entries;
// anything else is cut at the first bad entry, so no kernel ever touches memory outside the
// cache.  The kernels move raw bytes: one "row" is the Hkv * D contiguous elements of one
// position, row_bytes long, whatever the dtype.
//
// Alias safety.  Sources and destinations of one request overlap (a Jacobi window's accepted
// prefix is already in place; a tree path may move slot 5 to 2 while 2 moves to 1).  Valid
// slots are strictly increasing non-negative integers, hence s_j >= j.  Processing the moves
// in increasing i, the move i writes position cs + i, and every later move j > i reads
// cs + s_j >= cs + j > cs + i: a source is never overwritten before it is read.  So
//   - the CPU twin moves row by row in increasing i (memmove), and
//   - the CUDA kernel, in tiles of TILE moves, loads every source of a tile before storing any
//     destination of it, tiles in increasing i; a later tile reads positions >= its first i,
//     earlier tiles wrote positions < it.
// Distinct threads own distinct bytes of the row, distinct blocks distinct (layer, K/V,
// request, byte range), so there is no cross-thread hazard.  Moves with s_i == i are skipped.
// (Paged caches: the block table must map a request's draft region to distinct pages.)
#pragma once
#include <stdint.h>

#include "specops/philox.h"  // SPECOPS_HD

namespace specops {

struct CommitKVArgs {
  // The (layer, kv) cache slab: bases[2 * layer + kv] when bases is set (list of per-layer
  // tensors), else base + layer * stride_layer + kv * stride_kv (stacked tensor).  Bytes.
  char* base;
  const int64_t* bases;
  int64_t stride_layer;
  int64_t stride_kv;
  int64_t layers;
  // Inside a slab: position pos of request b is at b * stride_page + pos * stride_pos
  // (contiguous, page_size == 0) or at block_table[b][pos / page] * stride_page +
  // (pos % page) * stride_pos (paged).  Bytes.
  int64_t stride_page;
  int64_t stride_pos;
  int64_t row_bytes;
  int64_t capacity;  // positions per request: S, or pages per request * page_size
  int64_t page_size;
  const int32_t* block_table;  // [batch, capacity / page_size] or nullptr
  int64_t bt_stride;
  int64_t num_pages;
  int32_t* seqlens;      // [batch], advanced in place
  const int32_t* slots;  // [batch, max_moves]
  int64_t slots_stride;
  int64_t batch;
  int64_t max_moves;
};

SPECOPS_HD char* commit_slab(const CommitKVArgs& a, int64_t layer, int kv) {
  if (a.bases) return reinterpret_cast<char*>(static_cast<intptr_t>(a.bases[2 * layer + kv]));
  return a.base + layer * a.stride_layer + kv * a.stride_kv;
}

// Byte offset of (request b, position pos) inside a slab, or -1 when its page id is invalid.
SPECOPS_HD int64_t commit_pos_offset(const CommitKVArgs& a, int64_t b, int64_t pos) {
  if (a.page_size == 0) return b * a.stride_page + pos * a.stride_pos;
  const int64_t page = a.block_table[b * a.bt_stride + pos / a.page_size];
  if (page < 0 || page >= a.num_pages) return -1;
  return page * a.stride_page + (pos % a.page_size) * a.stride_pos;
}

// Entry i of request b (committed length cs): true when it is valid, with the byte offsets of
// its source and destination rows.  m_b = the first i for which this is false (or max_moves).
SPECOPS_HD bool commit_entry(const CommitKVArgs& a, int64_t b, int64_t cs, int64_t i,
                             int64_t* src_off, int64_t* dst_off) {
  *src_off = 0;
  *dst_off = 0;
  const int32_t* row = a.slots + b * a.slots_stride;
  const int64_t s = row[i];
  if (s < 0 || cs < 0) return false;
  if (i > 0 && s <= static_cast<int64_t>(row[i - 1])) return false;
  const int64_t src = cs + s, dst = cs + i;
  if (src >= a.capacity || dst >= a.capacity) return false;
  const int64_t so = commit_pos_offset(a, b, src), d = commit_pos_offset(a, b, dst);
  if (so < 0 || d < 0) return false;
  *src_off = so;
  *dst_off = d;
  return true;
}

// CPU twin: every request, layer and K/V, moves in increasing i, then seqlens += m_b.
void commit_kv_host(const CommitKVArgs& a);

}  // namespace specops
