#pragma once

// One loaded plugin: its C table and instance behind a C++ face with absl::Status errors.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/gpu/gpu_manager.h"
#include "nlohmann/json.hpp"
#include "plugins/abi/gpu_plugin.h"

namespace cryo::gpu {

class Plugin {
 public:
  // Checks the ABI version and creates an instance with `config`. `dl_handle` (from dlopen) is
  // closed when the plugin is destroyed.
  static absl::StatusOr<std::unique_ptr<Plugin>> FromTable(const cryo_gpu_plugin_api* api,
                                                           const nlohmann::json& config,
                                                           void* dl_handle = nullptr);
  // dlopen()s `path` and looks up CRYO_GPU_PLUGIN_ENTRY.
  static absl::StatusOr<std::unique_ptr<Plugin>> Open(const std::string& path,
                                                      const nlohmann::json& config);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }

  PluginStatus Status();
  absl::StatusOr<nlohmann::json> ListDevices();
  absl::StatusOr<nlohmann::json> Discover(const std::vector<pid_t>& pids);
  absl::Status Lock(pid_t pid, uint32_t timeout_ms);
  absl::Status Checkpoint(pid_t pid);
  absl::Status Restore(pid_t pid, const nlohmann::json& facts, const DeviceMap& map);
  absl::Status Unlock(pid_t pid);
  absl::Status Rollback(pid_t pid);
  absl::StatusOr<nlohmann::json> Describe(const std::vector<GpuProcess>& procs);
  absl::StatusOr<nlohmann::json> CheckCompatible(const nlohmann::json& section,
                                                 const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> CriuOptions(const std::vector<pid_t>& pids);

 private:
  Plugin(const cryo_gpu_plugin_api* api, void* dl_handle) : api_(api), dl_(dl_handle) {}
  static void LogThunk(void* ctx, int32_t level, const char* msg);
  absl::Status Error(cryo_gpu_rc rc, const char* hook);
  absl::StatusOr<nlohmann::json> TakeJson(cryo_gpu_rc rc, char* out, const char* hook);

  const cryo_gpu_plugin_api* api_;
  void* dl_;
  cryo_gpu_plugin* handle_ = nullptr;
  std::string name_;
  std::string version_;
};

}  // namespace cryo::gpu
