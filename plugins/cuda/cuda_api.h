#pragma once

// The CUDA driver (libcuda.so.1) and NVML (libnvidia-ml.so.1) entry points the plugin uses, as
// tables of function pointers: loaded with dlopen at run time (cryod starts on nodes without
// NVIDIA), or filled with fakes by the unit tests.

#include <string>

#include "absl/status/statusor.h"
#include "plugins/cuda/cuda_types.h"

namespace cryo::gpu::cuda {

struct CudaApi {
  CUresult (*init)(unsigned int flags) = nullptr;
  CUresult (*driver_get_version)(int* version) = nullptr;
  CUresult (*get_error_name)(CUresult error, const char** str) = nullptr;
  CUresult (*device_get_count)(int* count) = nullptr;
  CUresult (*device_get)(CUdevice* dev, int ordinal) = nullptr;
  CUresult (*device_get_name)(char* name, int len, CUdevice dev) = nullptr;
  CUresult (*device_get_uuid)(CUuuid* uuid, CUdevice dev) = nullptr;
  CUresult (*device_total_mem)(size_t* bytes, CUdevice dev) = nullptr;
  CUresult (*device_get_attribute)(int* value, CUdevice_attribute attr, CUdevice dev) = nullptr;
  // Only to read free memory when NVML is missing (a context costs device memory).
  CUresult (*primary_ctx_retain)(CUcontext* ctx, CUdevice dev) = nullptr;
  CUresult (*primary_ctx_release)(CUdevice dev) = nullptr;
  CUresult (*ctx_push_current)(CUcontext ctx) = nullptr;
  CUresult (*ctx_pop_current)(CUcontext* ctx) = nullptr;
  CUresult (*mem_get_info)(size_t* free, size_t* total) = nullptr;
  // The checkpoint API (driver with CUDA >= 12.8); null when the driver lacks it.
  CUresult (*checkpoint_get_state)(int pid, CUprocessState* state) = nullptr;
  CUresult (*checkpoint_get_restore_thread_id)(int pid, int* tid) = nullptr;
  CUresult (*checkpoint_lock)(int pid, CUcheckpointLockArgs* args) = nullptr;
  CUresult (*checkpoint_checkpoint)(int pid, CUcheckpointCheckpointArgs* args) = nullptr;
  CUresult (*checkpoint_restore)(int pid, CUcheckpointRestoreArgs* args) = nullptr;
  CUresult (*checkpoint_unlock)(int pid, CUcheckpointUnlockArgs* args) = nullptr;

  bool HasCheckpointApi() const {
    return checkpoint_get_state && checkpoint_lock && checkpoint_checkpoint && checkpoint_restore &&
           checkpoint_unlock;
  }
};

// NVML, declared here (the toolkit ships no nvml.h): device memory and per-process memory
// without creating a CUDA context in cryod.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_t as used by the _v3 process queries
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;

struct NvmlApi {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*device_get_handle_by_uuid)(const char* uuid, nvmlDevice_t* dev) = nullptr;
  nvmlReturn_t (*device_get_memory_info)(nvmlDevice_t dev, NvmlMemory* mem) = nullptr;
  nvmlReturn_t (*device_get_compute_running_processes)(nvmlDevice_t dev, unsigned int* count,
                                                       NvmlProcessInfo* infos) = nullptr;
  bool ok() const {
    return init && device_get_handle_by_uuid && device_get_memory_info &&
           device_get_compute_running_processes;
  }
};

// dlopen()s `path` and resolves the table. The library handle is kept for the process's life
// (the driver must not be unloaded under a running checkpoint). Missing checkpoint symbols are
// not an error here: HasCheckpointApi() says so.
absl::StatusOr<CudaApi> LoadCudaApi(const std::string& path);
absl::StatusOr<NvmlApi> LoadNvmlApi(const std::string& path);

}  // namespace cryo::gpu::cuda
