// Entry point of libcryo_gpu_rocm.so.

#include "cryo/gpu_plugin.h"
#include "rocm_plugin.h"

namespace {

absl::StatusOr<std::unique_ptr<cryo::gpu::PluginImpl>> Make(const nlohmann::json& config) {
  auto p =
      cryo::gpu::rocm::RocmPlugin::Create(cryo::gpu::rocm::RocmPluginOptions::FromJson(config));
  if (!p.ok()) return p.status();
  return std::unique_ptr<cryo::gpu::PluginImpl>(std::move(*p));
}

cryo_gpu_rc Create(const char* config, cryo_gpu_plugin** out) {
  return cryo::gpu::CreatePluginWith(&Make, config, out);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const cryo_gpu_plugin_api* cryo_gpu_plugin_v1(
    void) {
  static const cryo_gpu_plugin_api api = [] {
    cryo_gpu_plugin_api a;
    cryo::gpu::FillPluginApi(&a, "rocm", CRYO_VERSION, &Create);
    return a;
  }();
  return &api;
}
