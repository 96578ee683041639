// Fibers for cuda_sim (see fiber.h).
#include "fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDA_SIM_ASAN 1
#endif
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
}  // namespace

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

}  // namespace cuda_sim

#if defined(__x86_64__)
// cuda_sim_switch(save, load): push the callee-saved registers, MXCSR and the x87 control word,
// store rsp to *save, load rsp from load, pop them, return into the other context.
extern "C" void cuda_sim_switch(void** save, void* load);
extern "C" void cuda_sim_trampoline();
extern "C" __attribute__((visibility("hidden"), used)) void cuda_sim_fiber_start(
    cuda_sim::Fiber* f);
asm(R"(
  .text
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
)");

extern "C" void cuda_sim_fiber_start(cuda_sim::Fiber* f) {
#ifdef CUDA_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &cuda_sim::host_stack_bottom,
                                  &cuda_sim::host_stack_size);
#endif
  f->entry(f->arg);  // ends with fiber_yield(host, true): never returns
  abort();
}

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
  sp[6] = 0;                                                  // rbp
  sp[5] = 0;                                                  // rbx
  sp[4] = reinterpret_cast<uint64_t>(&f);                     // r12 -> fiber_start's argument
  sp[3] = 0;                                                  // r13
  sp[2] = 0;                                                  // r14
  sp[1] = 0;                                                  // r15
  const uint32_t csr[2] = {0x1F80u, 0x037Fu};                 // MXCSR, x87 control word
  __builtin_memcpy(&sp[0], csr, 8);
  f.sp = sp;
}

void fiber_resume(FiberHost& host, Fiber& f) {
  host.current = &f;
#ifdef CUDA_SIM_ASAN
  __sanitizer_start_switch_fiber(&host.self.asan_fake_stack, f.stack, f.stack_size);
#endif
  cuda_sim_switch(&host.self.sp, f.sp);
#ifdef CUDA_SIM_ASAN
  __sanitizer_finish_switch_fiber(host.self.asan_fake_stack, nullptr, nullptr);
#endif
  host.current = nullptr;
}

void fiber_yield(FiberHost& host, bool finished) {
  Fiber& f = *host.current;
#ifdef CUDA_SIM_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake_stack, host_stack_bottom,
                                 host_stack_size);
#else
  (void)finished;
#endif
  cuda_sim_switch(&f.sp, host.self.sp);
#ifdef CUDA_SIM_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &host_stack_bottom, &host_stack_size);
#endif
}

}  // namespace cuda_sim

#else  // ucontext fallback

namespace cuda_sim {

namespace {
void ucontext_entry(unsigned lo, unsigned hi) {
  Fiber* f = reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | lo);
#ifdef CUDA_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &host_stack_bottom, &host_stack_size);
#endif
  f->entry(f->arg);
  abort();
}
ucontext_t* ctx_of(Fiber& f) {
  if (!f.sp) f.sp = new ucontext_t();
  return static_cast<ucontext_t*>(f.sp);
}
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

void fiber_resume(FiberHost& host, Fiber& f) {
  host.current = &f;
#ifdef CUDA_SIM_ASAN
  __sanitizer_start_switch_fiber(&host.self.asan_fake_stack, f.stack, f.stack_size);
#endif
  swapcontext(ctx_of(host.self), ctx_of(f));
#ifdef CUDA_SIM_ASAN
  __sanitizer_finish_switch_fiber(host.self.asan_fake_stack, nullptr, nullptr);
#endif
  host.current = nullptr;
}

void fiber_yield(FiberHost& host, bool finished) {
  Fiber& f = *host.current;
#ifdef CUDA_SIM_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake_stack, host_stack_bottom,
                                 host_stack_size);
#else
  (void)finished;
#endif
  swapcontext(ctx_of(f), ctx_of(host.self));
#ifdef CUDA_SIM_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &host_stack_bottom, &host_stack_size);
#endif
}

}  // namespace cuda_sim

#endif
