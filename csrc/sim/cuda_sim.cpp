// The cuda_sim scheduler: launches, blocks, barriers and faults (see cuda_sim.h).
#include "cuda_sim.h"

#include <stdlib.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fiber.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_SIM_NO_CANARY 1
#endif
#if defined(__SANITIZE_THREAD__)
#define CUDA_SIM_TSAN 1
// The OS-thread mode's own bookkeeping (one mutex per launch) is hidden from ThreadSanitizer,
// which would otherwise see every barrier arrival as synchronising with every later one (a
// stale shared-memory read would then look ordered before the write it missed).  Instead the
// happens-before edges of CUDA's semantics are declared explicitly: a barrier's arrivals
// release, its departures acquire (per phase); likewise warp shuffles, block start and end.
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

ThreadCtx* fiber_ctx = nullptr;
thread_local ThreadCtx* tls_ctx = nullptr;

namespace {

struct Abort {};  // unwinds a simulated thread once its launch is aborted

enum class State { runnable, at_barrier, at_warp, done };

constexpr size_t kFiberStack = 256 * 1024;
#ifdef CUDA_SIM_NO_CANARY
constexpr size_t kCanary = 0;  // ASan: no slack after the buffer, ASan sees every access past it
#else
constexpr size_t kCanary = 64;
#endif
constexpr unsigned char kCanaryByte = 0xCD;

}  // namespace

struct SimThread {
  ThreadCtx ctx;
  State state = State::runnable;
  const char* file = nullptr;  // the barrier it waits at
  int line = 0;
  Fiber* fiber = nullptr;
  unsigned phase = 0, warp_phase = 0;  // OS-thread mode: barriers / shuffles passed in this block
};

// Fiber stacks, allocated once and reused by every launch (under launch_mutex).
static std::vector<std::unique_ptr<Fiber>>& fiber_pool() {
  static std::vector<std::unique_ptr<Fiber>> pool;
  return pool;
}

struct Warp {
  uint64_t xchg[2][32];
  int arrived = 0;
  unsigned gen = 0;
  char sync[2];  // ThreadSanitizer happens-before objects, by phase parity
};

// One block being run, with the state its threads share.
struct Block {
  const char* kernel = "";
  Dim3 idx;
  int n = 0;
  std::vector<SimThread>* threads = nullptr;
  unsigned char* dyn = nullptr;
  // block barrier
  int arrived = 0, exited = 0, warp_waiting = 0;
  const char* site_file = nullptr;
  int site_line = 0;
  const char* other_file = nullptr;  // a second barrier site seen in the same phase
  int other_line = 0;
  int or_acc = 0, or_result = 0;
  unsigned gen = 0;
  std::vector<Warp> warps;
  bool aborted = false;
  std::string fault;
  char sync[2];  // ThreadSanitizer happens-before objects of the block barrier, by phase parity
  // OS-thread mode
  std::mutex* mu = nullptr;
  std::condition_variable* cv = nullptr;
  FiberHost* host = nullptr;  // fiber mode
};

namespace {

std::string where(const Block& b) {
  char buf[96];
  snprintf(buf, sizeof buf, ", block (%u, %u, %u)", b.idx.x, b.idx.y, b.idx.z);
  return std::string("cuda_sim: kernel ") + b.kernel + buf;
}

std::string site(const char* file, int line) {
  const char* base = file;
  for (const char* p = file; p && *p; ++p)
    if (*p == '/') base = p + 1;
  return std::string(base ? base : "?") + ":" + std::to_string(line);
}

thread_local Error last_error = Error::success;
thread_local std::string last_message;
std::mutex launch_mutex;  // __shared__ statics are process-wide: one launch at a time
std::mutex attr_mutex;
std::map<const void*, int> max_dyn_smem;

Block* current_block() { return ctx().block; }
SimThread& current_thread() { return (*current_block()->threads)[ctx().tid]; }

bool use_os_threads() {
#ifdef CUDA_SIM_TSAN
  return true;
#else
  const char* v = getenv("SPECOPS_SIM_THREADS");
  return v && std::string(v) == "os";
#endif
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_str(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

uint64_t base_seed() {
  const char* v = getenv("SPECOPS_SIM_SEED");
  return v ? strtoull(v, nullptr, 10) : 0;
}

template <typename T>
void shuffle(std::vector<T>& v, uint64_t seed) {
  for (size_t i = v.size(); i > 1; --i) {
    seed = mix(seed);
    std::swap(v[i - 1], v[seed % i]);
  }
}

// Records the first fault of the block (the caller then unwinds).  Holds the block's mutex in
// OS-thread mode.
void record_fault(Block& b, const std::string& msg) {
  if (!b.aborted) {
    b.aborted = true;
    b.fault = where(b) + ": " + msg;
  }
}

// ---- barrier bookkeeping shared by both modes ----------------------------------------------

void note_site(Block& b, const char* file, int line) {
  if (b.arrived == 0) {
    b.site_file = file;
    b.site_line = line;
    b.other_file = nullptr;
  } else if ((file != b.site_file || line != b.site_line) && !b.other_file) {
    b.other_file = file;
    b.other_line = line;
  }
}

// Why the block cannot go on, when every thread is blocked or done; "" if the barrier may open.
std::string stuck_reason(const Block& b) {
  if (b.warp_waiting > 0)
    return std::to_string(b.warp_waiting) +
           " threads wait at a warp shuffle that not every lane of their warp reaches (" +
           std::to_string(b.arrived) + " at __syncthreads, " + std::to_string(b.exited) +
           " exited)";
  if (b.arrived > 0 && b.exited > 0)
    return "__syncthreads at " + site(b.site_file, b.site_line) + " reached by " +
           std::to_string(b.arrived) + " of " + std::to_string(b.n) + " threads; " +
           std::to_string(b.exited) + " exited without reaching it";
  if (b.arrived == b.n && b.other_file)
    return "threads of the block wait at different __syncthreads: " +
           site(b.site_file, b.site_line) + " and " + site(b.other_file, b.other_line);
  return "";
}

// ---- fiber mode ----------------------------------------------------------------------------

struct FiberArg {
  Block* block;
  SimThread* thread;
  void (*body)(void*);
  void* closure;
};

void fiber_main(void* p) {
  FiberArg* a = static_cast<FiberArg*>(p);
  try {
    a->body(a->closure);
  } catch (const Abort&) {
  } catch (const std::exception& e) {
    record_fault(*a->block, std::string("exception: ") + e.what());
  }
  a->thread->state = State::done;
  a->block->exited++;
  fiber_yield(*a->block->host, true);
}

void run_block_fibers(Block& b, std::vector<SimThread>& th, void (*body)(void*), void* closure,
                      uint64_t seed) {
  FiberHost host;
  b.host = &host;
  std::vector<FiberArg> args(b.n);
  for (int t = 0; t < b.n; ++t) {
    args[t] = FiberArg{&b, &th[t], body, closure};
    auto& pool = fiber_pool();
    while (static_cast<int>(pool.size()) <= t) pool.emplace_back(new Fiber());
    th[t].fiber = pool[t].get();
    fiber_alloc(*th[t].fiber, kFiberStack);
    fiber_reset(*th[t].fiber, fiber_main, &args[t]);
    th[t].state = State::runnable;
  }
  std::vector<int> order(b.n);
  for (int t = 0; t < b.n; ++t) order[t] = t;
  uint64_t phase = 0;
  shuffle(order, mix(seed ^ phase));
  while (true) {
    bool progress = true;
    while (progress) {  // run every runnable thread until it blocks or exits
      progress = false;
      for (int t : order) {
        if (th[t].state != State::runnable) continue;
        fiber_ctx = &th[t].ctx;
        fiber_resume(host, *th[t].fiber);
        fiber_ctx = nullptr;
        progress = true;
      }
    }
    if (b.exited == b.n) break;
    std::string why = b.aborted ? std::string() : stuck_reason(b);
    if (b.aborted || !why.empty()) {
      if (!b.aborted) record_fault(b, why);
      for (int t = 0; t < b.n; ++t)  // unwind the waiting threads
        if (th[t].state != State::done) th[t].state = State::runnable;
      continue;
    }
    // every live thread is at the same __syncthreads: open it
    b.or_result = b.or_acc;
    b.or_acc = 0;
    b.arrived = 0;
    b.gen++;
    for (int t = 0; t < b.n; ++t)
      if (th[t].state == State::at_barrier) th[t].state = State::runnable;
    shuffle(order, mix(seed ^ ++phase));
  }
  b.host = nullptr;
}

int barrier_fibers(Block& b, int pred, const char* file, int line) {
  SimThread& me = current_thread();
  if (b.aborted) throw Abort{};
  note_site(b, file, line);
  b.arrived++;
  b.or_acc |= pred;
  me.state = State::at_barrier;
  me.file = file;
  me.line = line;
  fiber_yield(*b.host, false);
  if (b.aborted) throw Abort{};
  return b.or_result;
}

uint64_t warp_fibers(Block& b, uint64_t mine, int src, const char* what) {
  SimThread& me = current_thread();
  if (b.aborted) throw Abort{};
  const int tid = ctx().tid, lane = tid & 31;
  if ((tid - lane) + 32 > b.n) fault(std::string(what) + " in a partial warp");
  Warp& w = b.warps[tid >> 5];
  const unsigned p = w.gen & 1;
  w.xchg[p][lane] = mine;
  if (++w.arrived == 32) {
    w.arrived = 0;
    w.gen++;
    for (int t = tid - lane; t < tid - lane + 32; ++t)
      if ((*b.threads)[t].state == State::at_warp) {
        (*b.threads)[t].state = State::runnable;
        b.warp_waiting--;
      }
  } else {
    me.state = State::at_warp;
    b.warp_waiting++;
    fiber_yield(*b.host, false);
    if (b.aborted) throw Abort{};
  }
  return w.xchg[p][src];
}

// ---- OS-thread mode ------------------------------------------------------------------------
// One OS thread per simulated thread for the whole launch; blocks in turn.  Every shared
// counter is under the launch's mutex; under ThreadSanitizer that bookkeeping is invisible to it
// (Runtime) and the CUDA happens-before edges are declared with hb_release / hb_acquire.

#ifdef CUDA_SIM_TSAN
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

int barrier_os_wait(Block& b, int pred, const char* file, int line);
uint64_t warp_os_wait(Block& b, uint64_t mine, int src, const char* what);

void fail_locked(Block& b, const std::string& why) {
  record_fault(b, why);
  b.cv->notify_all();
}

// Called with the mutex held after a thread blocks or exits.
void check_stuck_locked(Block& b) {
  if (b.aborted) return;
  if (b.arrived + b.exited + b.warp_waiting == b.n) {
    const std::string why = stuck_reason(b);
    if (!why.empty()) fail_locked(b, why);
  }
}

int barrier_os(Block& b, int pred, const char* file, int line) {
  SimThread& me = current_thread();
  void* hb = &b.sync[me.phase++ & 1];
  hb_release(hb);
  const int r = barrier_os_wait(b, pred, file, line);
  hb_acquire(hb);
  return r;
}

int barrier_os_wait(Block& b, int pred, const char* file, int line) {
  Runtime rt;
  std::unique_lock<std::mutex> lk(*b.mu);
  if (b.aborted) throw Abort{};
  note_site(b, file, line);
  b.arrived++;
  b.or_acc |= pred;
  if (b.arrived == b.n) {
    if (b.other_file) {
      fail_locked(b, stuck_reason(b));
      throw Abort{};
    }
    b.or_result = b.or_acc;
    b.or_acc = 0;
    b.arrived = 0;
    b.gen++;
    b.cv->notify_all();
    return b.or_result;
  }
  check_stuck_locked(b);
  const unsigned gen = b.gen;
  b.cv->wait(lk, [&] { return b.gen != gen || b.aborted; });
  if (b.aborted) throw Abort{};
  return b.or_result;
}

uint64_t warp_os(Block& b, uint64_t mine, int src, const char* what) {
  SimThread& me = current_thread();
  void* hb = &b.warps[ctx().tid >> 5].sync[me.warp_phase++ & 1];
  hb_release(hb);
  const uint64_t r = warp_os_wait(b, mine, src, what);
  hb_acquire(hb);
  return r;
}

uint64_t warp_os_wait(Block& b, uint64_t mine, int src, const char* what) {
  Runtime rt;
  std::unique_lock<std::mutex> lk(*b.mu);
  if (b.aborted) throw Abort{};
  const int tid = ctx().tid, lane = tid & 31;
  if ((tid - lane) + 32 > b.n) {
    lk.unlock();
    fault(std::string(what) + " in a partial warp");
  }
  Warp& w = b.warps[tid >> 5];
  const unsigned p = w.gen & 1;
  w.xchg[p][lane] = mine;
  if (++w.arrived == 32) {
    w.arrived = 0;
    w.gen++;
    b.warp_waiting -= 31;
    b.cv->notify_all();
  } else {
    b.warp_waiting++;
    check_stuck_locked(b);
    const unsigned gen = w.gen;
    b.cv->wait(lk, [&] { return w.gen != gen || b.aborted; });
    if (b.aborted) throw Abort{};
  }
  return w.xchg[p][src];  // read under the lock: the runtime's own access
}

struct OsLaunch {
  std::mutex mu;
  std::condition_variable cv;
  Block* block = nullptr;
  uint64_t seq = 0;  // bumped for each block
  bool quit = false;
  char start, end;   // happens-before: the block's set-up -> its threads -> the next block
};

void os_thread_main(OsLaunch& L, int tid, void (*body)(void*), void* closure) {
  uint64_t seen = 0;
  while (true) {
    Block* b;
    {
      Runtime rt;
      std::unique_lock<std::mutex> lk(L.mu);
      L.cv.wait(lk, [&] { return L.quit || L.seq != seen; });
      if (L.quit) return;
      seen = L.seq;
      b = L.block;
    }
    hb_acquire(&L.start);
    SimThread& me = (*b->threads)[tid];
    tls_ctx = &me.ctx;
    try {
      body(closure);
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      Runtime rt;
      std::lock_guard<std::mutex> lk(L.mu);
      record_fault(*b, std::string("exception: ") + e.what());
    }
    tls_ctx = nullptr;
    hb_release(&L.end);
    Runtime rt;
    std::lock_guard<std::mutex> lk(L.mu);
    me.state = State::done;
    b->exited++;
    check_stuck_locked(*b);
    if (b->exited == b->n) L.cv.notify_all();
  }
}

// ---- launches ------------------------------------------------------------------------------

Error set_error(Error e, const std::string& msg) {
  last_error = e;
  last_message = msg;
  return e;
}

}  // namespace

// ---- the API the kernels call ---------------------------------------------------------------

void syncthreads(const char* file, int line) { syncthreads_or(0, file, line); }

int syncthreads_or(int pred, const char* file, int line) {
  Block& b = *current_block();
  return b.mu ? barrier_os(b, pred, file, line) : barrier_fibers(b, pred, file, line);
}

uint64_t warp_exchange(uint64_t mine, int src_lane, const char* what) {
  Block& b = *current_block();
  return b.mu ? warp_os(b, mine, src_lane, what) : warp_fibers(b, mine, src_lane, what);
}

void fault(const std::string& what) {
  Block& b = *current_block();
  const std::string msg = "thread " + std::to_string(ctx().tid) + ": " + what;
  if (b.mu) {
    Runtime rt;
    std::lock_guard<std::mutex> lk(*b.mu);
    fail_locked(b, msg);
  } else {
    record_fault(b, msg);
  }
  throw Abort{};
}

void fault_index(int64_t i, int64_t n) {
  fault("shared-memory (SmemArray) index " + std::to_string(i) + " out of range [0, " +
        std::to_string(n) + ")");
}

unsigned char* dynamic_smem_raw() { return current_block()->dyn; }

void set_max_dynamic_smem(const void* kernel, int bytes) {
  std::lock_guard<std::mutex> lk(attr_mutex);
  max_dyn_smem[kernel] = bytes;
}

Error take_last_error() {
  const Error e = last_error;
  last_error = Error::success;
  return e;
}

const char* error_string(Error e) {
  if (e == Error::success) return "no error";
  return last_message.empty() ? "cuda_sim error" : last_message.c_str();
}

Error launch_impl(const char* name, const void* kernel, Dim3 grid, Dim3 block, size_t smem,
                  void (*body)(void*), void* closure) {
  const std::string who = std::string("cuda_sim: kernel ") + name + ": ";
  // The launch checks of the CUDA runtime (sm_80 / sm_90 limits).
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return set_error(Error::invalid_configuration,
                     who + "invalid block (" + std::to_string(block.x) + ", " +
                         std::to_string(block.y) + ", " + std::to_string(block.z) + ")");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535)
    return set_error(Error::invalid_configuration,
                     who + "invalid grid (" + std::to_string(grid.x) + ", " +
                         std::to_string(grid.y) + ", " + std::to_string(grid.z) + ")");
  {
    std::lock_guard<std::mutex> lk(attr_mutex);
    auto it = max_dyn_smem.find(kernel);
    const size_t limit = it == max_dyn_smem.end() ? 48 * 1024 : static_cast<size_t>(it->second);
    if (smem > 48 * 1024 && smem > limit)
      return set_error(Error::invalid_value,
                       who + std::to_string(smem) + " bytes of dynamic shared memory without " +
                           "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) raising the " +
                           std::to_string(limit) + "-byte limit");
  }

  std::lock_guard<std::mutex> launch_lock(launch_mutex);
  const int n = static_cast<int>(threads);
  std::vector<SimThread> th(n);
  for (int t = 0; t < n; ++t) {
    ThreadCtx& c = th[t].ctx;
    c.tid = t;
    c.thread_idx = Dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
    c.block_dim = block;
    c.grid_dim = grid;
  }
  // Dynamic shared memory: the launch's bytes, then a canary (none under ASan).
  std::unique_ptr<unsigned char[]> dyn(new unsigned char[smem + kCanary]);
  // Blocks in a shuffled order (a kernel must not depend on it), fixed per launch shape.
  std::vector<Dim3> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.emplace_back(x, y, z);
  const uint64_t seed = mix(hash_str(name) ^ base_seed() ^ (uint64_t{grid.x} << 32) ^
                            (uint64_t{grid.y} << 16) ^ grid.z);
  shuffle(blocks, seed);

  const bool os = use_os_threads();
  OsLaunch L;
  std::vector<std::thread> pool;
  std::string fault_msg;
  Block b;
  for (const Dim3& bi : blocks) {
    b = Block();
    b.kernel = name;
    b.idx = bi;
    b.n = n;
    b.threads = &th;
    b.dyn = dyn.get();
    b.warps.resize((n + 31) / 32);
    memset(dyn.get(), 0xff, smem);  // uninitialised shared memory reads as NaN / -1
    memset(dyn.get() + smem, kCanaryByte, kCanary);
    for (int t = 0; t < n; ++t) {
      th[t].ctx.block_idx = bi;
      th[t].ctx.block = &b;
      th[t].state = State::runnable;
    }
    const uint64_t bseed = mix(seed ^ (uint64_t{bi.x} << 40) ^ (uint64_t{bi.y} << 20) ^ bi.z);
    if (os) {
      for (int t = 0; t < n; ++t) th[t].phase = th[t].warp_phase = 0;
      b.mu = &L.mu;
      b.cv = &L.cv;
      hb_release(&L.start);
      if (pool.empty())
        for (int t = 0; t < n; ++t)
          pool.emplace_back(os_thread_main, std::ref(L), t, body, closure);
      {
        Runtime rt;
        std::unique_lock<std::mutex> lk(L.mu);
        L.block = &b;
        L.seq++;
        L.cv.notify_all();
        L.cv.wait(lk, [&] { return b.exited == b.n; });
      }
      hb_acquire(&L.end);
    } else {
      run_block_fibers(b, th, body, closure, bseed);
    }
    if (!b.aborted)
      for (size_t i = 0; i < kCanary; ++i)
        if (dyn[smem + i] != kCanaryByte) {
          record_fault(b, "a write " + std::to_string(i) + " bytes past the end of its " +
                              std::to_string(smem) + " bytes of dynamic shared memory");
          break;
        }
    if (b.aborted) {
      fault_msg = b.fault;
      break;
    }
  }
  if (os) {
    {
      Runtime rt;
      std::lock_guard<std::mutex> lk(L.mu);
      L.quit = true;
      L.cv.notify_all();
    }
    for (std::thread& t : pool) t.join();
  }
  if (!fault_msg.empty()) return set_error(Error::launch, fault_msg);
  return set_error(Error::success, "");
}

}  // namespace cuda_sim
