// Keeps a job under the fast path checkpointable when it would set up an io_uring.
//
// CRIU 4.1 cannot checkpoint an io_uring instance, so cryod refuses a job holding one
// (daemon/criu/dumpable.cc). libuv sets one up whenever the kernel has it, through syscall(2),
// and falls back to epoll and its thread pool when io_uring_setup fails. PyTorch's TCPStore runs
// on libuv, so every torchrun agent held a ring, whatever its options (PyTorch 2.11 on the lent
// machines, docs/gpu.md). The library therefore answers io_uring_setup with ENOSYS, as a kernel
// without io_uring would; CRYO_GPU_FASTPATH_IO_URING=1 lets it through. This holds in every
// process the library is loaded into, also one that never touches CUDA (the torchrun agent) and
// a child forked from a CUDA process, since all of them are in the checkpoint.
//
// Only the libc entry is covered: a program that issues the system call itself (liburing) still
// gets its ring, and cryod still refuses it, naming the process.

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "lib/contract/gpu_fastpath.h"

namespace {

using SyscallFn = long (*)(long, ...);

std::atomic<SyscallFn> g_real{nullptr};
std::atomic<int> g_allow{-1};  // -1: not read yet

bool IoUringAllowed() {
  int allow = g_allow.load(std::memory_order_relaxed);
  if (allow < 0) {
    const char* v = ::getenv(cryo::contract::gpu_fastpath::kEnvIoUring);
    allow = v != nullptr && strcmp(v, "1") == 0 ? 1 : 0;
    g_allow.store(allow, std::memory_order_relaxed);
  }
  return allow == 1;
}

SyscallFn Real() {
  SyscallFn f = g_real.load(std::memory_order_acquire);
  if (f == nullptr) {
    // RTLD_NEXT from here: the definition after this library's, glibc's.
    f = reinterpret_cast<SyscallFn>(::dlsym(RTLD_NEXT, "syscall"));
    g_real.store(f, std::memory_order_release);
  }
  return f;
}

__attribute__((constructor(102))) void ResolveEarly() {
  IoUringAllowed();
  Real();
}

}  // namespace

// glibc's syscall(2) reads six arguments whatever the call passes; so does this one.
extern "C" __attribute__((visibility("default"))) long syscall(long number, ...) noexcept {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_io_uring_setup && !IoUringAllowed()) {
    errno = ENOSYS;
    return -1;
  }
  SyscallFn real = Real();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
