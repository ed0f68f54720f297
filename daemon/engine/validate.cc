#include "daemon/engine/validate.h"

#include "absl/strings/str_cat.h"
#include "lib/base/ids.h"

namespace cryo::engine {
namespace {

using limits::HasControl;

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(what); }

}  // namespace

absl::Status ValidateRequest(const CheckpointRequest& r) {
  if (!r.checkpoint_id.empty()) {
    if (absl::Status s = ValidateCheckpointId(r.checkpoint_id); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint_id: ", s.message()));
    }
  }
  if (r.pid != 0 && !r.container_id.empty()) {
    return Bad("give either a pid or a container_id, not both");
  }
  if (r.pid == 0 && r.container_id.empty()) return Bad("give a pid or a container_id");
  if (r.pid < 0) return Bad(absl::StrCat("invalid pid ", r.pid));
  if (r.container_id.size() > 128 || HasControl(r.container_id)) {
    return Bad("container_id is not a container id");
  }
  if (absl::Status s = limits::ValidateWorkload(r.workload); !s.ok()) return s;
  if (absl::Status s = limits::ValidateLabels(r.labels); !s.ok()) return s;
  if (!r.export_archive.empty()) {
    if (r.container_id.empty()) return Bad("export_archive is for container checkpoints only");
    if (r.export_archive[0] != '/' || r.export_archive.size() > kMaxPathBytes ||
        HasControl(r.export_archive)) {
      return Bad("export_archive must be an absolute path");
    }
  }
  if (r.gpu_lock_timeout < absl::ZeroDuration()) return Bad("gpu_lock_timeout is negative");
  return absl::OkStatus();
}

absl::Status ValidateRequest(const RestoreRequest& r) {
  if (absl::Status s = ValidateCheckpointId(r.checkpoint_id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_id: ", s.message()));
  }
  if (r.container_id.size() > 128 || HasControl(r.container_id)) {
    return Bad("container_id is not a container id");
  }
  if (r.gpu_map.size() > kMaxGpuMap) return Bad("gpu_map has too many entries");
  for (const auto& [from, to] : r.gpu_map) {
    if (from.empty() || to.empty() || from.size() > 128 || to.size() > 128 || HasControl(from) ||
        HasControl(to)) {
      return Bad(absl::StrCat("gpu_map entry '", from.substr(0, 64), "' is not a GPU UUID pair"));
    }
  }
  if (r.pid_wait_timeout < absl::ZeroDuration()) return Bad("pid_wait_timeout is negative");
  return absl::OkStatus();
}

}  // namespace cryo::engine
