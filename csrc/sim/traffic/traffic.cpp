// The traffic counters of cuda_sim (issue 36; docs/gpu_cost.md): every global load and store the
// CUDA kernels' device code makes, per launch, CTA and warp request, counted on the CPU.
//
// How: the module specops._traffic is the CPU-only build of specops._C with every object compiled
// with GCC's ThreadSanitizer instrumentation (-fsanitize=thread, no TSan runtime linked), which
// calls __tsan_readN / __tsan_writeN / __tsan_atomic* before each memory access that survives
// optimisation.  This file (built without instrumentation) defines those hooks: it counts an
// access when a launch is being watched, the caller is a simulated thread, and the address lies
// in a tensor the binding checked or made (global memory; shared memory is a static or the
// launch's dynamic buffer, locals live on the fibers' stacks: neither is a tensor).  GCC's
// instrumentation needs no change to the kernels; Clang's -fsanitize-coverage=trace-loads would
// too, but the build machines have GCC only.
//
// Terms (as Nsight Compute counts l1tex global requests and sectors):
//   - an access is one thread's load or store of bytes [lo, lo + n).  A vector load the compiler
//     split into scalar loads (float4 -> 4 x 4 bytes, each its own instruction) is put back
//     together: consecutive accesses of one thread from different sites, in one direction,
//     inside one aligned 16-byte window and not overlapping, form one access;
//   - a request is a warp's k-th execution of one access site between two barriers (the k-th
//     execution by each of its threads); its sectors are the distinct 32-byte segments its lanes
//     touch.  Atomics count as a read and a write.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <stdint.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_sim.h"
#include "sim_block.h"
#include "tensor_arg.h"

namespace py = pybind11;

namespace {

struct LaunchTraffic {
  std::string kernel;
  cuda_sim::Dim3 grid, block;
  uint64_t bytes_read = 0, bytes_written = 0, requests = 0, sectors = 0, barriers = 0;
  std::vector<uint64_t> cta_bytes, cta_barriers;  // per CTA, in the order the CTAs ran
};

struct Pending {  // the access of one thread being put together (see above)
  uintptr_t window = 0, site = 0;
  uint16_t mask = 0;  // bytes of the 16-byte window covered
  unsigned gen = 0;
  bool write = false, open = false;
};

struct ReqKey {
  uint64_t warp, site, gen, k, write;
  bool operator==(const ReqKey& o) const {
    return warp == o.warp && site == o.site && gen == o.gen && k == o.k && write == o.write;
  }
};
struct ReqHash {
  size_t operator()(const ReqKey& r) const {
    uint64_t h = r.site * 0x9E3779B97F4A7C15ull;
    h ^= (r.warp << 40) ^ (r.gen << 20) ^ (r.k << 1) ^ r.write;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
struct ExecKey {
  uint64_t tid, site, gen;
  bool operator==(const ExecKey& o) const { return tid == o.tid && site == o.site && gen == o.gen; }
};
struct ExecHash {
  size_t operator()(const ExecKey& e) const {
    uint64_t h = e.site * 0x9E3779B97F4A7C15ull ^ (e.tid << 32) ^ e.gen;
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

class Counter final : public cuda_sim::LaunchObserver {
 public:
  bool watching = false;  // inside a watched launch
  std::vector<LaunchTraffic> launches;

  void launch_begin(const char* kernel, cuda_sim::Dim3 grid, cuda_sim::Dim3 block) override {
    LaunchTraffic t;
    t.kernel = kernel;
    t.grid = grid;
    t.block = block;
    t.cta_bytes.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
    launches.push_back(std::move(t));
    spans_.clear();
    if (const specops::Outputs* o = specops::Outputs::active())
      for (const auto& s : o->spans)
        if (s.device < 0) spans_.emplace_back(s.lo, s.hi);
    std::sort(spans_.begin(), spans_.end());
    size_t m = 0;  // overlapping spans (views of one tensor) merged
    for (const auto& sp : spans_) {
      if (m && sp.first <= spans_[m - 1].second)
        spans_[m - 1].second = std::max(spans_[m - 1].second, sp.second);
      else
        spans_[m++] = sp;
    }
    spans_.resize(m);
    last_site_.assign(static_cast<size_t>(block.x) * block.y * block.z, 0);
    pending_.assign(static_cast<size_t>(block.x) * block.y * block.z, Pending{});
    watching = true;
  }
  void block_begin(cuda_sim::Dim3) override { block_bytes_ = 0; }
  void block_end(unsigned barriers) override {
    for (size_t t = 0; t < pending_.size(); ++t) flush(t);
    LaunchTraffic& l = launches.back();
    l.requests += reqs_.size();
    for (const auto& kv : reqs_) l.sectors += kv.second.size();
    l.barriers += barriers;
    l.cta_bytes.push_back(block_bytes_);
    l.cta_barriers.push_back(barriers);
    reqs_.clear();
    execs_.clear();
  }
  void launch_end() override { watching = false; }

  // One access by the running simulated thread (site: the instruction after the hook's call).
  void access(uintptr_t p, uint64_t n, bool write, uintptr_t site) {
    const cuda_sim::ThreadCtx* c = cuda_sim::fiber_ctx;
    if (c == nullptr || !global(p)) return;
    Pending& q = pending_[c->tid];
    const unsigned gen = c->block->gen;
    const uintptr_t window = p & ~uintptr_t{15};
    const bool fits = n <= 16 && ((p + n - 1) & ~uintptr_t{15}) == window;
    const uint16_t mask = fits ? static_cast<uint16_t>(((1u << n) - 1) << (p - window)) : 0;
    if (q.open && fits && q.write == write && q.gen == gen && q.window == window &&
        q.site != site && last_site_[c->tid] != site && (q.mask & mask) == 0) {
      q.mask |= mask;  // the next piece of a split vector access
      last_site_[c->tid] = site;
      return;
    }
    flush(c->tid);
    last_site_[c->tid] = site;
    if (fits) {
      q = Pending{window, site, mask, gen, write, true};
      return;
    }
    count(c->tid, site, gen, write, p, n);  // wider than a vector: one access as it is
  }

 private:
  std::vector<std::pair<uintptr_t, uintptr_t>> spans_;  // the call's tensors, sorted by start
  std::vector<Pending> pending_;                        // by thread of the block
  std::vector<uintptr_t> last_site_;                    // by thread: its last access's site
  std::unordered_map<ReqKey, std::vector<uint64_t>, ReqHash> reqs_;  // request -> its sectors
  std::unordered_map<ExecKey, uint64_t, ExecHash> execs_;  // executions of a site by a thread
  uint64_t block_bytes_ = 0;

  // Does an access at p start in one of the call's tensors (spans_: disjoint, sorted)?
  bool global(uintptr_t p) const {
    auto it = std::upper_bound(spans_.begin(), spans_.end(), std::make_pair(p, ~uintptr_t{0}));
    return it != spans_.begin() && p < (--it)->second;
  }

  void flush(size_t tid) {
    Pending& q = pending_[tid];
    if (!q.open) return;
    q.open = false;
    const uint64_t n = static_cast<uint64_t>(__builtin_popcount(q.mask));
    count(tid, q.site, q.gen, q.write, q.window + __builtin_ctz(q.mask), n);
  }

  void count(size_t tid, uintptr_t site, unsigned gen, bool write, uintptr_t p, uint64_t n) {
    LaunchTraffic& l = launches.back();
    (write ? l.bytes_written : l.bytes_read) += n;
    block_bytes_ += n;
    const uint64_t k = ++execs_[ExecKey{tid, site, gen}];
    std::vector<uint64_t>& sec = reqs_[ReqKey{tid / 32, site, gen, k, write}];
    for (uint64_t s = p >> 5; s <= (p + n - 1) >> 5; ++s)
      if (std::find(sec.begin(), sec.end(), s) == sec.end()) sec.push_back(s);
  }
};

Counter g_counter;

inline void hook(const volatile void* p, uint64_t n, bool write, void* ret) {
  if (g_counter.watching)
    g_counter.access(reinterpret_cast<uintptr_t>(p), n, write, reinterpret_cast<uintptr_t>(ret));
}

}  // namespace

// ---- the ThreadSanitizer ABI GCC's instrumentation calls ---------------------------------------
#define SPECOPS_TSAN_RW(N)                                                                    \
  extern "C" void __tsan_read##N(void* p) { hook(p, N, false, __builtin_return_address(0)); } \
  extern "C" void __tsan_write##N(void* p) { hook(p, N, true, __builtin_return_address(0)); } \
  extern "C" void __tsan_unaligned_read##N(void* p) {                                         \
    hook(p, N, false, __builtin_return_address(0));                                           \
  }                                                                                           \
  extern "C" void __tsan_unaligned_write##N(void* p) {                                        \
    hook(p, N, true, __builtin_return_address(0));                                            \
  }                                                                                           \
  extern "C" void __tsan_volatile_read##N(void* p) {                                          \
    hook(p, N, false, __builtin_return_address(0));                                           \
  }                                                                                           \
  extern "C" void __tsan_volatile_write##N(void* p) {                                         \
    hook(p, N, true, __builtin_return_address(0));                                            \
  }
SPECOPS_TSAN_RW(1)
SPECOPS_TSAN_RW(2)
SPECOPS_TSAN_RW(4)
SPECOPS_TSAN_RW(8)
SPECOPS_TSAN_RW(16)
#undef SPECOPS_TSAN_RW

extern "C" void __tsan_read_range(void* p, unsigned long n) {
  if (n) hook(p, n, false, __builtin_return_address(0));
}
extern "C" void __tsan_write_range(void* p, unsigned long n) {
  if (n) hook(p, n, true, __builtin_return_address(0));
}
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// Atomics: performed sequentially consistent (at least as strong as asked), counted as a read
// and a write of the word (a load as a read, a store as a write).
#define SPECOPS_TSAN_ATOMIC(B, T)                                                                 \
  extern "C" T __tsan_atomic##B##_load(const volatile T* a, int) {                                \
    hook(a, sizeof(T), false, __builtin_return_address(0));                                       \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                  \
  }                                                                                               \
  extern "C" void __tsan_atomic##B##_store(volatile T* a, T v, int) {                             \
    hook(a, sizeof(T), true, __builtin_return_address(0));                                        \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                     \
  }                                                                                               \
  SPECOPS_TSAN_RMW(B, T, exchange, __atomic_exchange_n)                                           \
  SPECOPS_TSAN_RMW(B, T, fetch_add, __atomic_fetch_add)                                           \
  SPECOPS_TSAN_RMW(B, T, fetch_sub, __atomic_fetch_sub)                                           \
  SPECOPS_TSAN_RMW(B, T, fetch_and, __atomic_fetch_and)                                           \
  SPECOPS_TSAN_RMW(B, T, fetch_or, __atomic_fetch_or)                                             \
  SPECOPS_TSAN_RMW(B, T, fetch_xor, __atomic_fetch_xor)                                           \
  SPECOPS_TSAN_RMW(B, T, fetch_nand, __atomic_fetch_nand)                                         \
  extern "C" int __tsan_atomic##B##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) { \
    rmw_hook(a, sizeof(T), __builtin_return_address(0));                                          \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
  }                                                                                               \
  extern "C" int __tsan_atomic##B##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {   \
    rmw_hook(a, sizeof(T), __builtin_return_address(0));                                          \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
  }                                                                                               \
  extern "C" T __tsan_atomic##B##_compare_exchange_val(volatile T* a, T c, T v, int, int) {       \
    rmw_hook(a, sizeof(T), __builtin_return_address(0));                                          \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);             \
    return c;                                                                                     \
  }
#define SPECOPS_TSAN_RMW(B, T, NAME, BUILTIN)                       \
  extern "C" T __tsan_atomic##B##_##NAME(volatile T* a, T v, int) { \
    rmw_hook(a, sizeof(T), __builtin_return_address(0));            \
    return BUILTIN(a, v, __ATOMIC_SEQ_CST);                         \
  }

namespace {
inline void rmw_hook(const volatile void* a, uint64_t n, void* ret) {
  hook(a, n, false, ret);
  hook(a, n, true, ret);
}
}  // namespace

SPECOPS_TSAN_ATOMIC(8, char)
SPECOPS_TSAN_ATOMIC(16, short)
SPECOPS_TSAN_ATOMIC(32, int)
SPECOPS_TSAN_ATOMIC(64, long)
#undef SPECOPS_TSAN_ATOMIC
#undef SPECOPS_TSAN_RMW

namespace specops {

// specops._traffic.traffic_begin() / traffic_end() -> one dict per launch since the begin.
void bind_traffic(py::module_& m) {
  m.def("traffic_begin", [] {
    g_counter.launches.clear();
    cuda_sim::observer = &g_counter;
  });
  m.def("traffic_end", [] {
    cuda_sim::observer = nullptr;
    py::list out;
    for (const LaunchTraffic& l : g_counter.launches) {
      py::dict d;
      d["kernel"] = l.kernel;
      d["grid"] = py::make_tuple(l.grid.x, l.grid.y, l.grid.z);
      d["block"] = py::make_tuple(l.block.x, l.block.y, l.block.z);
      d["bytes_read"] = l.bytes_read;
      d["bytes_written"] = l.bytes_written;
      d["requests"] = l.requests;
      d["sectors"] = l.sectors;
      d["barriers"] = l.barriers;
      d["cta_bytes"] = l.cta_bytes;
      d["cta_barriers"] = l.cta_barriers;
      out.append(d);
    }
    g_counter.launches.clear();
    return out;
  });
}

}  // namespace specops
