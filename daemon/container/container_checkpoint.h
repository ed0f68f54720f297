#pragma once

// What a container checkpoint and restore need beyond a process tree, moved out of the engine:
// the writable layer saved beside the images, the manifest's container section, the kubelet
// archive, the cryo-init handshake and the list of opted-in containers (termination notices).

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/container/runtime.h"
#include "daemon/container/target.h"
#include "daemon/store/manifest.h"
#include "lib/base/proc.h"
#include "lib/contract/criu_annotations.h"

namespace cryo::container {

// Saves the writable layer of a stopped container into `dir`/container/ (tar and deleted files,
// as lib/contract/archive.h names them); returns those files with size and checksum.
absl::StatusOr<std::vector<store::ManifestFile>> SaveWritableLayer(const proc::ProcReader& proc,
                                                                   const ContainerTarget& c,
                                                                   const std::string& dir);

// The manifest's container section for a checkpoint of `c`.
store::ContainerSection SectionOf(const ContainerTarget& c, const std::string& runtime_name);

// Writes kubelet's checkpoint archive for a published checkpoint in `dir`. `referred` gives the
// directory of each checkpoint the manifest's files refer to for chunks (m.References()): the
// archive holds every file whole.
absl::Status ExportKubeletArchive(const store::Manifest& m, const ContainerTarget& c,
                                  const std::string& dir, const std::string& dump_log,
                                  const std::string& path,
                                  const std::map<std::string, std::string>& referred = {});

// Tells a resuming cryo-init the restored job's pid (value > 0) or that the restore failed
// (value <= 0; `why` goes to the container's log first). Best effort.
void TellInit(const proc::ProcReader& proc, pid_t init_pid, int value, const std::string& why);

// Tells a running cryo-init that its job was checkpointed and is about to be ended, so that it
// exits with the checkpointed exit code (lib/contract/cryo_init_protocol.h). Best effort.
void TellInitCheckpointed(const proc::ProcReader& proc, pid_t init_pid);

// Tells a running cryo-init that its job is about to be ended without a checkpoint, its
// replacement resuming from one `lost` old (the plan at a stop), and writes `why` to the
// container's log. Best effort.
void TellInitResumesEarlier(const proc::ProcReader& proc, pid_t init_pid, absl::Duration lost,
                            const std::string& why);

// A running container the shim manages (under cryo-init): its pod opted in to
// checkpoint-on-stop, or asked for periodic checkpoints.
struct OptedIn {
  std::string container_id;
  std::string workload;                       // the key the shim recorded (empty: none)
  std::map<std::string, std::string> labels;  // kubelet's identity labels and the reason
  contract::CriuAnnotations criu;             // the pod's CRIU options
  bool checkpoint_on_stop = false;
  // The pod's checkpoint-every (zero: "never"); nullopt when the pod does not say.
  std::optional<absl::Duration> every;
  int64_t grace_s = -1;  // the pod's terminationGracePeriodSeconds (-1: unknown)
  absl::Time created = absl::InfinitePast();
  // A member of a job of several pods (lib/contract/job.h, as the shim recorded it): what is
  // checkpointed is the job, every member at one cut. Empty job: none.
  std::string job;
  std::string job_namespace;
  std::string job_member;
  int job_size = 0;  // 0: the pod did not say
};

// Every running container of `rt` that the shim manages (annotations under `prefix`) and that
// opted in to checkpoint-on-stop or set checkpoint-every, with `reason` as its checkpoint's
// reason label. For node-wide triggers (termination notices take the checkpoint-on-stop ones,
// the periodic schedule those with a period).
absl::StatusOr<std::vector<OptedIn>> OptedInContainers(runtime::ContainerRuntime& rt,
                                                       const std::string& prefix,
                                                       const std::string& reason);

}  // namespace cryo::container
