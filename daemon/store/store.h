#pragma once

// The checkpoint store: where images go and come back from. An interface so an object store
// can be added later; LocalStore serves any filesystem path (local disk, NFS, CephFS, a CSI
// RWX volume).

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/store/job_checkpoint.h"
#include "daemon/store/manifest.h"

namespace cryo::store {

// A checkpoint being written: invisible until Publish() succeeds.
class StagedCheckpoint {
 public:
  virtual ~StagedCheckpoint() = default;
  virtual const std::string& id() const = 0;
  // Local directory that receives the images (CRIU's -D).
  virtual std::string images_dir() const = 0;
  // The staging directory itself, recorded in the journal so a crash can be cleaned up.
  virtual std::string staging_dir() const = 0;
  // Flushes the images, writes the manifest last and makes the checkpoint visible atomically.
  // ALREADY_EXISTS if another checkpoint took the id meanwhile.
  virtual absl::Status Publish(const Manifest& m) = 0;
  // Removes everything staged; idempotent. Destroying an unpublished stage aborts it.
  virtual absl::Status Abort() = 0;
};

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  virtual std::string location() const = 0;
  virtual absl::StatusOr<std::unique_ptr<StagedCheckpoint>> Stage(const std::string& id) = 0;
  // NOT_FOUND if there is no published checkpoint with this id.
  virtual absl::StatusOr<Manifest> Get(const std::string& id) = 0;
  // Every published checkpoint, newest first. Unreadable manifests are skipped.
  virtual absl::StatusOr<std::vector<Manifest>> List() = 0;
  virtual absl::Status Delete(const std::string& id) = 0;
  // Records that a restore found the checkpoint damaged (Manifest::damaged from then on).
  virtual absl::Status MarkDamaged(const std::string& id, const std::string& reason) = 0;
  // Local directory with the checkpoint's files, for verification and CRIU restore.
  virtual absl::StatusOr<std::string> LocalPath(const std::string& id) = 0;
  // Removes other nodes' staging directories older than `ttl` (a node that died mid-checkpoint),
  // published directories that never got a manifest (once older than `ttl`), job checkpoints'
  // parts whose record was never written (once older than `ttl`) and the trash;
  // with `own_stages`, every staging directory of this node too (only safe when this node runs
  // no checkpoint: cryod's start), except the staging directories in `keep` (paths; a recovery
  // still needs them). Returns how many directories went.
  virtual absl::StatusOr<int> CollectIncomplete(absl::Duration ttl, bool own_stages,
                                                const std::set<std::string>& keep = {}) = 0;
  // Deletes all but the newest `keep` good checkpoints of `workload` (damaged ones do not count;
  // a job checkpoint's parts neither count nor go: they go with their job checkpoint;
  // one newer than the last kept stays, for inspection), except those in `in_use` (a restore
  // reads them; a later pass takes them) and those a checkpoint that stays refers to
  // (Manifest::References, however many steps away); returns the deleted ids.
  virtual absl::StatusOr<std::vector<std::string>> ApplyRetention(
      const std::string& workload, int keep, const std::set<std::string>& in_use) = 0;
  // FAILED_PRECONDITION (read-only, not a directory, a link where the store's layout has a
  // directory) or PERMISSION_DENIED, with the path; UNAVAILABLE when the store's directory is
  // gone or was replaced by one on another filesystem (an unmounted share).
  virtual absl::Status CheckWritable() = 0;
  virtual absl::StatusOr<uint64_t> FreeBytes() = 0;
  // Whether `path` is a staging directory of this node in this store (a journal names one for
  // recovery to remove; nothing else may be removed on its word).
  virtual bool OwnsStagingDir(const std::string& path) const = 0;
  // Removes `path` if OwnsStagingDir says it is ours (FAILED_PRECONDITION otherwise), without
  // following any link on the way.
  virtual absl::Status RemoveStagingDir(const std::string& path) = 0;
  // Whether Publish makes images durable (fsync), so writers may start writeback early.
  virtual bool durable() const { return false; }

  // Job checkpoints (store/job_checkpoint.h), kept beside the checkpoints that are their parts.
  // Writes the record, last and atomically: from then on the job checkpoint exists. Each
  // member's part must be published, be that member's part of this job checkpoint
  // (Manifest::job) and have the digest the record names: FAILED_PRECONDITION naming the member
  // otherwise. ALREADY_EXISTS when the job has a record of this id.
  virtual absl::Status CommitJobCheckpoint(const JobCheckpoint& jc) = 0;
  // NOT_FOUND when the job has no record of this id (never committed, or deleted).
  virtual absl::StatusOr<JobCheckpoint> GetJobCheckpoint(const std::string& ns,
                                                         const std::string& job,
                                                         const std::string& id) = 0;
  // The job's records, newest first; unreadable ones are skipped with a warning.
  virtual absl::StatusOr<std::vector<JobCheckpoint>> ListJobCheckpoints(const std::string& ns,
                                                                        const std::string& job) = 0;
  // The record first (the job checkpoint is gone at once), then its parts.
  virtual absl::Status DeleteJobCheckpoint(const std::string& ns, const std::string& job,
                                           const std::string& id) = 0;
  // A member's arrival (store/job_checkpoint.h), replacing its last one; the job's arrivals
  // (unreadable ones skipped). Collected with incomplete checkpoints once older than their TTL.
  virtual absl::Status MarkJobArrival(const std::string& ns, const std::string& job,
                                      const JobArrival& a) {
    return absl::UnimplementedError("this store keeps no job arrivals");
  }
  virtual absl::StatusOr<std::vector<JobArrival>> JobArrivals(const std::string& ns,
                                                              const std::string& job) {
    return absl::UnimplementedError("this store keeps no job arrivals");
  }
  // Removes a member's arrival; OK when there is none.
  virtual absl::Status RemoveJobArrival(const std::string& ns, const std::string& job,
                                        const std::string& member) {
    return absl::UnimplementedError("this store keeps no job arrivals");
  }
};

// The committed job checkpoint that `part` belongs to, with `part` in it as committed: its
// record exists, names this checkpoint for its member, and with the digest of this manifest.
// FAILED_PRECONDITION otherwise, saying that a part is never restored alone. `part` must be a
// job checkpoint's part (Manifest::job).
absl::StatusOr<JobCheckpoint> CommittedJobCheckpointOf(CheckpointStore& store,
                                                       const Manifest& part);

struct LocalStoreOptions {
  std::string root;
  std::string node_name;
  // fsync every image before publishing: a published checkpoint survives a node crash.
  bool fsync = true;
};

absl::StatusOr<std::unique_ptr<CheckpointStore>> CreateLocalStore(const LocalStoreOptions& opts);

}  // namespace cryo::store
