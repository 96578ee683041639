// cuda_sim's fiber mode (the default): a block's threads are fibers on the launching OS thread,
// switched at barriers and warp shuffles.  Between two barriers they run in a fresh
// pseudo-random order, so a shared-memory read that a missing barrier leaves unordered with its
// write sees a stale value.
#include <memory>

#include "sim_block.h"

namespace cuda_sim {

namespace {

constexpr size_t kFiberStack = 256 * 1024;

// Fiber stacks, allocated once and reused by every launch (launches are serialised).
std::vector<std::unique_ptr<Fiber>>& fiber_pool() {
  static std::vector<std::unique_ptr<Fiber>> pool;
  return pool;
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void shuffle(std::vector<int>& v, uint64_t seed) {
  for (size_t i = v.size(); i > 1; --i) {
    seed = mix(seed);
    std::swap(v[i - 1], v[seed % i]);
  }
}

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

// Blocks the calling fiber until the scheduler resumes it.
void wait_here(Block& b, SimThread& me, State s) {
  me.state = s;
  fiber_yield(*b.host, false);
  if (b.aborted) throw Abort{};
}

}  // namespace

void run_block_fibers(Block& b, std::vector<SimThread>& th, void (*body)(void*), void* closure,
                      uint64_t seed) {
  FiberHost host;
  b.host = &host;
  std::vector<FiberArg> args(b.n);
  auto& pool = fiber_pool();
  for (int t = 0; t < b.n; ++t) {
    args[t] = FiberArg{&b, &th[t], body, closure};
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
    const std::string why = b.aborted ? std::string() : stuck_reason(b);
    if (b.aborted || !why.empty()) {
      if (!b.aborted) record_fault(b, why);
      for (int t = 0; t < b.n; ++t)  // unwind the waiting threads
        if (th[t].state != State::done) th[t].state = State::runnable;
      continue;
    }
    barrier_open(b);  // every live thread is at the same __syncthreads
    for (int t = 0; t < b.n; ++t)
      if (th[t].state == State::at_barrier) th[t].state = State::runnable;
    shuffle(order, mix(seed ^ ++phase));
  }
  b.host = nullptr;
}

int barrier_fibers(Block& b, int pred, const char* file, int line) {
  if (b.aborted) throw Abort{};
  barrier_arrive(b, pred, file, line);
  wait_here(b, current_thread(), State::at_barrier);
  return b.or_result;
}

uint64_t warp_fibers(Block& b, uint64_t mine, int src, const char* what) {
  if (b.aborted) throw Abort{};
  unsigned p;
  const int first = ctx().tid & ~31;
  if (warp_arrive(b, mine, &p)) {
    for (int t = first; t < first + 32; ++t) {
      SimThread& lane = (*b.threads)[t];
      if (lane.state == State::at_warp) lane.state = State::runnable;
    }
  } else {
    wait_here(b, current_thread(), State::at_warp);
  }
  return b.warps[first >> 5].xchg[p][src];
}

}  // namespace cuda_sim
