#pragma once

// GpuManager over vendor plugins. Every per-process step runs on its own thread, so one GPU's
// copy never waits for another's; any failure during Lock or Checkpoint puts every process
// back to running before returning.

#include <memory>
#include <string>
#include <vector>

#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/gpu_manager_factory.h"
#include "daemon/gpu/plugin.h"
#include "daemon/gpu/thp.h"

namespace cryo::gpu {

class PluginGpuManager final : public GpuManager {
 public:
  static absl::StatusOr<std::unique_ptr<PluginGpuManager>> Create(const GpuConfig& config);

  absl::StatusOr<std::vector<GpuProcess>> Discover(const std::vector<pid_t>& pids) override;
  absl::Status Lock(const std::vector<GpuProcess>& procs, absl::Duration timeout) override;
  absl::Status Checkpoint(std::vector<GpuProcess>& procs) override;
  absl::Status Restore(const std::vector<GpuProcess>& procs, const DeviceMap& map) override;
  absl::Status Unlock(const std::vector<GpuProcess>& procs) override;
  void Rollback(const std::vector<GpuProcess>& procs) override;
  nlohmann::json Describe(const std::vector<GpuProcess>& procs) override;
  absl::Status CheckCompatible(const nlohmann::json& manifest_gpu, DeviceMap& map) override;
  absl::Status CheckCompatibleFor(const nlohmann::json& manifest_gpu, const RestoreTarget& target,
                                  DeviceMap& map) override;
  absl::StatusOr<CriuExtras> CriuOptions(const std::vector<GpuProcess>& procs) override;
  std::vector<PluginStatus> Plugins() override;
  std::vector<DeviceInfo> Devices() override;

 private:
  explicit PluginGpuManager(const GpuConfig& config)
      : config_(config), thp_(config.thp_path, config.thp_during_checkpoint) {}
  absl::StatusOr<Plugin*> Find(const std::string& name);

  GpuConfig config_;
  ThpSetter thp_;
  std::vector<std::unique_ptr<Plugin>> plugins_;
};

}  // namespace cryo::gpu
