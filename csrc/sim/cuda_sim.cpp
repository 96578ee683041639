// The cuda_sim scheduler: launches, barrier bookkeeping and faults (see cuda_sim.h); the two
// ways of running a block's threads are in sim_fibers.cpp and sim_os.cpp.
#include "cuda_sim.h"

#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "sim_block.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_SIM_NO_CANARY 1
#endif

namespace cuda_sim {

ThreadCtx* fiber_ctx = nullptr;
LaunchObserver* observer = nullptr;
thread_local ThreadCtx* tls_ctx = nullptr;

namespace {

#ifdef CUDA_SIM_NO_CANARY
constexpr size_t kCanary = 0;  // ASan: no slack after the buffer, ASan sees every access past it
#else
constexpr size_t kCanary = 64;
#endif
constexpr unsigned char kCanaryByte = 0xCD;

thread_local Error last_error = Error::success;
thread_local Error last_message_error = Error::success;  // the error last_message describes
thread_local std::string last_message;
std::mutex launch_mutex;  // __shared__ statics are process-wide: one launch at a time
std::mutex attr_mutex;
std::map<const void*, int> max_dyn_smem;

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

bool use_os_threads() {
#if defined(__SANITIZE_THREAD__)
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

Error set_error(Error e, const std::string& msg) {
  last_error = e;
  last_message_error = e;
  last_message = msg;
  return e;
}

// The launch checks of the CUDA runtime (sm_80 / sm_90 limits); "" if the launch may go.
std::string check_launch(const void* kernel, Dim3 grid, Dim3 block, size_t smem, Error* e) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  *e = Error::invalid_configuration;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return "invalid block (" + std::to_string(block.x) + ", " + std::to_string(block.y) + ", " +
           std::to_string(block.z) + ")";
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535)
    return "invalid grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) + ", " +
           std::to_string(grid.z) + ")";
  std::lock_guard<std::mutex> lk(attr_mutex);
  auto it = max_dyn_smem.find(kernel);
  const size_t limit = it == max_dyn_smem.end() ? 48 * 1024 : static_cast<size_t>(it->second);
  *e = Error::invalid_value;
  if (smem > 48 * 1024 && smem > limit)
    return std::to_string(smem) + " bytes of dynamic shared memory without " +
           "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) raising the " + std::to_string(limit) +
           "-byte limit";
  return "";
}

}  // namespace

// ---- bookkeeping both modes share ----------------------------------------------------------

void record_fault(Block& b, const std::string& msg) {
  if (!b.aborted) {
    b.aborted = true;
    b.fault = where(b) + ": " + msg;
  }
}

void barrier_arrive(Block& b, int pred, const char* file, int line) {
  if (b.arrived == 0) {
    b.site_file = file;
    b.site_line = line;
    b.other_file = nullptr;
  } else if ((file != b.site_file || line != b.site_line) && !b.other_file) {
    b.other_file = file;
    b.other_line = line;
  }
  b.arrived++;
  b.or_acc |= pred;
}

void barrier_open(Block& b) {
  b.or_result = b.or_acc;
  b.or_acc = 0;
  b.arrived = 0;
  b.gen++;
}

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

bool warp_arrive(Block& b, uint64_t mine, unsigned* parity) {
  const int tid = ctx().tid;
  Warp& w = b.warps[tid >> 5];
  *parity = w.gen & 1;
  w.xchg[*parity][tid & 31] = mine;
  if (++w.arrived < 32) {
    b.warp_waiting++;
    return false;
  }
  w.arrived = 0;
  w.gen++;
  b.warp_waiting -= 31;  // the other lanes were waiting
  return true;
}

// ---- the API the kernels call ----------------------------------------------------------------

void syncthreads(const char* file, int line) { syncthreads_or(0, file, line); }

int syncthreads_or(int pred, const char* file, int line) {
  Block& b = current_block();
  return b.mu ? barrier_os(b, pred, file, line) : barrier_fibers(b, pred, file, line);
}

uint64_t warp_exchange(uint64_t mine, int src_lane, const char* what) {
  Block& b = current_block();
  if ((ctx().tid | 31) >= b.n) fault(std::string(what) + " in a partial warp");
  return b.mu ? warp_os(b, mine, src_lane, what) : warp_fibers(b, mine, src_lane, what);
}

void fault(const std::string& what) {
  Block& b = current_block();
  const std::string msg = "thread " + std::to_string(ctx().tid) + ": " + what;
  if (b.mu)
    fault_os(b, msg);
  else
    record_fault(b, msg);
  throw Abort{};
}

void fault_index(int64_t i, int64_t n) {
  fault("shared-memory (SmemArray) index " + std::to_string(i) + " out of range [0, " +
        std::to_string(n) + ")");
}

unsigned char* dynamic_smem_raw() { return current_block().dyn; }

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
  if (e == last_message_error && !last_message.empty()) return last_message.c_str();
  return e == Error::invalid_value ? "cuda_sim: invalid argument" : "cuda_sim error";
}

Error launch_impl(const char* name, const void* kernel, Dim3 grid, Dim3 block, size_t smem,
                  void (*body)(void*), void* closure) {
  Error bad;
  const std::string why = check_launch(kernel, grid, block, smem, &bad);
  if (!why.empty()) return set_error(bad, std::string("cuda_sim: kernel ") + name + ": " + why);

  std::lock_guard<std::mutex> launch_lock(launch_mutex);
  const int n = static_cast<int>(block.x * block.y * block.z);
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
  uint64_t seed = mix(hash_str(name) ^ base_seed() ^ (uint64_t{grid.x} << 32) ^
                      (uint64_t{grid.y} << 16) ^ grid.z);
  for (size_t i = blocks.size(); i > 1; --i) {
    seed = mix(seed);
    std::swap(blocks[i - 1], blocks[seed % i]);
  }

  std::unique_ptr<OsThreads> os;
  if (use_os_threads()) os.reset(new OsThreads(n, body, closure));
  std::string fault_msg;
  Block b;
  if (observer) observer->launch_begin(name, grid, block);
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
    if (observer) observer->block_begin(bi);
    if (os)
      os->run(b);
    else
      run_block_fibers(b, th, body, closure,
                       mix(seed ^ (uint64_t{bi.x} << 40) ^ (uint64_t{bi.y} << 20) ^ bi.z));
    if (observer) observer->block_end(b.gen);
    for (size_t i = 0; i < kCanary && !b.aborted; ++i)
      if (dyn[smem + i] != kCanaryByte)
        record_fault(b, "a write " + std::to_string(i) + " bytes past the end of its " +
                            std::to_string(smem) + " bytes of dynamic shared memory");
    if (b.aborted) {
      fault_msg = b.fault;
      break;
    }
  }
  os.reset();  // joins the OS threads
  if (observer) observer->launch_end();
  if (!fault_msg.empty()) return set_error(Error::launch, fault_msg);
  return set_error(Error::success, "");
}

}  // namespace cuda_sim
