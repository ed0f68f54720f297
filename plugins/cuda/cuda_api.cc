#include "plugins/cuda/cuda_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace cryo::gpu::cuda {
namespace {

template <typename T>
void Resolve(void* dl, const char* symbol, T& fn) {
  fn = reinterpret_cast<T>(::dlsym(dl, symbol));
}

absl::StatusOr<void*> Open(const std::string& path) {
  void* dl = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* err = ::dlerror();
    return absl::NotFoundError(err != nullptr ? err : absl::StrCat(path, ": cannot load"));
  }
  return dl;
}

}  // namespace

absl::StatusOr<CudaApi> LoadCudaApi(const std::string& path) {
  auto dl = Open(path);
  if (!dl.ok()) return dl.status();
  CudaApi a;
  // Versioned names: cuda.h maps the plain names to these (e.g. cuMemGetInfo -> _v2), and the
  // unversioned exports keep their old 32-bit or legacy semantics.
  Resolve(*dl, "cuInit", a.init);
  Resolve(*dl, "cuDriverGetVersion", a.driver_get_version);
  Resolve(*dl, "cuGetErrorName", a.get_error_name);
  Resolve(*dl, "cuDeviceGetCount", a.device_get_count);
  Resolve(*dl, "cuDeviceGet", a.device_get);
  Resolve(*dl, "cuDeviceGetName", a.device_get_name);
  Resolve(*dl, "cuDeviceGetUuid_v2", a.device_get_uuid);
  if (a.device_get_uuid == nullptr) Resolve(*dl, "cuDeviceGetUuid", a.device_get_uuid);
  Resolve(*dl, "cuDeviceTotalMem_v2", a.device_total_mem);
  Resolve(*dl, "cuDeviceGetAttribute", a.device_get_attribute);
  Resolve(*dl, "cuDevicePrimaryCtxRetain", a.primary_ctx_retain);
  Resolve(*dl, "cuDevicePrimaryCtxRelease_v2", a.primary_ctx_release);
  Resolve(*dl, "cuCtxPushCurrent_v2", a.ctx_push_current);
  Resolve(*dl, "cuCtxPopCurrent_v2", a.ctx_pop_current);
  Resolve(*dl, "cuMemGetInfo_v2", a.mem_get_info);
  Resolve(*dl, "cuCheckpointProcessGetState", a.checkpoint_get_state);
  Resolve(*dl, "cuCheckpointProcessGetRestoreThreadId", a.checkpoint_get_restore_thread_id);
  Resolve(*dl, "cuCheckpointProcessLock", a.checkpoint_lock);
  Resolve(*dl, "cuCheckpointProcessCheckpoint", a.checkpoint_checkpoint);
  Resolve(*dl, "cuCheckpointProcessRestore", a.checkpoint_restore);
  Resolve(*dl, "cuCheckpointProcessUnlock", a.checkpoint_unlock);
  if (!a.init || !a.driver_get_version || !a.device_get_count || !a.device_get ||
      !a.device_get_name || !a.device_get_uuid || !a.device_total_mem || !a.device_get_attribute) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " lacks basic driver entry points (cuInit, cuDeviceGet*)"));
  }
  return a;
}

absl::StatusOr<NvmlApi> LoadNvmlApi(const std::string& path) {
  auto dl = Open(path);
  if (!dl.ok()) return dl.status();
  NvmlApi n;
  Resolve(*dl, "nvmlInit_v2", n.init);
  Resolve(*dl, "nvmlDeviceGetHandleByUUID", n.device_get_handle_by_uuid);
  Resolve(*dl, "nvmlDeviceGetMemoryInfo", n.device_get_memory_info);
  Resolve(*dl, "nvmlDeviceGetComputeRunningProcesses_v3", n.device_get_compute_running_processes);
  if (!n.ok()) return absl::FailedPreconditionError(absl::StrCat(path, " lacks NVML entry points"));
  return n;
}

}  // namespace cryo::gpu::cuda
