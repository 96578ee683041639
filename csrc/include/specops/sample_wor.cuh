// CUDA sampling without replacement by Gumbel top-k (same maths as gumbel_topk_host in
// specops/sample.h and reference.sample_without_replacement): key_v = log(p_v) - log(-log(u_v))
// in float32 for mass(p_v) > 0 (NaN, negative, +inf never chosen), the k largest keys, largest
// first, ties to the lower id, -1 padding.
//
// One block per row.  A pass over the row keeps, per thread, its KT best keys that rank after a
// threshold (registers, insertion with static indices); then k rounds of a block argmax over the
// threads' heads emit the winners in order, the owner popping its head.  The merge is exact as
// long as no thread runs out of kept keys while it dropped some; if one does, a new pass starts
// with the threshold = the last winner.  k <= KT never needs a second pass.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include <cub/block/block_reduce.cuh>

#include "specops/common.h"
#include "specops/sample.h"

namespace specops {

struct KeyIdFirst {  // the entry that ranks first (larger key, then lower id)
  __device__ KeyId operator()(KeyId a, KeyId b) const { return key_before(a, b) ? a : b; }
};

// Offer entry e to a thread's sorted top-KT list (best first).  Entries at or before the
// threshold thr were emitted in an earlier pass and are ignored; an entry that falls off the
// list, or pushes a kept one off, sets `dropped` (a refill pass is then needed).
template <int KT>
__device__ __forceinline__ void topk_list_push(KeyId (&list)[KT], const KeyId& e, const KeyId& thr,
                                               bool& dropped) {
  if (!key_before(thr, e)) return;  // already emitted
  if (!key_before(e, list[KT - 1])) {
    dropped = true;
    return;
  }
  if (list[KT - 1].key != -INFINITY) dropped = true;
  list[KT - 1] = e;
#pragma unroll
  for (int s = KT - 1; s > 0; --s) {
    if (key_before(list[s], list[s - 1])) {
      const KeyId t = list[s];
      list[s] = list[s - 1];
      list[s - 1] = t;
    }
  }
}

template <int BLOCK>
using GumbelReduce = cub::BlockReduce<KeyId, BLOCK>;

// The k ids of the row p (uniform of entry v = draw draw0 + v of `row`) into out[0..k).
template <int BLOCK, int KT>
__device__ void block_gumbel_topk(const float* p, int64_t vocab, const RngArgs& rng, int64_t row,
                                  int64_t draw0, int64_t k, int32_t* out,
                                  typename GumbelReduce<BLOCK>::TempStorage& tmp) {
  __shared__ KeyId s_win;
  __shared__ int s_refill;
  const KeyId none = {-INFINITY, INT32_MAX};
  KeyId thr = {INFINITY, -1};  // every key ranks after it
  int64_t j = 0;
  while (j < k) {
    KeyId list[KT];
#pragma unroll
    for (int s = 0; s < KT; ++s) list[s] = none;
    bool dropped = false;  // this thread discarded keys that rank after the threshold
    for (int64_t v = threadIdx.x; v < vocab; v += BLOCK) {
      const float pv = mass(p[v]);
      if (!(pv > 0.f)) continue;
      const float u = gumbel_uniform(rng.uniform(row, draw0 + v));
      const KeyId e = {logf(pv) - logf(-logf(u)), static_cast<int32_t>(v)};
      topk_list_push(list, e, thr, dropped);
    }
    while (j < k) {
      __syncthreads();
      const KeyId win = GumbelReduce<BLOCK>(tmp).Reduce(list[0], KeyIdFirst());
      if (threadIdx.x == 0) {
        s_win = win;
        s_refill = 0;
      }
      __syncthreads();
      const KeyId w = s_win;
      if (w.key == -INFINITY) {  // no positive entry left: -1 padding
        for (int64_t jj = j + threadIdx.x; jj < k; jj += BLOCK) out[jj] = -1;
        j = k;
        break;
      }
      if (threadIdx.x == 0) out[j] = w.id;
      ++j;
      if (list[0].id == w.id) {  // the owner pops its head
#pragma unroll
        for (int s = 0; s < KT - 1; ++s) list[s] = list[s + 1];
        list[KT - 1] = none;
        if (list[0].key == -INFINITY && dropped) s_refill = 1;
      }
      __syncthreads();
      if (s_refill) {
        thr = w;
        break;
      }
    }
  }
}

template <int BLOCK, int KT>
__global__ void sample_wor_kernel(SampleWorArgs a) {
  __shared__ typename GumbelReduce<BLOCK>::TempStorage tmp;
  const int64_t r = blockIdx.x;
  block_gumbel_topk<BLOCK, KT>(a.probs + r * a.row_stride, a.vocab, a.rng, r, 0, a.k,
                               a.out + r * a.k, tmp);
}

}  // namespace specops
