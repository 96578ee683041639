// Host (CPU twin) threading and block random numbers, shared by the C++ kernels (not by CUDA).
//
// Threads: every parallel loop splits independent work items (requests, rows, line positions)
// whose results do not depend on which thread computes them, so outputs are identical for any
// thread count.  The count is a process-wide setting (specops.set_num_threads; 0 or 1 = serial).
#pragma once
#include <stdint.h>

#include "specops/common.h"

namespace specops {

int host_threads();
void set_host_threads(int n);

// f(i) for i in [0, n), items handed out one at a time to the caller and host_threads() - 1 pool
// workers (csrc/host_parallel.cpp); a plain loop for one thread, one item, a nested call or while
// another caller's job runs.  f must write disjoint outputs per item.
template <class F>
void parallel_for(int64_t n, const F& f);

// The same for items of about `work_per_item` element visits each: below kParallelMinWork in all
// the loop stays on the caller's thread (waking the pool costs about 1.5 us, as much as the work
// of a decode-sized call: B 2, K 4, V 16 takes 0.3 us).
constexpr int64_t kParallelMinWork = 1 << 13;
template <class F>
void parallel_for(int64_t n, int64_t work_per_item, const F& f);

// u[i] = rng.uniform(row, draw0 + idx[i]) for i < n: bit-identical to the scalar stream, Philox
// evaluated 16 lanes at a time with AVX-512 where the CPU has it (checked at run time).
void uniforms_at(const RngArgs& rng, int64_t row, int64_t draw0, const int32_t* idx, int64_t n,
                 float* u);

// ---- implementation -----------------------------------------------------------------------------
void parallel_run(int64_t n, void (*call)(const void*, int64_t), const void* ctx);

template <class F>
void parallel_for(int64_t n, const F& f) {
  if (n <= 0) return;
  if (n == 1 || host_threads() <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  parallel_run(n, [](const void* c, int64_t i) { (*static_cast<const F*>(c))(i); }, &f);
}

template <class F>
void parallel_for(int64_t n, int64_t work_per_item, const F& f) {
  if (n > 0 && work_per_item < kParallelMinWork / n) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  parallel_for(n, f);
}

}  // namespace specops
