// cuda_sim's OS-thread mode (SPECOPS_SIM_THREADS=os; always in the ThreadSanitizer build): one
// OS thread per simulated thread for the whole launch, blocks in turn.  Every shared counter is
// under one mutex.  Under ThreadSanitizer that bookkeeping is hidden from it (Runtime): a mutex
// shared by every barrier would order a stale shared-memory read before the write it missed.
// Instead CUDA's happens-before edges are declared: a barrier's arrivals release and its
// departures acquire, per barrier phase; block set-up -> its threads -> the next block.  Warp
// shuffles declare none (CUDA's __shfl_sync orders no memory).
#include "sim_block.h"

#if defined(__SANITIZE_THREAD__)
extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

namespace cuda_sim {

namespace {

#if defined(__SANITIZE_THREAD__)
struct Runtime {  // the runtime's own accesses and locks: not seen by TSan
  Runtime() {
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~Runtime() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
  }
};
void hb_release(void* p) { __tsan_release(p); }
void hb_acquire(void* p) { __tsan_acquire(p); }
#else
struct Runtime {
  Runtime() {}  // (non-trivial: no unused-variable warning)
};
void hb_release(void*) {}
void hb_acquire(void*) {}
#endif

// With the mutex held, after a thread blocked or exited.
void check_stuck_locked(Block& b) {
  if (b.aborted || b.arrived + b.exited + b.warp_waiting != b.n) return;
  const std::string why = stuck_reason(b);
  if (!why.empty()) {
    record_fault(b, why);
    b.cv->notify_all();
  }
}

int barrier_wait(Block& b, int pred, const char* file, int line) {
  Runtime rt;
  std::unique_lock<std::mutex> lk(*b.mu);
  if (b.aborted) throw Abort{};
  barrier_arrive(b, pred, file, line);
  if (b.arrived == b.n) {
    if (b.other_file) {  // all arrived, at different barriers
      record_fault(b, stuck_reason(b));
      b.cv->notify_all();
      throw Abort{};
    }
    barrier_open(b);
    b.cv->notify_all();
    return b.or_result;
  }
  check_stuck_locked(b);
  const unsigned gen = b.gen;
  b.cv->wait(lk, [&] { return b.gen != gen || b.aborted; });
  if (b.aborted) throw Abort{};
  return b.or_result;
}

}  // namespace

int barrier_os(Block& b, int pred, const char* file, int line) {
  void* hb = &b.sync[current_thread().phase++ & 1];
  hb_release(hb);
  const int r = barrier_wait(b, pred, file, line);
  hb_acquire(hb);
  return r;
}

uint64_t warp_os(Block& b, uint64_t mine, int src, const char* what) {
  Runtime rt;
  std::unique_lock<std::mutex> lk(*b.mu);
  if (b.aborted) throw Abort{};
  unsigned p;
  Warp& w = b.warps[ctx().tid >> 5];
  if (warp_arrive(b, mine, &p)) {
    b.cv->notify_all();
  } else {
    check_stuck_locked(b);
    const unsigned gen = w.gen;
    b.cv->wait(lk, [&] { return w.gen != gen || b.aborted; });
    if (b.aborted) throw Abort{};
  }
  return w.xchg[p][src];  // read under the lock: the runtime's own access
}

void fault_os(Block& b, const std::string& msg) {
  Runtime rt;
  std::lock_guard<std::mutex> lk(*b.mu);
  record_fault(b, msg);
  b.cv->notify_all();
}

OsThreads::~OsThreads() {
  {
    Runtime rt;
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
    cv_.notify_all();
  }
  for (std::thread& t : pool_) t.join();
}

void OsThreads::run(Block& b) {
  for (SimThread& t : *b.threads) t.phase = 0;
  b.mu = &mu_;
  b.cv = &cv_;
  hb_release(&start_);
  if (pool_.empty())
    for (int t = 0; t < n_; ++t) pool_.emplace_back(&OsThreads::thread_main, this, t);
  {
    Runtime rt;
    std::unique_lock<std::mutex> lk(mu_);
    block_ = &b;
    seq_++;
    cv_.notify_all();
    cv_.wait(lk, [&] { return b.exited == b.n; });
  }
  hb_acquire(&end_);
}

void OsThreads::thread_main(int tid) {
  uint64_t seen = 0;
  while (true) {
    Block* b;
    {
      Runtime rt;
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return quit_ || seq_ != seen; });
      if (quit_) return;
      seen = seq_;
      b = block_;
    }
    hb_acquire(&start_);
    SimThread& me = (*b->threads)[tid];
    tls_ctx = &me.ctx;
    try {
      body_(closure_);
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      fault_os(*b, std::string("exception: ") + e.what());
    }
    tls_ctx = nullptr;
    hb_release(&end_);
    Runtime rt;
    std::lock_guard<std::mutex> lk(mu_);
    me.state = State::done;
    b->exited++;
    check_stuck_locked(*b);
    if (b->exited == b->n) cv_.notify_all();
  }
}

}  // namespace cuda_sim
