// Fibers of the cuda_sim scheduler: a simulated thread's own stack and a context switch.  On
// x86-64 the switch is a few instructions (callee-saved registers and the stack pointer);
// elsewhere ucontext.  Under AddressSanitizer every switch is announced to it.
#pragma once
#include <stddef.h>

namespace cuda_sim {

struct Fiber {
  void* sp = nullptr;  // saved stack pointer (x86-64) or ucontext_t* (fallback)
  char* stack = nullptr;
  size_t stack_size = 0;
  void* asan_fake_stack = nullptr;
  void (*entry)(void*) = nullptr;
  void* arg = nullptr;
};

// The scheduler's own context (the OS thread's stack) and the fiber switches.
struct FiberHost {
  Fiber self;
  Fiber* current = nullptr;
};

// Allocates (once) a stack of `bytes` with a guard page below it.
void fiber_alloc(Fiber& f, size_t bytes);
// Prepares f to run entry(arg) from the top of its stack when next resumed.
void fiber_reset(Fiber& f, void (*entry)(void*), void* arg);
// Scheduler -> fiber: runs f until it yields or finishes.
void fiber_resume(FiberHost& host, Fiber& f);
// Fiber -> scheduler.  `finished`: f never runs again (until reset).
void fiber_yield(FiberHost& host, bool finished);

}  // namespace cuda_sim
