#pragma once

// What cuda_plugin.cc (the driver's checkpoint calls) and cuda_discover.cc (which processes use
// which GPUs) share; not for other users.

#include "plugins/cuda/cuda_api.h"

namespace cryo::gpu::cuda {

inline const char* StateName(CUprocessState s) {
  switch (s) {
    case CU_PROCESS_STATE_RUNNING:
      return "running";
    case CU_PROCESS_STATE_LOCKED:
      return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED:
      return "checkpointed";
    case CU_PROCESS_STATE_FAILED:
      return "failed";
  }
  return "unknown";
}

// /dev/nvidia-uvm mappings a CUDA process has without managed memory (UvmMappings).
inline constexpr int kBaseUvmMappings = 1;

}  // namespace cryo::gpu::cuda
