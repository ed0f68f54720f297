#pragma once

// When a stop checkpoint drained into staging memory begins writing the GPU data's files
// (config gpu_write_start). Header-only: cryod's config checks the word, the engine acts on it.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace cryo::engine {

enum class GpuWriteStart {
  kCheckpointed,  // "checkpointed": after the driver's checkpoint, beside CRIU's dump
  kDrained,       // "drained": once the drain is done, beside the driver's lock and checkpoint
  kDraining,      // "draining": behind the drain, each chunk once the library says it is there
};

// The config's word for it; an unknown word is an error that lists the three.
inline absl::StatusOr<GpuWriteStart> ParseGpuWriteStart(std::string_view word) {
  if (word == "checkpointed") return GpuWriteStart::kCheckpointed;
  if (word == "drained") return GpuWriteStart::kDrained;
  if (word == "draining") return GpuWriteStart::kDraining;
  return absl::InvalidArgumentError(
      absl::StrCat("gpu_write_start: \"", std::string(word),
                   "\" is not one of checkpointed, drained or draining"));
}

}  // namespace cryo::engine
