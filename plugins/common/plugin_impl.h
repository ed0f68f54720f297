#pragma once

// C++ side of a plugin: implement PluginImpl, then expose it through the C ABI with
// FillPluginApi(). Keeps every plugin's hook glue (JSON in/out, last error, string ownership,
// no exception crossing the ABI) in one place.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "plugins/abi/gpu_plugin.h"
#include "plugins/common/device_plan.h"

namespace cryo::gpu {

class PluginImpl {
 public:
  virtual ~PluginImpl() = default;

  virtual nlohmann::json Status() = 0;
  virtual absl::StatusOr<nlohmann::json> ListDevices() = 0;
  virtual absl::StatusOr<nlohmann::json> Discover(const std::vector<pid_t>& pids) = 0;
  virtual absl::Status Lock(pid_t pid, uint32_t timeout_ms) = 0;
  virtual absl::Status Checkpoint(pid_t pid) = 0;
  virtual absl::Status Restore(pid_t pid, const nlohmann::json& facts, const DeviceMap& map) = 0;
  virtual absl::Status Unlock(pid_t pid) = 0;
  virtual absl::Status Rollback(pid_t pid) = 0;
  virtual absl::StatusOr<nlohmann::json> Describe(const nlohmann::json& procs) = 0;
  virtual absl::StatusOr<nlohmann::json> CheckCompatible(const nlohmann::json& section,
                                                         const nlohmann::json& request) = 0;
  virtual absl::StatusOr<nlohmann::json> CriuOptions(const std::vector<pid_t>& pids) = 0;

  // cryod's log (ABI 1.1), set once before any hook; nothing is logged without it.
  void SetLog(cryo_gpu_log_fn fn, void* ctx) {
    log_fn_ = fn;
    log_ctx_ = ctx;
  }

 protected:
  void Log(int32_t level, const std::string& msg) const {
    if (log_fn_ != nullptr) log_fn_(log_ctx_, level, msg.c_str());
  }

 private:
  cryo_gpu_log_fn log_fn_ = nullptr;
  void* log_ctx_ = nullptr;
};

using PluginFactory = absl::StatusOr<std::unique_ptr<PluginImpl>> (*)(const nlohmann::json& config);

// Fills every hook of `api` except create, which the plugin supplies (it names its factory,
// usually by calling CreatePluginWith).
void FillPluginApi(cryo_gpu_plugin_api* api, const char* name, const char* version,
                   cryo_gpu_rc (*create)(const char* config_json, cryo_gpu_plugin** out));

cryo_gpu_rc CreatePluginWith(PluginFactory factory, const char* config_json, cryo_gpu_plugin** out);

// Hands an already built implementation to the C ABI (tests inject fake drivers this way).
cryo_gpu_plugin* WrapPluginImpl(std::unique_ptr<PluginImpl> impl);

// The create hook of a plugin whose Impl has `static StatusOr<unique_ptr<Impl>>
// Create(const Options&)` and whose Options has `static Options FromJson(const json&)`.
template <typename Impl, typename Options>
cryo_gpu_rc CreateFromJson(const char* config_json, cryo_gpu_plugin** out) {
  return CreatePluginWith(
      [](const nlohmann::json& config) -> absl::StatusOr<std::unique_ptr<PluginImpl>> {
        auto p = Impl::Create(Options::FromJson(config));
        if (!p.ok()) return p.status();
        return std::unique_ptr<PluginImpl>(std::move(*p));
      },
      config_json, out);
}

// The API table a plugin library exports (its cryo_gpu_plugin_v1 returns this), filled once.
template <typename Impl, typename Options>
const cryo_gpu_plugin_api* PluginApiOf(const char* name, const char* version) {
  static const cryo_gpu_plugin_api api = [&] {
    cryo_gpu_plugin_api a;
    FillPluginApi(&a, name, version, &CreateFromJson<Impl, Options>);
    return a;
  }();
  return &api;
}

}  // namespace cryo::gpu
