#pragma once

// What the checkpoint and restore flows ask of the GPU side. cryod holds one GpuManager; the
// implementation over the plugins (plugins/) loads vendor plugins by dlopen or from in-memory
// tables. NullGpuManager is used when no plugin is configured: every target is CPU-only.

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/records/gpu_process.h"
#include "nlohmann/json.hpp"

namespace cryo::gpu {

struct PluginStatus {
  std::string name;
  std::string version;
  bool available = false;
  std::string detail;  // why unavailable, or driver version
};

struct DeviceInfo {
  std::string vendor;
  std::string uuid;
  std::string name;
  std::string chip;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_free_bytes = 0;
  std::string driver_version;
};

// Checkpointed GPU UUID -> GPU UUID on this node.
using DeviceMap = std::map<std::string, std::string>;

// What CRIU must be given for a target's GPU processes (e.g. where CRIU's amdgpu plugin lives
// and its options): extra command-line arguments and environment for the criu process.
struct CriuExtras {
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

class GpuManager {
 public:
  virtual ~GpuManager() = default;

  // Which of `pids` (the whole target tree) hold GPU state. A target using a GPU feature the
  // driver cannot checkpoint (e.g. managed memory) is refused here, before anything is locked.
  virtual absl::StatusOr<std::vector<GpuProcess>> Discover(const std::vector<pid_t>& pids) = 0;

  // Locks every process (in parallel); DEADLINE_EXCEEDED if one does not lock within timeout
  // (positive; InfiniteDuration() for no bound).
  // On failure, whatever was locked is unlocked again before returning.
  virtual absl::Status Lock(const std::vector<GpuProcess>& procs, absl::Duration timeout) = 0;

  // Moves device memory into each process's host memory, all processes in parallel.
  virtual absl::Status Checkpoint(std::vector<GpuProcess>& procs) = 0;

  // Brings device state back (after CRIU restored the processes, or to roll back a
  // checkpoint) onto the mapped devices, in parallel.
  virtual absl::Status Restore(const std::vector<GpuProcess>& procs, const DeviceMap& map) = 0;

  virtual absl::Status Unlock(const std::vector<GpuProcess>& procs) = 0;

  // Best effort: whatever state each process is in (locked, checkpointed), return it to running.
  virtual void Rollback(const std::vector<GpuProcess>& procs) = 0;

  // Facts for the manifest's "gpu" section (driver version, per-process devices and memory).
  virtual nlohmann::json Describe(const std::vector<GpuProcess>& procs) = 0;

  // Before a restore touches anything: can this node take the checkpoint's "gpu" section with
  // this map (same chip, enough free memory, driver with the API)? Fills `map` when empty.
  virtual absl::Status CheckCompatible(const nlohmann::json& manifest_gpu, DeviceMap& map) = 0;

  virtual std::vector<PluginStatus> Plugins() = 0;
  virtual std::vector<DeviceInfo> Devices() = 0;

  // Added for the GPU plugins; the defaults keep other implementations as they were.

  // Where a restore goes, for CheckCompatibleFor.
  struct RestoreTarget {
    // Its environment (CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, ...) says which GPUs the
    // job may use: e.g. the init of the container the job is restored into. 0: none.
    pid_t env_pid = 0;
    // The device files a container is given (its OCI spec's linux.devices): the GPUs the device
    // plugin handed its pod. nullopt: not a container (every GPU of the node).
    std::optional<std::vector<std::string>> devices;
  };

  // CheckCompatible, where an empty `map` is filled in order of the GPUs the target may use:
  // those of its device files, then narrowed by its environment. An empty target: as
  // CheckCompatible.
  virtual absl::Status CheckCompatibleFor(const nlohmann::json& manifest_gpu,
                                          const RestoreTarget& target, DeviceMap& map) {
    return CheckCompatible(manifest_gpu, map);
  }

  // Extra CRIU arguments/environment for dumping or restoring `procs` (both directions).
  virtual absl::StatusOr<CriuExtras> CriuOptions(const std::vector<GpuProcess>& procs) {
    return CriuExtras{};
  }
};

// No GPU plugins: discovers nothing, refuses checkpoints that recorded GPU state.
class NullGpuManager : public GpuManager {
 public:
  absl::StatusOr<std::vector<GpuProcess>> Discover(const std::vector<pid_t>&) override {
    return std::vector<GpuProcess>{};
  }
  absl::Status Lock(const std::vector<GpuProcess>&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status Checkpoint(std::vector<GpuProcess>&) override { return absl::OkStatus(); }
  absl::Status Restore(const std::vector<GpuProcess>&, const DeviceMap&) override {
    return absl::OkStatus();
  }
  absl::Status Unlock(const std::vector<GpuProcess>&) override { return absl::OkStatus(); }
  void Rollback(const std::vector<GpuProcess>&) override {}
  nlohmann::json Describe(const std::vector<GpuProcess>&) override { return nullptr; }
  absl::Status CheckCompatible(const nlohmann::json& manifest_gpu, DeviceMap&) override {
    if (manifest_gpu.is_null() || manifest_gpu.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "checkpoint holds GPU state but this cryod has no GPU plugin loaded");
  }
  std::vector<PluginStatus> Plugins() override { return {}; }
  std::vector<DeviceInfo> Devices() override { return {}; }
};

}  // namespace cryo::gpu
