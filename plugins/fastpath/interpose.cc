// libcryo_gpu_fastpath.so: loaded into a job with LD_PRELOAD, it sits between the job and the
// CUDA driver (see registry.h for what it owns, mover.h for how it moves it, control.h for how
// cryod drives it).
//
// How calls reach it. The CUDA runtime (and PyTorch, Triton, ...) do not call cu* symbols by
// name: they dlopen libcuda.so.1, dlsym its cuGetProcAddress and ask that for every entry point.
// So the library defines dlsym: a name starting with "cu" is looked up as asked, and the answer
// is swapped for the library's wrapper when it is one of the driver functions the library
// wraps (compared by address, so every version and per-thread-stream variant of a name is
// recognised exactly); and its cuGetProcAddress does the same for every entry point it returns.
// Programs linked against libcuda call the library's exported cu* symbols directly (LD_PRELOAD
// puts them first). Every other call goes to the driver untouched, at no cost.
//
// dlsym itself is a few instructions of assembly: anything but a "cu" name, and any RTLD_NEXT
// lookup, jumps straight into glibc's dlsym with the caller's return address intact (RTLD_NEXT
// is resolved relative to the caller).

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cstdint>
#include <string>

#include "plugins/fastpath/interpose_internal.h"

// glibc's dlsym, for the assembly entry below (null until resolved).
extern "C" {
__attribute__((visibility("hidden"))) void* cryo_fp_real_dlsym = nullptr;
}

namespace cryo::fastpath::interpose {

uint64_t Calls(int slot) {
  uint64_t sum = 0;
  for (ThreadCalls* c = g_thread_calls.load(); c != nullptr; c = c->next) {
    sum += c->n[slot].load(std::memory_order_relaxed);
  }
  return sum;
}

bool Lib::EnsureCuda() {
  if (ready_.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> l(init_mu_);
  if (ready_.load()) return true;
  void* cuda = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (cuda == nullptr) return false;  // not loaded yet: the job has not started CUDA
  DlsymFn real_dlsym = RealDlsym();
  for (int i = 0; i < kSlots; ++i) g_real[i] = real_dlsym(cuda, kNames[i]);
#define CRYO_FP_RESOLVE(name) \
  driver_.name = reinterpret_cast<decltype(driver_.name)>(real_dlsym(cuda, #name));
  CRYO_FASTPATH_DRIVER_FUNCS(CRYO_FP_RESOLVE)
#undef CRYO_FP_RESOLVE
  if (!disabled_ && !driver_.Complete()) {
    disabled_ = true;
    why_disabled_ = "this CUDA driver lacks an entry point the fast path needs";
  }
  registry_ = new Registry(driver_, min_bytes_);
  MoverConfig mc;
  mc.register_host = register_host_;
  mc.register_windows = register_windows_;
  mover_ = new Mover(driver_, *registry_, gate_, capture_, mc, &collectives_);
  // NCCL's kernels are told apart by name: without the driver's names, no counting (the cut
  // then stops ranks without aligning them on a collective).
  func_name_ = reinterpret_cast<decltype(func_name_)>(real_dlsym(cuda, "cuFuncGetName"));
  kernel_name_ = reinterpret_cast<decltype(kernel_name_)>(real_dlsym(cuda, "cuKernelGetName"));
  collectives_.set_counting(func_name_ != nullptr || kernel_name_ != nullptr);
  control_ = new Control(*mover_, *registry_,
                         [this](cryo::contract::gpu_fastpath::StatusReply& r) { AddStatus(r); });
  if (!disabled_) {
    for (int i = 0; i < kSlots; ++i) {
      if (g_real[i] != nullptr) wrappers_[g_real[i]] = Wrapper(i);
    }
    if (Result r = control_->Start(); !r.ok()) {
      // Without the channel nobody can drive the fast path: let every call pass.
      disabled_ = true;
      why_disabled_ = r.error;
      wrappers_.clear();
    }
  }
  ready_.store(true, std::memory_order_release);
  return true;
}

void Lib::AfterForkInChild() {
  // CUDA does not survive fork(); the child is the driver's (and the parent's socket is not
  // the child's to serve).
  disabled_ = true;
  why_disabled_ = "a child forked from a CUDA process";
  wrappers_.clear();
  if (control_ != nullptr) control_->ForgetAfterFork();
}

Lib::Lib() {
  const char* off = ::getenv(cryo::contract::gpu_fastpath::kEnvDisable);
  if (off != nullptr && strcmp(off, "1") == 0) {
    disabled_ = true;
    why_disabled_ = std::string(cryo::contract::gpu_fastpath::kEnvDisable) + "=1";
  }
  if (const char* m = ::getenv(cryo::contract::gpu_fastpath::kEnvMinBytes)) {
    char* end = nullptr;
    unsigned long long v = strtoull(m, &end, 10);
    if (end != m && *end == '\0') min_bytes_ = v;
  }
  if (const char* r = ::getenv(cryo::contract::gpu_fastpath::kEnvHostRegister)) {
    register_host_ = strcmp(r, "1") == 0;
  }
  if (const char* r = ::getenv(cryo::contract::gpu_fastpath::kEnvRegisterWindows)) {
    register_windows_ = strcmp(r, "1") == 0;
  }
  pthread_atfork(nullptr, nullptr, [] { Lib::Get().AfterForkInChild(); });
}

void Lib::AddStatus(cryo::contract::gpu_fastpath::StatusReply& r) {
  for (int i = 0; i < kSlots; ++i) {
    uint64_t n = Calls(i);
    if (n > 0) r.calls[kNames[i]] = n;
  }
  r.wrapped_entry_points = wrappers_.size();
  if (disabled_) r.disabled = why_disabled_;
}

DlsymFn Lib::RealDlsym() {
  if (cryo_fp_real_dlsym == nullptr) {
    void* p = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == nullptr) p = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    cryo_fp_real_dlsym = p;
  }
  return reinterpret_cast<DlsymFn>(cryo_fp_real_dlsym);
}

namespace {
__attribute__((constructor(101))) void ResolveDlsymEarly() { Lib::RealDlsym(); }
}  // namespace

}  // namespace cryo::fastpath::interpose

using cryo::fastpath::interpose::DlsymFn;
using cryo::fastpath::interpose::Lib;

extern "C" {
// Called by the dlsym entry for "cu..." names (not RTLD_NEXT).
__attribute__((visibility("hidden"))) void* cryo_fp_dlsym(void* handle, const char* name) {
  DlsymFn real = Lib::RealDlsym();
  if (real == nullptr) return nullptr;
  return Lib::Get().WrapperFor(real(handle, name));
}

__attribute__((visibility("hidden"))) void* cryo_fp_real_dlsym_slow(void* handle,
                                                                    const char* name) {
  DlsymFn real = Lib::RealDlsym();
  return real != nullptr ? real(handle, name) : nullptr;
}
}

#define CRYO_FP_EXPORT_SYM(name, type)     \
  asm(".text\n"                            \
      ".globl " #name                      \
      "\n"                                 \
      ".type " #name ", @function\n" #name \
      ":\n"                                \
      "  jmp *cryo_fp_to_" #name           \
      "(%rip)\n"                           \
      ".size " #name ", .-" #name "\n");
CRYO_FP_GATED(CRYO_FP_EXPORT_SYM)
CRYO_FP_SPECIAL(CRYO_FP_EXPORT_SYM)
#undef CRYO_FP_EXPORT_SYM

// void* dlsym(void* handle, const char* name)
asm(".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    "  cmpq $-1, %rdi\n"  // RTLD_NEXT: resolved relative to the caller, which must stay the caller
    "  je 2f\n"
    "  testq %rsi, %rsi\n"
    "  je 2f\n"
    "  cmpb $0x63, (%rsi)\n"  // 'c'
    "  jne 2f\n"
    "  cmpb $0x75, 1(%rsi)\n"  // 'u'
    "  jne 2f\n"
    "  jmp cryo_fp_dlsym\n"
    "2:\n"
    "  movq cryo_fp_real_dlsym(%rip), %rax\n"
    "  testq %rax, %rax\n"
    "  je 3f\n"
    "  jmp *%rax\n"
    "3:\n"
    "  jmp cryo_fp_real_dlsym_slow\n"
    ".size dlsym, .-dlsym\n");
