// Fibers for cuda_sim (see fiber.h).  One primitive differs by platform, switch_to (save the
// current context into `from`, resume `to`); resume / yield around it announce every switch to
// AddressSanitizer.
#include "fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_SIM_ASAN 1
#endif

#ifdef CUDA_SIM_ASAN
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old,
                                     size_t* size_old);
}
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace cuda_sim {

namespace {

#ifdef CUDA_SIM_ASAN
thread_local const void* host_stack_bottom = nullptr;
thread_local size_t host_stack_size = 0;
#endif

// ASan: before a switch, the stack being entered (nullptr fake-stack slot: the current fiber
// never resumes); after it, the stack that was left.
void asan_leave(void** fake_stack, const void* bottom, size_t size) {
#ifdef CUDA_SIM_ASAN
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}
void asan_arrive(void* fake_stack, bool record_host) {
#ifdef CUDA_SIM_ASAN
  if (record_host)
    __sanitizer_finish_switch_fiber(fake_stack, &host_stack_bottom, &host_stack_size);
  else
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  (void)fake_stack, (void)record_host;
#endif
}
const void* host_bottom() {
#ifdef CUDA_SIM_ASAN
  return host_stack_bottom;
#else
  return nullptr;
#endif
}
size_t host_size() {
#ifdef CUDA_SIM_ASAN
  return host_stack_size;
#else
  return 0;
#endif
}

void switch_to(Fiber& from, Fiber& to);

}  // namespace

// The first code a fiber runs (from the trampoline or ucontext's entry).
extern "C" __attribute__((visibility("hidden"), used)) void cuda_sim_fiber_start(Fiber* f) {
  asan_arrive(nullptr, true);
  f->entry(f->arg);  // ends with fiber_yield(host, true): never returns
  abort();
}

void fiber_alloc(Fiber& f, size_t bytes) {
  if (f.stack) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  bytes = (bytes + page - 1) / page * page;
  void* mem = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) throw std::bad_alloc();
  mprotect(mem, page, PROT_NONE);  // a stack overflow faults instead of corrupting memory
  f.stack = static_cast<char*>(mem) + page;
  f.stack_size = bytes;
}

void fiber_resume(FiberHost& host, Fiber& f) {
  host.current = &f;
  asan_leave(&host.self.asan_fake_stack, f.stack, f.stack_size);
  switch_to(host.self, f);
  asan_arrive(host.self.asan_fake_stack, false);
  host.current = nullptr;
}

void fiber_yield(FiberHost& host, bool finished) {
  Fiber& f = *host.current;
  asan_leave(finished ? nullptr : &f.asan_fake_stack, host_bottom(), host_size());
  switch_to(f, host.self);
  asan_arrive(f.asan_fake_stack, true);
}

}  // namespace cuda_sim

#if defined(__x86_64__)
// cuda_sim_switch(save, load): push the callee-saved registers, MXCSR and the x87 control word,
// store rsp to *save, load rsp from load, pop them, return into the other context.
extern "C" void cuda_sim_switch(void** save, void* load);
extern "C" void cuda_sim_trampoline();
asm(R"(
  .pushsection .text
  .p2align 4
  .globl cuda_sim_switch
  .hidden cuda_sim_switch
  .type cuda_sim_switch,@function
cuda_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_sim_switch, .-cuda_sim_switch

  .p2align 4
  .globl cuda_sim_trampoline
  .hidden cuda_sim_trampoline
  .type cuda_sim_trampoline,@function
cuda_sim_trampoline:
  movq %r12, %rdi
  call cuda_sim_fiber_start
  ud2
  .size cuda_sim_trampoline, .-cuda_sim_trampoline
  .popsection
)");

namespace cuda_sim {

void fiber_reset(Fiber& f, void (*entry)(void*), void* arg) {
  f.entry = entry;
  f.arg = arg;
  // Top of stack, 16-aligned; the return address into the trampoline sits at top - 8, so the
  // trampoline runs with rsp 16-aligned and its call gives fiber_start the ABI's alignment.
  uint64_t* top = reinterpret_cast<uint64_t*>(
      (reinterpret_cast<uintptr_t>(f.stack + f.stack_size) & ~uintptr_t{15}));
  uint64_t* sp = top - 8;
  sp[7] = reinterpret_cast<uint64_t>(&cuda_sim_trampoline);  // ret
  sp[6] = 0;                                                 // rbp
  sp[5] = 0;                                                 // rbx
  sp[4] = reinterpret_cast<uint64_t>(&f);                    // r12 -> fiber_start's argument
  sp[3] = 0;                                                 // r13
  sp[2] = 0;                                                 // r14
  sp[1] = 0;                                                 // r15
  // the launching thread's floating-point control state (rounding, FTZ/DAZ), as an OS thread
  // would inherit it
  uint32_t csr[2] = {__builtin_ia32_stmxcsr(), 0};
  uint16_t cw;
  asm volatile("fnstcw %0" : "=m"(cw));
  csr[1] = cw;
  __builtin_memcpy(&sp[0], csr, 8);
  f.sp = sp;
}

namespace {
void switch_to(Fiber& from, Fiber& to) { cuda_sim_switch(&from.sp, to.sp); }
}  // namespace

}  // namespace cuda_sim

#else  // ucontext

namespace cuda_sim {

namespace {
void ucontext_entry(unsigned lo, unsigned hi) {
  cuda_sim_fiber_start(reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | lo));
}
ucontext_t* ctx_of(Fiber& f) {
  if (!f.sp) f.sp = new ucontext_t();
  return static_cast<ucontext_t*>(f.sp);
}
void switch_to(Fiber& from, Fiber& to) { swapcontext(ctx_of(from), ctx_of(to)); }
}  // namespace

void fiber_reset(Fiber& f, void (*entry)(void*), void* arg) {
  f.entry = entry;
  f.arg = arg;
  ucontext_t* uc = ctx_of(f);
  getcontext(uc);
  uc->uc_stack.ss_sp = f.stack;
  uc->uc_stack.ss_size = f.stack_size;
  uc->uc_link = nullptr;
  const uintptr_t p = reinterpret_cast<uintptr_t>(&f);
  makecontext(uc, reinterpret_cast<void (*)()>(&ucontext_entry), 2,
              static_cast<unsigned>(p & 0xffffffffu), static_cast<unsigned>(p >> 32));
}

}  // namespace cuda_sim

#endif
