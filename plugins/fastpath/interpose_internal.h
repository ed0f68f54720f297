// The fast-path library's interposition (interpose.cc: the library's state, the dlsym entry
// and the exported symbols; interpose_wrappers.cc: the wrappers of the driver's entry points):
// the tables of what it wraps, the per-thread call counts and the library's state, shared by
// the two.
#pragma once

#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lib/contract/gpu_fastpath.h"
#include "plugins/fastpath/control.h"
#include "plugins/fastpath/driver.h"
#include "plugins/fastpath/gate.h"
#include "plugins/fastpath/mover.h"
#include "plugins/fastpath/registry.h"

#if !defined(__x86_64__)
#error "the fast-path library's dlsym entry is written for x86-64"
#endif

namespace cryo::fastpath::interpose {

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

inline constexpr const char* kNames[kSlots] = {
#define CRYO_FP_NAME(name, type) #name,
    CRYO_FP_GATED(CRYO_FP_NAME) CRYO_FP_SPECIAL(CRYO_FP_NAME)
#undef CRYO_FP_NAME
};

// The driver's own entry point for each slot (null where this driver has none).
inline void* g_real[kSlots];
// Calls per entry point, counted per thread (a plain add to the thread's own memory, no locked
// instruction on the hot path) and summed when cryod asks.
struct ThreadCalls {
  std::atomic<uint64_t> n[kSlots] = {};
  ThreadCalls* next = nullptr;
};
inline std::atomic<ThreadCalls*> g_thread_calls{nullptr};
__attribute__((tls_model("initial-exec"))) inline thread_local ThreadCalls* t_calls = nullptr;

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

// Calls of `slot` by every thread so far.
uint64_t Calls(int slot);

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
  bool EnsureCuda();

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

  // CUDA does not survive fork(): the child's calls all go to the driver.
  void AfterForkInChild();

 private:
  Lib();

  // What the status reply says of the interposition: calls per entry point, why it is off.
  void AddStatus(cryo::contract::gpu_fastpath::StatusReply& r);

  static inline std::atomic<Lib*> instance_{nullptr};
  std::mutex init_mu_;
  std::atomic<bool> ready_{false};
  bool disabled_ = false;
  std::string why_disabled_;
  size_t min_bytes_ = 2ull << 20;
  bool register_host_ = false;     // kEnvHostRegister
  bool register_windows_ = false;  // kEnvRegisterWindows
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

}  // namespace cryo::fastpath::interpose
