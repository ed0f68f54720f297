// Entry point of libcryo_gpu_rocm.so.

#include "plugins/abi/gpu_plugin.h"
#include "plugins/rocm/rocm_plugin.h"

extern "C" __attribute__((visibility("default"))) const cryo_gpu_plugin_api* cryo_gpu_plugin_v1(
    void) {
  using cryo::gpu::rocm::RocmPlugin;
  using cryo::gpu::rocm::RocmPluginOptions;
  return cryo::gpu::PluginApiOf<RocmPlugin, RocmPluginOptions>("rocm", CRYO_VERSION);
}
