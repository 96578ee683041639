// Host threading (a small blocking thread pool) and the block Philox of csrc/host_parallel.h.
//
// Why not OpenMP: torch ships its own libgomp, and two OpenMP runtimes in one process spin-wait
// against each other on a small machine (measured on the 2-core CI VM: every parallel region,
// ours and torch's, stalled in ~4 ms scheduler quanta).  The pool's workers block on a condition
// variable between jobs, so they hold a core for at most kWorkerSpin after a job.  That short
// spin, and the caller's spin for its helpers, exist because waking a blocked thread costs ~40 us
// on the VM (an idle vCPU is halted): without them two threads ran a 50 us op slower than one.
#include "host_parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "host_simd.h"  // SPECOPS_HOST_AVX512, SPECOPS_AVX512, have_avx512

namespace specops {

namespace {
std::atomic<int> g_threads{1};
thread_local bool t_in_pool = false;  // nested parallel_for runs serially

// Spin for at most `limit` until ready() holds; whether it did.
template <class Ready>
bool spin_until(const Ready& ready, std::chrono::microseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (int i = 0;; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > end) return ready();
  }
}

constexpr std::chrono::microseconds kWorkerSpin{100};  // a worker's wait for the next job
constexpr std::chrono::microseconds kCallerSpin{500};  // the caller's wait for its helpers

// One job at a time: items [0, n) handed out by an atomic counter to the caller and `helpers`
// workers; the caller returns when every helper has finished.  The job's fields are written
// under mu_ before generation_ moves, and read under mu_ after a worker sees it move.
class Pool {
 public:
  void run(int64_t n, void (*call)(const void*, int64_t), const void* ctx, int threads) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) {  // another caller's job is running: do this one serially
      for (int64_t i = 0; i < n; ++i) call(ctx, i);
      return;
    }
    const int helpers = static_cast<int>(std::min<int64_t>(threads - 1, n - 1));
    {
      std::lock_guard<std::mutex> lk(mu_);
      while (static_cast<int>(workers_) < helpers) {
        std::thread([this, id = static_cast<int>(workers_)] { loop(id); }).detach();
        ++workers_;
      }
      call_ = call;
      ctx_ = ctx;
      n_ = n;
      next_.store(0, std::memory_order_relaxed);
      helpers_ = helpers;
      active_.store(helpers, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_work_.notify_all();  // no system call when no worker sleeps
    work();
    const auto done = [this] { return active_.load(std::memory_order_acquire) == 0; };
    if (spin_until(done, kCallerSpin)) return;
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, done);
  }

 private:
  void work() {
    const bool was = t_in_pool;
    t_in_pool = true;
    for (int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) call_(ctx_, i);
    t_in_pool = was;
  }
  void loop(int id) {
    uint64_t seen = 0;
    const auto moved = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    for (;;) {
      const bool hot = spin_until(moved, kWorkerSpin);
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (!hot) cv_work_.wait(lk, moved);
        seen = generation_.load(std::memory_order_relaxed);
        if (id >= helpers_) continue;  // this job needs fewer helpers
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) cv_done_.notify_one();
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable cv_work_, cv_done_;
  size_t workers_ = 0;
  void (*call_)(const void*, int64_t) = nullptr;
  const void* ctx_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  int helpers_ = 0;
  std::atomic<int> active_{0};
  std::atomic<uint64_t> generation_{0};
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: detached workers may outlive static teardown
  return *p;
}
}  // namespace

int host_threads() { return g_threads.load(std::memory_order_relaxed); }
void set_host_threads(int n) { g_threads.store(n < 1 ? 1 : n, std::memory_order_relaxed); }

void parallel_run(int64_t n, void (*call)(const void*, int64_t), const void* ctx) {
  if (t_in_pool) {
    for (int64_t i = 0; i < n; ++i) call(ctx, i);
    return;
  }
  pool().run(n, call, ctx, host_threads());
}

namespace {

void uniforms_scalar(const RngArgs& rng, int64_t row, int64_t draw0, const int32_t* idx, int64_t n,
                     float* u) {
  for (int64_t i = 0; i < n; ++i) u[i] = rng.uniform(row, draw0 + idx[i]);
}

#if defined(SPECOPS_HOST_AVX512)
// Philox-4x32-10 on 8 counters per vector, each 32-bit word in the low half of a 64-bit lane (so
// _mm512_mul_epu32 gives the full 32 x 32 -> 64 product); two vectors in flight.  Counter
// (draw, row, offset lo, offset hi), key (seed lo, seed hi): word 0 only, as philox_uniform.
SPECOPS_AVX512 void uniforms_avx512(const RngArgs& rng, int64_t row, int64_t draw0,
                                    const int32_t* idx, int64_t n, float* u) {
  const uint64_t seed = rng.seed_of(row), off = rng.offset();
  const __m512i lo32 = _mm512_set1_epi64(0xffffffffll);
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53ll), m1 = _mm512_set1_epi64(0xCD9E8D57ll);
  const __m512i c1i = _mm512_set1_epi64(static_cast<uint32_t>(row));
  const __m512i c2i = _mm512_set1_epi64(static_cast<uint32_t>(off));
  const __m512i c3i = _mm512_set1_epi64(static_cast<uint32_t>(off >> 32));
  const __m512i d0 = _mm512_set1_epi64(draw0);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i a0 = _mm512_and_si512(
        _mm512_add_epi64(d0, _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i*)(idx + i)))),
        lo32);
    __m512i b0 = _mm512_and_si512(
        _mm512_add_epi64(d0,
                         _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i*)(idx + i + 8)))),
        lo32);
    __m512i a1 = c1i, a2 = c2i, a3 = c3i, b1 = c1i, b2 = c2i, b3 = c3i;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      const __m512i kk0 = _mm512_set1_epi64(k0), kk1 = _mm512_set1_epi64(k1);
      const __m512i pa0 = _mm512_mul_epu32(m0, a0), pa1 = _mm512_mul_epu32(m1, a2);
      const __m512i pb0 = _mm512_mul_epu32(m0, b0), pb1 = _mm512_mul_epu32(m1, b2);
      // n0 = hi1 ^ c1 ^ k0, c1 = lo1, n2 = hi0 ^ c3 ^ k1, c3 = lo0
      a0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pa1, 32), a1), kk0);
      a2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pa0, 32), a3), kk1);
      a1 = _mm512_and_si512(pa1, lo32);
      a3 = _mm512_and_si512(pa0, lo32);
      b0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pb1, 32), b1), kk0);
      b2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pb0, 32), b3), kk1);
      b1 = _mm512_and_si512(pb1, lo32);
      b3 = _mm512_and_si512(pb0, lo32);
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // u = ((word0 >> 9) + 0.5) * 2^-23, exact in float32
    const __m512 half = _mm512_set1_ps(0.5f), scale = _mm512_set1_ps(1.1920928955078125e-07f);
    const __m256 ua = _mm512_cvtepi64_ps(_mm512_srli_epi64(a0, 9));
    const __m256 ub = _mm512_cvtepi64_ps(_mm512_srli_epi64(b0, 9));
    const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(ua), ub, 1);
    _mm512_storeu_ps(u + i, _mm512_mul_ps(_mm512_add_ps(v, half), scale));
  }
  uniforms_scalar(rng, row, draw0, idx + i, n - i, u + i);
}

#endif

}  // namespace

void uniforms_at(const RngArgs& rng, int64_t row, int64_t draw0, const int32_t* idx, int64_t n,
                 float* u) {
#if defined(SPECOPS_HOST_AVX512)
  if (rng.uniforms == nullptr && have_avx512()) return uniforms_avx512(rng, row, draw0, idx, n, u);
#endif
  uniforms_scalar(rng, row, draw0, idx, n, u);
}

}  // namespace specops
