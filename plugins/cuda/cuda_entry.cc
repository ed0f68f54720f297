// Entry point of libcryo_gpu_cuda.so.

#include "plugins/abi/gpu_plugin.h"
#include "plugins/cuda/cuda_plugin.h"

extern "C" __attribute__((visibility("default"))) const cryo_gpu_plugin_api* cryo_gpu_plugin_v1(
    void) {
  using cryo::gpu::cuda::CudaPlugin;
  using cryo::gpu::cuda::CudaPluginOptions;
  return cryo::gpu::PluginApiOf<CudaPlugin, CudaPluginOptions>("cuda", CRYO_VERSION);
}
