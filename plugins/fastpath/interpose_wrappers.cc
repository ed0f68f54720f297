// The fast-path library's wrappers of the driver's entry points (interpose.cc says how calls
// reach them): the gated ones made from the tables in interpose_internal.h, the ones with logic
// of their own written out, and the pointers the exported symbols jump through.

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <new>
#include <tuple>

#include "plugins/fastpath/interpose_internal.h"
#include "plugins/fastpath/legacy_ipc.h"

namespace cryo::fastpath::interpose {
namespace {

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

}  // namespace

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

}  // namespace cryo::fastpath::interpose

using namespace cryo::fastpath::interpose;

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
