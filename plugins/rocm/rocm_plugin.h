#pragma once

// The rocm plugin: AMD GPUs through CRIU's own amdgpu plugin. KFD lets CRIU's plugin pause the
// queues and move VRAM during `criu dump`/`restore`, so this plugin does no GPU work itself:
// it finds /dev/kfd users, describes their GPUs (KFD topology in sysfs), checks a restore
// target, and tells cryod how to run CRIU (plugin dir, options). Untested on AMD hardware.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/base/fs.h"
#include "lib/base/proc.h"
#include "plugins/common/device_plan.h"
#include "plugins/common/plugin_impl.h"

namespace cryo::gpu::rocm {

struct RocmPluginOptions {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  std::string dev_kfd = "/dev/kfd";
  // Where CRIU finds amdgpu_plugin.so (scripts/setup.sh installs it there).
  std::string criu_plugin_dir = "/usr/local/lib/criu";
  // Environment for CRIU's amdgpu plugin, e.g. {"KFD_MAX_BUFFER_SIZE": "2G"}.
  std::map<std::string, std::string> criu_env;

  static RocmPluginOptions FromJson(const nlohmann::json& j);
};

class RocmPlugin final : public PluginImpl {
 public:
  static absl::StatusOr<std::unique_ptr<RocmPlugin>> Create(const RocmPluginOptions& options);

  nlohmann::json Status() override;
  absl::StatusOr<nlohmann::json> ListDevices() override;
  absl::StatusOr<nlohmann::json> Discover(const std::vector<pid_t>& pids) override;
  // CRIU's amdgpu plugin quiesces and copies during the dump: nothing to do here.
  absl::Status Lock(pid_t, uint32_t) override { return absl::OkStatus(); }
  absl::Status Checkpoint(pid_t) override { return absl::OkStatus(); }
  absl::Status Restore(pid_t, const nlohmann::json&, const DeviceMap&) override {
    return absl::OkStatus();
  }
  absl::Status Unlock(pid_t) override { return absl::OkStatus(); }
  absl::Status Rollback(pid_t) override { return absl::OkStatus(); }
  absl::StatusOr<nlohmann::json> Describe(const nlohmann::json& procs) override;
  absl::StatusOr<nlohmann::json> CheckCompatible(const nlohmann::json& section,
                                                 const nlohmann::json& request) override;
  absl::StatusOr<nlohmann::json> CriuOptions(const std::vector<pid_t>& pids) override;

  struct Gpu {
    std::string node;  // KFD topology node number
    uint32_t gpu_id = 0;
    std::string uuid;  // "AMD-" + KFD unique_id in hex
    std::string name;
    std::string chip;  // "gfx90a", from gfx_target_version
    int render_minor = -1;
    uint64_t total_bytes = 0;
    std::optional<uint64_t> free_bytes;
  };
  // KFD topology, in node order (what ROCR_VISIBLE_DEVICES indexes count).
  std::vector<Gpu> Gpus() const;

 private:
  explicit RocmPlugin(RocmPluginOptions o) : options_(std::move(o)), proc_(options_.proc_root) {}
  std::string Unavailable() const;
  std::string KfdPath(absl::string_view rel) const;

  RocmPluginOptions options_;
  proc::ProcReader proc_;
};

}  // namespace cryo::gpu::rocm
