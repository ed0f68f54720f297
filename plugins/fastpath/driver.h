#pragma once

// The CUDA driver entry points the fast-path library calls itself: the real ones (never its own
// wrappers), looked up in libcuda when the job first uses CUDA. Tests fill the table from a fake
// driver instead.

#include <cuda.h>

namespace cryo::fastpath {

#define CRYO_FASTPATH_DRIVER_FUNCS(X)       \
  X(cuGetErrorString)                       \
  X(cuDeviceGetCount)                       \
  X(cuDeviceGet)                            \
  X(cuDeviceGetPCIBusId)                    \
  X(cuDevicePrimaryCtxRetain)               \
  X(cuDevicePrimaryCtxRelease_v2)           \
  X(cuCtxGetCurrent)                        \
  X(cuCtxSetCurrent)                        \
  X(cuCtxGetDevice)                         \
  X(cuCtxSynchronize)                       \
  X(cuMemAlloc_v2)                          \
  X(cuMemFree_v2)                           \
  X(cuMemAddressReserve)                    \
  X(cuMemAddressFree)                       \
  X(cuMemCreate)                            \
  X(cuMemRelease)                           \
  X(cuMemMap)                               \
  X(cuMemUnmap)                             \
  X(cuMemSetAccess)                         \
  X(cuMemRetainAllocationHandle)            \
  X(cuMemExportToShareableHandle)           \
  X(cuMemImportFromShareableHandle)         \
  X(cuMemGetAllocationPropertiesFromHandle) \
  X(cuMemGetAllocationGranularity)          \
  X(cuMemHostAlloc)                         \
  X(cuMemFreeHost)                          \
  X(cuMemHostRegister_v2)                   \
  X(cuMemHostUnregister)                    \
  X(cuStreamCreate)                         \
  X(cuStreamDestroy_v2)                     \
  X(cuStreamSynchronize)                    \
  X(cuEventCreate)                          \
  X(cuEventRecord)                          \
  X(cuEventQuery)                           \
  X(cuEventSynchronize)                     \
  X(cuEventDestroy_v2)                      \
  X(cuMemcpyDtoHAsync_v2)                   \
  X(cuMemcpyDtoDAsync_v2)                   \
  X(cuMemcpyHtoDAsync_v2)

struct Driver {
#define CRYO_FASTPATH_DRIVER_FIELD(name) decltype(&::name) name = nullptr;
  CRYO_FASTPATH_DRIVER_FUNCS(CRYO_FASTPATH_DRIVER_FIELD)
#undef CRYO_FASTPATH_DRIVER_FIELD

  // Whether every entry point was found.
  bool Complete() const {
    bool ok = true;
#define CRYO_FASTPATH_DRIVER_CHECK(name) ok = ok && name != nullptr;
    CRYO_FASTPATH_DRIVER_FUNCS(CRYO_FASTPATH_DRIVER_CHECK)
#undef CRYO_FASTPATH_DRIVER_CHECK
    return ok;
  }

  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"-style text for errors.
  const char* ErrorText(CUresult r) const {
    const char* s = nullptr;
    if (cuGetErrorString == nullptr || cuGetErrorString(r, &s) != CUDA_SUCCESS || s == nullptr) {
      return "unknown CUDA error";
    }
    return s;
  }
};

}  // namespace cryo::fastpath
