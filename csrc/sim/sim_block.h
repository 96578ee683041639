// cuda_sim internals shared by the scheduler (cuda_sim.cpp) and its two modes: fibers
// (sim_fibers.cpp) and one OS thread per simulated thread (sim_os.cpp).
#pragma once
#include <stdint.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_sim.h"
#include "fiber.h"

namespace cuda_sim {

struct Abort {};  // unwinds a simulated thread once its launch is aborted

enum class State { runnable, at_barrier, at_warp, done };

struct SimThread {
  ThreadCtx ctx;
  State state = State::runnable;
  Fiber* fiber = nullptr;  // fiber mode
  unsigned phase = 0;      // OS-thread mode: barriers passed in this block
};

struct Warp {
  uint64_t xchg[2][32];  // by generation parity: a fast lane's next exchange writes the other
  int arrived = 0;
  unsigned gen = 0;
};

// One block being run, with the state its threads share.
struct Block {
  const char* kernel = "";
  Dim3 idx;
  int n = 0;
  std::vector<SimThread>* threads = nullptr;
  unsigned char* dyn = nullptr;
  // the block barrier
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
  char sync[2];  // ThreadSanitizer happens-before objects of the barrier, by phase parity
  std::mutex* mu = nullptr;               // OS-thread mode
  std::condition_variable* cv = nullptr;  // OS-thread mode
  FiberHost* host = nullptr;              // fiber mode
};

inline Block& current_block() { return *ctx().block; }
inline SimThread& current_thread() { return (*current_block().threads)[ctx().tid]; }

// cuda_sim.cpp: bookkeeping both modes share (callers hold the block's mutex in OS mode).
void record_fault(Block& b, const std::string& msg);  // the first fault of the block wins
void barrier_arrive(Block& b, int pred, const char* file, int line);
void barrier_open(Block& b);  // every thread arrived: the next phase
// Why the block cannot go on when every thread is blocked or done; "" if the barrier may open.
std::string stuck_reason(const Block& b);
// Stores the caller's value for its warp's exchange; true when it is the 32nd arrival (the
// exchange is complete, the generation advanced).  *parity: where the values are.
bool warp_arrive(Block& b, uint64_t mine, unsigned* parity);

// sim_fibers.cpp
void run_block_fibers(Block& b, std::vector<SimThread>& th, void (*body)(void*), void* closure,
                      uint64_t seed);
int barrier_fibers(Block& b, int pred, const char* file, int line);
uint64_t warp_fibers(Block& b, uint64_t mine, int src, const char* what);

// sim_os.cpp: one OS thread per simulated thread for a whole launch, blocks in turn.
class OsThreads {
 public:
  OsThreads(int n, void (*body)(void*), void* closure) : n_(n), body_(body), closure_(closure) {}
  ~OsThreads();
  void run(Block& b);  // the block's threads run to completion (or its abort)

 private:
  void thread_main(int tid);
  int n_;
  void (*body_)(void*);
  void* closure_;
  std::vector<std::thread> pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  Block* block_ = nullptr;
  uint64_t seq_ = 0;  // bumped for each block
  bool quit_ = false;
  char start_, end_;  // happens-before: a block's set-up -> its threads -> the next block
};
int barrier_os(Block& b, int pred, const char* file, int line);
uint64_t warp_os(Block& b, uint64_t mine, int src, const char* what);
void fault_os(Block& b, const std::string& msg);  // record under the mutex, wake the waiters

}  // namespace cuda_sim
