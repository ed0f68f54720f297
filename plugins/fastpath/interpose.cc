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
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <unordered_map>

#include "lib/contract/gpu_fastpath.h"
#include "plugins/fastpath/control.h"
#include "plugins/fastpath/driver.h"
#include "plugins/fastpath/gate.h"
#include "plugins/fastpath/legacy_ipc.h"
#include "plugins/fastpath/mover.h"
#include "plugins/fastpath/registry.h"

#if !defined(__x86_64__)
#error "the fast-path library's dlsym entry is written for x86-64"
#endif

// glibc's dlsym, for the assembly entry below (null until resolved).
extern "C" {
__attribute__((visibility("hidden"))) void* cryo_fp_real_dlsym = nullptr;
}

namespace {

using namespace cryo::fastpath;

// Wrapped entry points that only pass the gate: (exported name, declared function whose type
// it has). The per-thread default stream variants (_ptds, _ptsz) have their base's type.
#define CRYO_FP_GATED(X)                                       \
  X(cuLaunchKernel, cuLaunchKernel)                            \
  X(cuLaunchKernel_ptsz, cuLaunchKernel)                       \
  X(cuLaunchKernelEx, cuLaunchKernelEx)                        \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx)                   \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel)      \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel) \
  X(cuGraphLaunch, cuGraphLaunch)                              \
  X(cuGraphLaunch_ptsz, cuGraphLaunch)                         \
  X(cuMemcpy, cuMemcpy)                                        \
  X(cuMemcpy_ptds, cuMemcpy)                                   \
  X(cuMemcpyAsync, cuMemcpyAsync)                              \
  X(cuMemcpyAsync_ptsz, cuMemcpyAsync)                         \
  X(cuMemcpyPeer, cuMemcpyPeer)                                \
  X(cuMemcpyPeer_ptds, cuMemcpyPeer)                           \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync)                      \
  X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync)                 \
  X(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2)                          \
  X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2)                     \
  X(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2)                          \
  X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2)                     \
  X(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2)                          \
  X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2)                     \
  X(cuMemcpyDtoA_v2, cuMemcpyDtoA_v2)                          \
  X(cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA_v2)                     \
  X(cuMemcpyAtoD_v2, cuMemcpyAtoD_v2)                          \
  X(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD_v2)                     \
  X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2)                \
  X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2)           \
  X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2)                \
  X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2)           \
  X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2)                \
  X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2)           \
  X(cuMemcpy2D_v2, cuMemcpy2D_v2)                              \
  X(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2)                         \
  X(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2)            \
  X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned_v2)       \
  X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2)                    \
  X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2)               \
  X(cuMemcpy3D_v2, cuMemcpy3D_v2)                              \
  X(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2)                         \
  X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2)                    \
  X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2)               \
  X(cuMemcpy3DPeer, cuMemcpy3DPeer)                            \
  X(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer)                       \
  X(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync)                  \
  X(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync)             \
  X(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2)              \
  X(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync_v2)         \
  X(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2)          \
  X(cuMemcpy3DBatchAsync_v2_ptsz, cuMemcpy3DBatchAsync_v2)     \
  X(cuMemsetD8_v2, cuMemsetD8_v2)                              \
  X(cuMemsetD8_v2_ptds, cuMemsetD8_v2)                         \
  X(cuMemsetD16_v2, cuMemsetD16_v2)                            \
  X(cuMemsetD16_v2_ptds, cuMemsetD16_v2)                       \
  X(cuMemsetD32_v2, cuMemsetD32_v2)                            \
  X(cuMemsetD32_v2_ptds, cuMemsetD32_v2)                       \
  X(cuMemsetD2D8_v2, cuMemsetD2D8_v2)                          \
  X(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2)                     \
  X(cuMemsetD2D16_v2, cuMemsetD2D16_v2)                        \
  X(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2)                   \
  X(cuMemsetD2D32_v2, cuMemsetD2D32_v2)                        \
  X(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2)                   \
  X(cuMemsetD8Async, cuMemsetD8Async)                          \
  X(cuMemsetD8Async_ptsz, cuMemsetD8Async)                     \
  X(cuMemsetD16Async, cuMemsetD16Async)                        \
  X(cuMemsetD16Async_ptsz, cuMemsetD16Async)                   \
  X(cuMemsetD32Async, cuMemsetD32Async)                        \
  X(cuMemsetD32Async_ptsz, cuMemsetD32Async)                   \
  X(cuMemsetD2D8Async, cuMemsetD2D8Async)                      \
  X(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async)                 \
  X(cuMemsetD2D16Async, cuMemsetD2D16Async)                    \
  X(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async)               \
  X(cuMemsetD2D32Async, cuMemsetD2D32Async)                    \
  X(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async)               \
  X(cuStreamWriteValue32_v2, cuStreamWriteValue32_v2)          \
  X(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2)     \
  X(cuStreamWaitValue32_v2, cuStreamWaitValue32_v2)            \
  X(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32_v2)       \
  X(cuStreamWriteValue64_v2, cuStreamWriteValue64_v2)          \
  X(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2)     \
  X(cuStreamWaitValue64_v2, cuStreamWaitValue64_v2)            \
  X(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64_v2)       \
  X(cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2)              \
  X(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp_v2)         \
  CRYO_FP_SHARING(X)

// Calls by which processes share memory (NCCL's P2P, SHM and NVLS transports): gated like the
// rest, and counted, so that the status says what a job shares and how (docs/gpu.md).
#define CRYO_FP_SHARING(X)                      \
  X(cuIpcGetEventHandle, cuIpcGetEventHandle)   \
  X(cuIpcOpenEventHandle, cuIpcOpenEventHandle) \
  X(cuMemHostRegister_v2, cuMemHostRegister_v2) \
  X(cuMemHostUnregister, cuMemHostUnregister)   \
  X(cuMulticastCreate, cuMulticastCreate)       \
  X(cuMulticastBindMem, cuMulticastBindMem)

// Wrapped entry points with logic of their own (functions W_<name> below), with their type.
#define CRYO_FP_SPECIAL(X)                                                          \
  X(cuGetProcAddress_v2, cuGetProcAddress_v2)                                       \
  X(cuGetProcAddress, GetProcAddressV1)                                             \
  X(cuMemAlloc_v2, cuMemAlloc_v2)                                                   \
  X(cuMemFree_v2, cuMemFree_v2)                                                     \
  X(cuMemCreate, cuMemCreate)                                                       \
  X(cuMemRelease, cuMemRelease)                                                     \
  X(cuMemMap, cuMemMap)                                                             \
  X(cuMemUnmap, cuMemUnmap)                                                         \
  X(cuMemSetAccess, cuMemSetAccess)                                                 \
  X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle)                       \
  X(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle) \
  X(cuMemExportToShareableHandle, cuMemExportToShareableHandle)                     \
  X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle)                 \
  X(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2)                               \
  X(cuPointerGetAttribute, cuPointerGetAttribute)                                   \
  X(cuPointerGetAttributes, cuPointerGetAttributes)                                 \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle)                                           \
  X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle_v2)                                   \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle)                                       \
  X(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess)                                   \
  X(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2)                               \
  X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2)                          \
  X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph)                       \
  X(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph)                  \
  X(cuStreamEndCapture, cuStreamEndCapture)                                         \
  X(cuStreamEndCapture_ptsz, cuStreamEndCapture)

// The CUDA 11 form, still what an older runtime asks dlsym for.
using GetProcAddressV1 = CUresult(const char* symbol, void** pfn, int cuda_version,
                                  cuuint64_t flags);

enum Slot : int {
#define CRYO_FP_SLOT(name, type) k_##name,
  CRYO_FP_GATED(CRYO_FP_SLOT) CRYO_FP_SPECIAL(CRYO_FP_SLOT)
#undef CRYO_FP_SLOT
      kSlots
};

const char* const kNames[kSlots] = {
#define CRYO_FP_NAME(name, type) #name,
    CRYO_FP_GATED(CRYO_FP_NAME) CRYO_FP_SPECIAL(CRYO_FP_NAME)
#undef CRYO_FP_NAME
};

// The driver's own entry point for each slot (null where this driver has none).
void* g_real[kSlots];
// Calls per entry point, counted per thread (a plain add to the thread's own memory, no locked
// instruction on the hot path) and summed when cryod asks.
struct ThreadCalls {
  std::atomic<uint64_t> n[kSlots] = {};
  ThreadCalls* next = nullptr;
};
std::atomic<ThreadCalls*> g_thread_calls{nullptr};
__attribute__((tls_model("initial-exec"))) thread_local ThreadCalls* t_calls = nullptr;

inline void Count(int slot) {
  ThreadCalls* c = t_calls;
  if (__builtin_expect(c == nullptr, 0)) {
    c = new ThreadCalls();  // kept for the process's life: threads are few
    c->next = g_thread_calls.load();
    while (!g_thread_calls.compare_exchange_weak(c->next, c)) {
    }
    t_calls = c;
  }
  c->n[slot].store(c->n[slot].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

uint64_t Calls(int slot) {
  uint64_t sum = 0;
  for (ThreadCalls* c = g_thread_calls.load(); c != nullptr; c = c->next) {
    sum += c->n[slot].load(std::memory_order_relaxed);
  }
  return sum;
}

using DlsymFn = void* (*)(void*, const char*);

// The library's state. Made on first use, never destroyed: the job's threads may call in until
// the very end of the process.
class Lib {
 public:
  static Lib& Get() {
    Lib* lib = instance_.load(std::memory_order_acquire);
    if (__builtin_expect(lib != nullptr, 1)) return *lib;
    static Lib* made = new Lib();  // once, thread-safe
    instance_.store(made, std::memory_order_release);
    return *made;
  }

  // Finds libcuda once it is loaded; true when the driver's entry points are known.
  bool EnsureCuda() {
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
      std::string err = control_->Start();
      if (!err.empty()) {
        // Without the channel nobody can drive the fast path: let every call pass.
        disabled_ = true;
        why_disabled_ = err;
        wrappers_.clear();
      }
    }
    ready_.store(true, std::memory_order_release);
    return true;
  }

  // The library's wrapper for a driver entry point, or the entry point itself.
  void* WrapperFor(void* real) {
    if (real == nullptr || !EnsureCuda() || disabled_) return real;
    auto it = wrappers_.find(real);
    return it == wrappers_.end() ? real : it->second;
  }

  // Wrapped calls do their own work only when the fast path is on. The common case (CUDA found
  // long ago) is one load.
  bool active() {
    if (__builtin_expect(ready_.load(std::memory_order_acquire), 1)) return !disabled_;
    return EnsureCuda() && !disabled_;
  }

  Gate& gate() { return gate_; }
  CaptureGate& capture() { return capture_; }
  CollectiveGate& collectives() { return collectives_; }

  // Whether `k` is one of NCCL's kernels. Asked on every launch: a small per-thread cache in
  // front of the driver's name lookup.
  bool IsCollective(CUfunction k) {
    if (!collectives_.counting()) return false;
    struct Entry {
      CUfunction k;
      bool nccl;
    };
    __attribute__((tls_model("initial-exec"))) static thread_local Entry cache[64];
    Entry& e = cache[(reinterpret_cast<uintptr_t>(k) >> 4) & 63];
    if (e.k == k) return e.nccl;
    const char* name = nullptr;
    if (func_name_ == nullptr || func_name_(&name, k) != CUDA_SUCCESS || name == nullptr) {
      name = nullptr;
      if (kernel_name_ != nullptr &&
          kernel_name_(&name, reinterpret_cast<CUkernel>(k)) != CUDA_SUCCESS) {
        name = nullptr;
      }
    }
    e.k = k;
    e.nccl = name != nullptr &&
             (strstr(name, "ncclDevKernel") != nullptr || strstr(name, "ncclKernel") != nullptr);
    return e.nccl;
  }
  Registry& registry() { return *registry_; }
  Mover& mover() { return *mover_; }
  const Driver& driver() const { return driver_; }

  static DlsymFn RealDlsym();
  static void* Wrapper(int slot);

  void AfterForkInChild() {
    // CUDA does not survive fork(); the child is the driver's (and the parent's socket is not
    // the child's to serve).
    disabled_ = true;
    why_disabled_ = "a child forked from a CUDA process";
    wrappers_.clear();
    if (control_ != nullptr) control_->ForgetAfterFork();
  }

 private:
  Lib() {
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
    pthread_atfork(nullptr, nullptr, [] { Lib::Get().AfterForkInChild(); });
  }

  void AddStatus(cryo::contract::gpu_fastpath::StatusReply& r) {
    for (int i = 0; i < kSlots; ++i) {
      uint64_t n = Calls(i);
      if (n > 0) r.calls[kNames[i]] = n;
    }
    r.wrapped_entry_points = wrappers_.size();
    if (disabled_) r.disabled = why_disabled_;
  }

  static inline std::atomic<Lib*> instance_{nullptr};
  std::mutex init_mu_;
  std::atomic<bool> ready_{false};
  bool disabled_ = false;
  std::string why_disabled_;
  size_t min_bytes_ = 2ull << 20;
  bool register_host_ = false;  // kEnvHostRegister
  Driver driver_;
  Gate gate_;
  CaptureGate capture_;
  CollectiveGate collectives_;
  CUresult (*func_name_)(const char**, CUfunction) = nullptr;
  CUresult (*kernel_name_)(const char**, CUkernel) = nullptr;
  Registry* registry_ = nullptr;
  Mover* mover_ = nullptr;
  Control* control_ = nullptr;
  std::unordered_map<void*, void*> wrappers_;
};

// ---- wrappers ----

// The real entry point of `slot`, typed like `F`.
template <typename F>
F* Real(int slot) {
  return reinterpret_cast<F*>(g_real[slot]);
}

// Every entry point the job calls is noexcept: the caller is libcudart or the job, C frames an
// exception must never unwind through. What the library throws (an allocation failing in its
// bookkeeping) becomes the driver's own error.
CUresult FromException() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

template <int S, typename F>
struct Gated;
// The kernel a launch entry point launches (null for the other gated entry points).
template <int S, typename... A>
CUfunction LaunchedKernel(A... a) {
  auto args = std::forward_as_tuple(a...);
  if constexpr (S == k_cuLaunchKernel || S == k_cuLaunchKernel_ptsz ||
                S == k_cuLaunchCooperativeKernel || S == k_cuLaunchCooperativeKernel_ptsz) {
    return std::get<0>(args);
  } else if constexpr (S == k_cuLaunchKernelEx || S == k_cuLaunchKernelEx_ptsz) {
    return std::get<1>(args);
  } else {
    return nullptr;
  }
}

template <int S, typename... A>
struct Gated<S, CUresult(A...)> {
  static CUresult Call(A... a) noexcept try {
    Lib& lib = Lib::Get();
    const bool on = lib.active();
    auto* f = Real<CUresult(A...)>(S);
    if (f == nullptr) return CUDA_ERROR_NOT_FOUND;
    if (!on) return f(a...);
    Count(S);
    // An NCCL kernel is counted as it is launched, and held once the cut's count is reached.
    if (CUfunction k = LaunchedKernel<S>(a...); k != nullptr && lib.IsCollective(k)) {
      return LaunchCollective(lib.gate(), lib.collectives(), [&] { return f(a...); });
    }
    GateGuard g(lib.gate());
    return f(a...);
  } catch (...) {
    return FromException();
  }
};

// Counts a special wrapper's call; when the fast path is off, makes the plain driver call of
// `slot` (typed `type`) instead.
#define CRYO_FP_ENTER_SLOT(slot, type, ...)                      \
  Lib& lib = Lib::Get();                                         \
  if (!lib.active()) {                                           \
    auto* f = Real<type>(slot);                                  \
    return f != nullptr ? f(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND; \
  }                                                              \
  Count(slot);
#define CRYO_FP_ENTER(name, ...) CRYO_FP_ENTER_SLOT(k_##name, decltype(name), __VA_ARGS__)

CUresult W_cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult* status) noexcept try {
  Lib& lib = Lib::Get();
  lib.EnsureCuda();
  auto* f = Real<decltype(cuGetProcAddress_v2)>(k_cuGetProcAddress_v2);
  if (f == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = lib.WrapperFor(*pfn);
  return r;
} catch (...) {
  return FromException();
}

CUresult W_cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                            cuuint64_t flags) noexcept try {
  Lib& lib = Lib::Get();
  lib.EnsureCuda();
  auto* f = Real<GetProcAddressV1>(k_cuGetProcAddress);
  if (f == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = lib.WrapperFor(*pfn);
  return r;
} catch (...) {
  return FromException();
}

CUresult W_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) noexcept try {
  CRYO_FP_ENTER(cuMemAlloc_v2, dptr, bytes)
  GateGuard g(lib.gate());
  return lib.registry().MemAlloc(dptr, bytes);
} catch (...) {
  return FromException();
}

CUresult W_cuMemFree_v2(CUdeviceptr dptr) noexcept try {
  CRYO_FP_ENTER(cuMemFree_v2, dptr)
  GateGuard g(lib.gate());
  return lib.registry().MemFree(dptr);
} catch (...) {
  return FromException();
}

CUresult W_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                       const CUmemAllocationProp* prop, unsigned long long flags) noexcept try {
  CRYO_FP_ENTER(cuMemCreate, handle, size, prop, flags)
  GateGuard g(lib.gate());
  return lib.registry().MemCreate(handle, size, prop, flags);
} catch (...) {
  return FromException();
}

CUresult W_cuMemRelease(CUmemGenericAllocationHandle handle) noexcept try {
  CRYO_FP_ENTER(cuMemRelease, handle)
  GateGuard g(lib.gate());
  return lib.registry().MemRelease(handle);
} catch (...) {
  return FromException();
}

CUresult W_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                    CUmemGenericAllocationHandle handle, unsigned long long flags) noexcept try {
  CRYO_FP_ENTER(cuMemMap, ptr, size, offset, handle, flags)
  GateGuard g(lib.gate());
  return lib.registry().MemMap(ptr, size, offset, handle, flags);
} catch (...) {
  return FromException();
}

CUresult W_cuMemUnmap(CUdeviceptr ptr, size_t size) noexcept try {
  CRYO_FP_ENTER(cuMemUnmap, ptr, size)
  GateGuard g(lib.gate());
  return lib.registry().MemUnmap(ptr, size);
} catch (...) {
  return FromException();
}

CUresult W_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                          size_t count) noexcept try {
  CRYO_FP_ENTER(cuMemSetAccess, ptr, size, desc, count)
  GateGuard g(lib.gate());
  return lib.registry().MemSetAccess(ptr, size, desc, count);
} catch (...) {
  return FromException();
}

CUresult W_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) noexcept
    try {
  CRYO_FP_ENTER(cuMemRetainAllocationHandle, handle, addr)
  GateGuard g(lib.gate());
  return lib.registry().MemRetainAllocationHandle(handle, addr);
} catch (...) {
  return FromException();
}

CUresult W_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                  CUmemGenericAllocationHandle handle) noexcept
    try {
  CRYO_FP_ENTER(cuMemGetAllocationPropertiesFromHandle, prop, handle)
  GateGuard g(lib.gate());
  auto* f = Real<decltype(cuMemGetAllocationPropertiesFromHandle)>(
      k_cuMemGetAllocationPropertiesFromHandle);
  return f(prop, lib.registry().Translate(handle));
} catch (...) {
  return FromException();
}

CUresult W_cuMemExportToShareableHandle(void* out, CUmemGenericAllocationHandle handle,
                                        CUmemAllocationHandleType type,
                                        unsigned long long flags) noexcept try {
  CRYO_FP_ENTER(cuMemExportToShareableHandle, out, handle, type, flags)
  GateGuard g(lib.gate());
  auto* f = Real<decltype(cuMemExportToShareableHandle)>(k_cuMemExportToShareableHandle);
  CUresult r = f(out, lib.registry().Translate(handle), type, flags);
  // Another process may map it now: as a POSIX descriptor the library keeps moving it (cryod
  // carries the descriptor to its importers); shared another way, the driver moves it.
  if (r == CUDA_SUCCESS) lib.registry().Exported(handle, type, out);
  return r;
} catch (...) {
  return FromException();
}

CUresult W_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                          CUmemAllocationHandleType type) noexcept try {
  CRYO_FP_ENTER(cuMemImportFromShareableHandle, handle, os_handle, type)
  GateGuard g(lib.gate());
  return lib.registry().MemImport(handle, os_handle, type);
} catch (...) {
  return FromException();
}

CUresult W_cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) noexcept try {
  CRYO_FP_ENTER(cuMemGetAddressRange_v2, base, size, dptr)
  GateGuard g(lib.gate());
  // A cudaMalloc the library serves has the size the job asked for, not the padded one.
  if (lib.registry().OwnedRange(dptr, base, size)) return CUDA_SUCCESS;
  if (lib.registry().InOwnedPadding(dptr)) return CUDA_ERROR_NOT_FOUND;
  return Real<decltype(cuMemGetAddressRange_v2)>(k_cuMemGetAddressRange_v2)(base, size, dptr);
} catch (...) {
  return FromException();
}

void PatchRange(Registry& reg, CUpointer_attribute attr, void* data, CUdeviceptr ptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (data == nullptr || !reg.OwnedRange(ptr, &base, &size)) return;
  if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *static_cast<CUdeviceptr*>(data) = base;
  if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *static_cast<size_t*>(data) = size;
}

CUresult W_cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) noexcept
    try {
  CRYO_FP_ENTER(cuPointerGetAttribute, data, attr, ptr)
  GateGuard g(lib.gate());
  if (lib.registry().InOwnedPadding(ptr)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = Real<decltype(cuPointerGetAttribute)>(k_cuPointerGetAttribute)(data, attr, ptr);
  if (r == CUDA_SUCCESS) PatchRange(lib.registry(), attr, data, ptr);
  return r;
} catch (...) {
  return FromException();
}

CUresult W_cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                  CUdeviceptr ptr) noexcept try {
  CRYO_FP_ENTER(cuPointerGetAttributes, n, attrs, data, ptr)
  GateGuard g(lib.gate());
  CUresult r =
      Real<decltype(cuPointerGetAttributes)>(k_cuPointerGetAttributes)(n, attrs, data, ptr);
  if (r == CUDA_SUCCESS && attrs != nullptr && data != nullptr) {
    for (unsigned int i = 0; i < n; ++i) PatchRange(lib.registry(), attrs[i], data[i], ptr);
  }
  return r;
} catch (...) {
  return FromException();
}

CUresult W_cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) noexcept try {
  CRYO_FP_ENTER(cuIpcGetMemHandle, handle, dptr)
  GateGuard g(lib.gate());
  // The driver has no legacy handle for memory backed the library's way: the library makes one
  // (legacy_ipc.h).
  IpcHandle h;
  CUresult r = CUDA_SUCCESS;
  if (handle != nullptr &&
      lib.registry().IpcExport(dptr, static_cast<int32_t>(::getpid()), &h, &r)) {
    if (r == CUDA_SUCCESS) EncodeIpcHandle(h, handle);
    return r;
  }
  return Real<decltype(cuIpcGetMemHandle)>(k_cuIpcGetMemHandle)(handle, dptr);
} catch (...) {
  return FromException();
}

// How long an open waits for an exporter whose memory is out of the GPU (a checkpoint).
constexpr std::chrono::milliseconds kIpcOpenPatience{120000};

CUresult W_cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle,
                                 unsigned int flags) noexcept try {
  CRYO_FP_ENTER(cuIpcOpenMemHandle_v2, dptr, handle, flags)
  IpcHandle h;
  if (DecodeIpcHandle(handle, &h)) {
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // A handle opens in another process, as the driver's do.
    if (h.pid == static_cast<int32_t>(::getpid())) return CUDA_ERROR_INVALID_CONTEXT;
    return OpenIpcHandle(lib.registry(), lib.mover(), lib.gate(), h, dptr, kIpcOpenPatience);
  }
  // The driver's own handle: another process's memory mapped in a way no one can carry through
  // a restore; cryod refuses the job up front.
  GateGuard g(lib.gate());
  CUresult r = Real<decltype(cuIpcOpenMemHandle_v2)>(k_cuIpcOpenMemHandle_v2)(dptr, handle, flags);
  if (r == CUDA_SUCCESS) lib.registry().ForeignShare(+1);
  return r;
} catch (...) {
  return FromException();
}

CUresult W_cuIpcCloseMemHandle(CUdeviceptr dptr) noexcept try {
  CRYO_FP_ENTER(cuIpcCloseMemHandle, dptr)
  GateGuard g(lib.gate());
  CUresult r = CUDA_SUCCESS;
  if (lib.registry().IpcClose(dptr, &r)) return r;
  r = Real<decltype(cuIpcCloseMemHandle)>(k_cuIpcCloseMemHandle)(dptr);
  if (r == CUDA_SUCCESS) lib.registry().ForeignShare(-1);
  return r;
} catch (...) {
  return FromException();
}

CUresult W_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) noexcept try {
  CRYO_FP_ENTER(cuCtxEnablePeerAccess, peer, flags)
  GateGuard g(lib.gate());
  CUresult r = Real<decltype(cuCtxEnablePeerAccess)>(k_cuCtxEnablePeerAccess)(peer, flags);
  CUdevice dev = 0;
  if (r == CUDA_SUCCESS && lib.driver().cuCtxGetDevice(&dev) == CUDA_SUCCESS) {
    lib.registry().PeerAccessEnabled(peer, dev);
  }
  return r;
} catch (...) {
  return FromException();
}

template <int S>
CUresult BeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  CRYO_FP_ENTER_SLOT(S, decltype(cuStreamBeginCapture_v2), stream, mode)
  GateGuard g(lib.capture().begin_gate());
  CUresult r = Real<decltype(cuStreamBeginCapture_v2)>(S)(stream, mode);
  if (r == CUDA_SUCCESS) lib.capture().Began();
  return r;
}
CUresult W_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) noexcept try {
  return BeginCapture<k_cuStreamBeginCapture_v2>(s, m);
} catch (...) {
  return FromException();
}
CUresult W_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) noexcept try {
  return BeginCapture<k_cuStreamBeginCapture_v2_ptsz>(s, m);
} catch (...) {
  return FromException();
}

template <int S>
CUresult BeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* deps,
                             const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  CRYO_FP_ENTER_SLOT(S, decltype(cuStreamBeginCaptureToGraph), stream, graph, deps, edges, n, mode)
  GateGuard g(lib.capture().begin_gate());
  CUresult r = Real<decltype(cuStreamBeginCaptureToGraph)>(S)(stream, graph, deps, edges, n, mode);
  if (r == CUDA_SUCCESS) lib.capture().Began();
  return r;
}
CUresult W_cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* d,
                                       const CUgraphEdgeData* e, size_t n,
                                       CUstreamCaptureMode m) noexcept try {
  return BeginCaptureToGraph<k_cuStreamBeginCaptureToGraph>(s, g, d, e, n, m);
} catch (...) {
  return FromException();
}
CUresult W_cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* d,
                                            const CUgraphEdgeData* e, size_t n,
                                            CUstreamCaptureMode m) noexcept try {
  return BeginCaptureToGraph<k_cuStreamBeginCaptureToGraph_ptsz>(s, g, d, e, n, m);
} catch (...) {
  return FromException();
}

template <int S>
CUresult EndCapture(CUstream stream, CUgraph* graph) {
  CRYO_FP_ENTER_SLOT(S, decltype(cuStreamEndCapture), stream, graph)
  CUresult r = Real<decltype(cuStreamEndCapture)>(S)(stream, graph);
  // The capture is over whether or not it was valid.
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) lib.capture().Ended();
  return r;
}
CUresult W_cuStreamEndCapture(CUstream s, CUgraph* g) noexcept try {
  return EndCapture<k_cuStreamEndCapture>(s, g);
} catch (...) {
  return FromException();
}
CUresult W_cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) noexcept try {
  return EndCapture<k_cuStreamEndCapture_ptsz>(s, g);
} catch (...) {
  return FromException();
}

void* Lib::Wrapper(int slot) {
  static void* const kWrappers[kSlots] = {
#define CRYO_FP_GATED_PTR(name, type) \
  reinterpret_cast<void*>(&Gated<k_##name, decltype(type)>::Call),
#define CRYO_FP_SPECIAL_PTR(name, type) reinterpret_cast<void*>(&W_##name),
      CRYO_FP_GATED(CRYO_FP_GATED_PTR) CRYO_FP_SPECIAL(CRYO_FP_SPECIAL_PTR)
#undef CRYO_FP_GATED_PTR
#undef CRYO_FP_SPECIAL_PTR
  };
  return kWrappers[slot];
}

DlsymFn Lib::RealDlsym() {
  if (cryo_fp_real_dlsym == nullptr) {
    void* p = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == nullptr) p = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    cryo_fp_real_dlsym = p;
  }
  return reinterpret_cast<DlsymFn>(cryo_fp_real_dlsym);
}

__attribute__((constructor(101))) void ResolveDlsymEarly() { Lib::RealDlsym(); }

}  // namespace

// The exported entry points: each jumps to its wrapper through a pointer, so one line of
// assembly serves every signature.
#define CRYO_FP_EXPORT_GATED(name, type)                                                 \
  extern "C" __attribute__((visibility("hidden"), used)) auto* const cryo_fp_to_##name = \
      &Gated<k_##name, decltype(type)>::Call;
#define CRYO_FP_EXPORT_SPECIAL(name, type) \
  extern "C" __attribute__((visibility("hidden"), used)) auto* const cryo_fp_to_##name = &W_##name;
CRYO_FP_GATED(CRYO_FP_EXPORT_GATED)
CRYO_FP_SPECIAL(CRYO_FP_EXPORT_SPECIAL)
#undef CRYO_FP_EXPORT_GATED
#undef CRYO_FP_EXPORT_SPECIAL

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
