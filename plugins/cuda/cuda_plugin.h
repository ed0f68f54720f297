#pragma once

// The cuda plugin: NVIDIA GPUs through the driver's checkpoint API (cuCheckpointProcess*).
// The driver does the work on a live process from outside it: Lock stops its CUDA calls and
// drains its work, Checkpoint moves device memory into its host memory and frees the GPU,
// Restore brings it back (optionally onto other GPUs of the same chip), Unlock lets it run.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "lib/base/fs.h"
#include "lib/base/proc.h"
#include "plugins/common/device_plan.h"
#include "plugins/common/plugin_impl.h"
#include "plugins/cuda/cuda_api.h"

namespace cryo::gpu::cuda {

struct CudaPluginOptions {
  std::string libcuda = "libcuda.so.1";
  std::string libnvml = "libnvidia-ml.so.1";
  std::string proc_root = "/proc";
  // The kernel module's view: version, and per GPU its UUID and /dev/nvidiaN minor.
  std::string driver_root = "/proc/driver/nvidia";
  // A multi-process NCCL job with CUDA IPC enabled checkpoints but cannot be restored (the
  // driver answers CUDA_ERROR_NOT_SUPPORTED on restore): refused unless this is set.
  bool allow_nccl_ipc = false;
  // The caller decides instead (cryod: a job whose every such process runs the GPU fast-path
  // library, which carries that memory itself): no refusal, each such process's facts say
  // "nccl_ipc": true.
  bool report_nccl_ipc = false;
  // Refuse at discover (before any lock) a process whose maps suggest managed memory. Off by
  // default: the sign is a heuristic seen on one driver, and the driver itself refuses such a
  // checkpoint (CUDA_ERROR_NOT_SUPPORTED), after which everything is rolled back.
  bool refuse_managed_at_discover = false;
  // Pass gpuPairs on every restore, identity pairs too (tests the remap path on one GPU).
  bool always_pass_gpu_pairs = false;

  static CudaPluginOptions FromJson(const nlohmann::json& j);
};

// The driver version from /proc/driver/nvidia/version ("580.159.04"); empty if none.
std::string ParseDriverVersion(absl::string_view version_file);

class CudaPlugin final : public PluginImpl {
 public:
  // `api`/`nvml`: injected tables (tests); when absent they are loaded from the options' paths.
  // Never fails for a missing driver: Status() then says why it is unavailable.
  static absl::StatusOr<std::unique_ptr<CudaPlugin>> Create(
      const CudaPluginOptions& options, std::optional<CudaApi> api = std::nullopt,
      std::optional<NvmlApi> nvml = std::nullopt);

  nlohmann::json Status() override;
  absl::StatusOr<nlohmann::json> ListDevices() override;
  absl::StatusOr<nlohmann::json> Discover(const std::vector<pid_t>& pids) override;
  absl::Status Lock(pid_t pid, uint32_t timeout_ms) override;
  absl::Status Checkpoint(pid_t pid) override;
  absl::Status Restore(pid_t pid, const nlohmann::json& facts, const DeviceMap& map) override;
  absl::Status Unlock(pid_t pid) override;
  absl::Status Rollback(pid_t pid) override;
  absl::StatusOr<nlohmann::json> Describe(const nlohmann::json& procs) override;
  absl::StatusOr<nlohmann::json> CheckCompatible(const nlohmann::json& section,
                                                 const nlohmann::json& request) override;
  absl::StatusOr<nlohmann::json> CriuOptions(const std::vector<pid_t>& pids) override;

  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" <-> 16 bytes.
  static std::string FormatUuid(const CUuuid& u);
  static bool ParseUuid(const std::string& s, CUuuid* out);

 private:
  struct Device {
    int ordinal = 0;
    CUdevice handle = 0;
    std::string uuid;
    std::string name;
    std::string chip;  // "sm_90": the driver restores onto the same chip only
    std::string pci_bus_id;
    uint64_t total_bytes = 0;
  };

  explicit CudaPlugin(CudaPluginOptions options)
      : options_(std::move(options)), proc_(options_.proc_root) {}
  absl::Status Init(std::optional<CudaApi> api, std::optional<NvmlApi> nvml);
  absl::Status Available() const;
  std::string ErrorName(CUresult r) const;
  absl::Status CuError(CUresult r, pid_t pid, absl::string_view op) const;
  std::optional<uint64_t> FreeBytes(const Device& d);
  // Device minor (/dev/nvidiaN) -> GPU UUID, from the kernel module's per-GPU information.
  std::map<int, std::string> MinorsToUuids() const;
  std::map<std::string, uint64_t> ProcessMemory(pid_t pid);
  // The GPUs `env` lets a process use, relative to `given` (the GPUs its device files give it;
  // nullopt: all of the node's); nullopt when neither restricts.
  std::optional<std::vector<std::string>> VisibleByEnv(
      const std::map<std::string, std::string>& env, absl::Status* error,
      const std::optional<std::vector<std::string>>& given = std::nullopt) const;
  // The node's GPUs, in the driver's order, whose /dev/nvidiaN is among `device_files`.
  std::vector<std::string> GpusOfDeviceFiles(const std::vector<std::string>& device_files) const;
  const Device* FindDevice(const std::string& uuid) const;
  absl::StatusOr<std::optional<nlohmann::json>> DiscoverProcess(
      pid_t pid, const std::map<int, std::string>& minors, const nlohmann::json& node_gpus);
  // A one-to-one pairing of every GPU in `domain`: those in `map` go there, the rest stay or
  // take a free GPU of this node.
  absl::StatusOr<std::vector<CUcheckpointGpuPair>> PairAll(pid_t pid,
                                                           const std::vector<std::string>& domain,
                                                           const DeviceMap& map) const;

  CudaPluginOptions options_;
  proc::ProcReader proc_;
  CudaApi api_;
  std::optional<NvmlApi> nvml_;
  std::string unavailable_;  // empty when usable
  int cuda_version_ = 0;
  std::string driver_version_;
  std::vector<Device> devices_;
  absl::Mutex ctx_mu_;  // free-memory fallback pushes contexts
};

}  // namespace cryo::gpu::cuda
