#pragma once

// What the engine is asked and what it answers, in its own terms (the gRPC layer converts; see
// daemon/service/convert.h).

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "daemon/criu/options.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/store/job_checkpoint.h"
#include "daemon/store/manifest.h"
#include "lib/contract/stages.h"

namespace cryo::engine {

class JobCut;  // job_cut.h

// Stages of an operation, for progress and per-stage timings (lib/contract/stages.h).
using Stage = contract::Stage;
// "gpu_lock": the name in manifests, results and metrics.
std::string StageName(Stage s);

struct CheckpointRequest {
  pid_t pid = 0;              // process mode: root of the tree
  std::string container_id;   // container mode: a running container under cryo-init
  std::string checkpoint_id;  // empty: made from the workload and the time
  std::string workload;       // empty: the container's name or the root's command
  bool leave_running = false;
  bool shell_job = false;
  // CRIU options asked for (over the node's defaults); see daemon/criu/options.h.
  criu::OptionOverrides criu;
  std::map<std::string, std::string> labels;
  absl::Duration gpu_lock_timeout = absl::ZeroDuration();  // zero: the node's setting
  std::string export_archive;  // container mode: also write a kubelet archive here
  // The caller's deadline: past it, nothing is published and the job runs on.
  absl::Time deadline = absl::InfiniteFuture();
  // A stop's checkpoint: predicted against the deadline first (the `plan` step); one that will
  // not fit is not taken when a good checkpoint of the workload exists.
  bool plan = false;
  // A job checkpoint's part (Engine::CheckpointJob sets these): the job, its checkpoint and the
  // member, recorded in the manifest; and the cut that every member's dump meets before any
  // member runs on or is published.
  std::optional<store::JobPart> job_part;
  std::shared_ptr<JobCut> job_cut;
  absl::Duration job_cut_timeout = absl::Minutes(2);
};

// One checkpoint of every member of a job at one cut (Engine::CheckpointJob): each member's part
// is an ordinary checkpoint of its target (id "<job checkpoint id>.<member>"), and the job
// checkpoint exists once its record is committed in the store, after every part is published.
struct JobCheckpointRequest {
  std::string namespace_;
  std::string job;
  std::string id;  // empty: made from the job's name and the time
  struct Member {
    std::string member;
    CheckpointRequest req;  // its target and options; checkpoint_id, job_part, job_cut are set
    std::string node;       // the node it runs on; empty: this one
  };
  std::vector<Member> members;
  // With no members listed: they are looked up (EngineDeps::jobs), each checkpointed with
  // these options (leave_running, CRIU options, labels).
  CheckpointRequest member_defaults;
  // With no members listed: how many the job has; the lookup must find that many. 0: any.
  int job_size = 0;
  // With member_defaults.export_archive: the container whose part alone is exported.
  std::string export_container;
  // A stop's: planned first (Engine::PlanJob), as CheckpointRequest::plan for one job.
  bool plan = false;
  // How long the first member dumped waits for the others (its job frozen meanwhile), at most.
  absl::Duration cut_timeout = absl::Minutes(2);
  absl::Time deadline = absl::InfiniteFuture();
};

struct RestoreRequest {
  std::string checkpoint_id;
  std::string container_id;  // container checkpoints: the container waiting for the job
  absl::Duration pid_wait_timeout = absl::ZeroDuration();  // zero: the node's setting
  gpu::DeviceMap gpu_map;
  absl::Time deadline = absl::InfiniteFuture();
  // A member of a job restored with the others by this node (Engine::RestoreJob): it waits for
  // no replacements (job_gather), and its connections, if any, are held by the job's lock, so
  // CRIU takes none of its own.
  bool job_restore = false;
};

// A job checkpoint restored on this node, every member together (process mode): the job's
// connections are held until the last member is restored, and a member that fails takes the
// ones restored before it down with it.
struct JobRestoreRequest {
  std::string namespace_;
  std::string job;
  std::string id;
  absl::Duration pid_wait_timeout = absl::ZeroDuration();
  absl::Time deadline = absl::InfiniteFuture();
};

struct CheckpointResult {
  store::Manifest manifest;
  std::string store_path;
  // When it was published (the periodic schedule counts the next period from here, not from
  // the bookkeeping after it); InfinitePast for one not taken.
  absl::Time published_at = absl::InfinitePast();
  // A planned checkpoint that was not taken: why, and the age of `manifest` (the newest good
  // checkpoint, which the replacement resumes from) when the job ended.
  std::string not_taken;
  absl::Duration work_lost;
};

struct JobCheckpointResult {
  store::JobCheckpoint record;
  std::vector<CheckpointResult> parts;  // in the record's order
  // The plan took none: why; `record` is the job checkpoint to resume from instead (no parts).
  std::string not_taken;
};

struct RestoreResult {
  std::string checkpoint_id;
  pid_t root_pid = 0;  // host pid
  std::map<std::string, uint64_t> stage_ms;
};

struct JobRestoreResult {
  std::map<std::string, RestoreResult> members;  // by member
};

// A published checkpoint as listed or inspected.
struct CheckpointRecord {
  store::Manifest manifest;
  std::string store_path;  // empty in lists
  // A job checkpoint's part: why it is not restorable now (its job checkpoint not committed,
  // or committed with another part); empty when it is, and for other checkpoints.
  std::string job_uncommitted = {};
};

// A checkpoint image made a checkpoint of the store (Engine::ImportImage).
struct ImportedImage {
  store::Manifest manifest;
  // The image the checkpointed container ran (a restore needs a container of it).
  std::string container_image;
  std::string container_image_ref;
  bool imported_now = false;  // false: found from an earlier import
};

// The node as cryod sees it (`cryo node`).
struct NodeFacts {
  std::string node_name;
  std::string cryo_version;
  std::string kernel;
  std::string arch;
  std::string criu_version;
  std::string criu_path;
  std::string criu_check_error;
  std::string store_path;
  uint64_t store_free_bytes = 0;
  std::vector<gpu::PluginStatus> plugins;
  std::vector<gpu::DeviceInfo> gpus;
  bool fastpath_enabled = false;
  std::string fastpath_library;
  bool fastpath_library_present = false;
};

using OperationResult = std::variant<std::monostate, CheckpointResult, RestoreResult,
                                     JobCheckpointResult, JobRestoreResult>;

}  // namespace cryo::engine
