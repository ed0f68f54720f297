#pragma once

// How cryod builds its GpuManager from the GPU plugins:
//
//   cryo::gpu::GpuConfig cfg;                 // defaults suit a node; see each field
//   cfg.plugin_dir = "/usr/local/lib/cryo/gpu";
//   auto gpu = cryo::gpu::CreateGpuManager(cfg);   // StatusOr<unique_ptr<GpuManager>>
//
// A node without any GPU driver still gets a working manager: its plugins load and report
// available=false (Plugins()), and discovering a process that uses such a GPU fails with the
// reason.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/gpu/gpu_manager.h"
#include "nlohmann/json.hpp"
#include "plugins/abi/gpu_plugin.h"

namespace cryo::gpu {

struct GpuConfig {
  // Where plugin libraries live: <plugin_dir>/libcryo_gpu_<name>.so.
  std::string plugin_dir = "/usr/local/lib/cryo/gpu";
  // Plugins to load from plugin_dir; a named plugin that is not there is an error. Empty: every
  // libcryo_gpu_*.so in plugin_dir (none, if the directory does not exist).
  std::vector<std::string> plugins;
  // In-memory plugin tables, loaded before plugin_dir (tests; plugins linked into cryod).
  std::vector<const cryo_gpu_plugin_api*> tables;
  // Per-plugin options, passed to the plugin's create(): {"cuda": {...}, "rocm": {...}}.
  nlohmann::json plugin_options = nlohmann::json::object();
  // Transparent huge pages mode to set while device memory moves into host memory ("always"
  // makes the driver's device-to-host copy ~1.5x faster here); empty leaves the node setting
  // alone. Node-wide while any checkpoint runs: see docs/gpu.md for the trade-off.
  std::string thp_during_checkpoint;
  std::string thp_path = "/sys/kernel/mm/transparent_hugepage/enabled";
};

absl::StatusOr<std::unique_ptr<GpuManager>> CreateGpuManager(const GpuConfig& config);

}  // namespace cryo::gpu
