#pragma once

// The state objects of the engine's two transactions (engine.h). Each is split the way its
// undos are typed (transaction.h): the journal entry (JournalEntry()), all that survives a crash
// and all that recovery has, and the live handles `live` (descriptors, drains in flight, the
// stage), which only a live rollback has. Everything else is the steps' own and no undo can see
// it.

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/container/target.h"
#include "daemon/criu/job_network.h"
#include "daemon/criu/network_lock.h"
#include "daemon/criu/pre_copy.h"
#include "daemon/engine/dump_staging.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/gpu_prefetch.h"
#include "daemon/engine/process_set.h"
#include "daemon/engine/stage_clock.h"
#include "daemon/fastpath/session.h"
#include "daemon/gpu/copy_share.h"
#include "daemon/gpu/driver_session.h"
#include "daemon/gpu/parker.h"
#include "daemon/store/checksum.h"
#include "daemon/store/job_checkpoint.h"
#include "lib/base/fd.h"

namespace cryo::engine {

// Marks pids and a checkpoint id as busy for the lifetime of an operation.
class Engine::Claim {
 public:
  explicit Claim(Engine* e) : e_(e) {}
  ~Claim();
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;
  // ABORTED / ALREADY_EXISTS when another operation holds one of them.
  absl::Status Take(const std::vector<pid_t>& pids, const std::string& id, bool id_is_new);
  // Checkpoints the one being written refers to: not deleted while it is.
  void HoldReferences(const std::set<std::string>& ids);
  // The bytes the checkpoint expects to write into the store (its estimate so far): image
  // imports leave them free while the claim lasts.
  void HoldSpace(uint64_t bytes);

 private:
  Engine* e_;
  std::vector<pid_t> pids_;
  std::string id_;
  std::vector<std::string> refs_;
  uint64_t space_ = 0;
};

// What a checkpoint's undos may read besides the journal entry: this process's handles, null
// (absent) during recovery.
struct CheckpointLive {
  CheckpointLive() = default;
  CheckpointLive(const CheckpointLive&) = delete;
  CheckpointLive& operator=(const CheckpointLive&) = delete;
  std::unique_ptr<store::StagedCheckpoint> staged;  // stage
  // validate on: the processes the fast path moves, and all the checkpoint holds of them. Their
  // records are journaled (CheckpointState::JournalEntry); their handles die with this cryod.
  gpu::FastpathSession fast;
  // validate on: the GPU processes on the driver's path (its lock and checkpoint).
  gpu::DriverSession driver;
  // validate to gpu_drain: this job's share of the node's copy threads (copy_share.h).
  gpu::CopyShare::Claim copy_claim;
  // dump: a leave-running checkpoint's images in node memory, until dump_write has copied them
  // into `staged` (inactive: CRIU wrote them there itself).
  DumpStaging dump_staging;
  // pre_copy to dump_pages: the job's private memory copied while it ran, its writes tracked
  // (criu/pre_copy.h). Declared before dump_pages, which reads it: destroyed after it.
  std::unique_ptr<criu::PreCopy> pre_copy;
  // dump to dump_pages: cryod's copy of the dump's anonymous memory, finished after the thaw
  // (checkpoint.cc; shared_ptr: the type is complete there only).
  std::shared_ptr<PostDumpPages> dump_pages;
};

// ... and a restore's.
struct RestoreLive {
  // Why the restore failed, for the container's log (set by the transaction on failure).
  absl::Status failure;
  // The pids CRIU is creating (the checkpoint's; in container mode numbered inside the pid
  // namespace of `ns_init`): what a CRIU that did not finish may have left running.
  std::vector<int> criu_pids;
  pid_t ns_init = 0;
  uint64_t criu_started = 0;  // clock ticks since boot when CRIU was started
  // A job member's arrival in the store (job_gather): marked failed when the restore fails.
  std::optional<store::JobArrival> job_arrival;
  std::string job_namespace, job_name;
};

// A checkpoint: the request, its ids, where it stands, and its participants, each of which owns
// its own state (docs/architecture.md, "Participants"). The journal entry is not kept by hand:
// JournalEntry() sums the transaction's own fields and the participants' durable records.
struct CheckpointState {
  using Durable = journal::Entry;
  using Live = CheckpointLive;
  CheckpointState() = default;
  CheckpointState(const CheckpointState&) = delete;
  CheckpointState& operator=(const CheckpointState&) = delete;

  // Where CRIU writes the images: node memory (dump_staging) or the stage.
  std::string images_dir() const {
    return live.dump_staging.active() ? live.dump_staging.dir() : live.staged->images_dir();
  }
  // The journal entry as it stands: every write of the journal, and the undos of a live
  // rollback, read it from here.
  const journal::Entry& JournalEntry() {
    je_.op_id = op->id();
    je_.kind = journal::OpKind::kCheckpoint;
    je_.checkpoint_id = id;
    je_.state = progress;
    je_.steps = steps;
    je_.staging_dir = live.staged ? live.staged->staging_dir() : "";
    je_.leave_running = req.leave_running;
    je_.tcp_established = job.tcp_established;
    je_.container_init_pid = ctr ? ctr->init_pid : 0;
    je_.started_at = absl::FormatTime(absl::RFC3339_sec, t_start, absl::UTCTimeZone());
    procs.Record(&je_);
    je_.gpu = live.driver.records();
    je_.fastpath = live.fast.records();
    return je_;
  }

  // The request.
  CheckpointRequest req;
  Operation* op = nullptr;
  StageClock* clock = nullptr;
  absl::Time t_start;
  criu::JobOptions job;  // what CRIU dumps with (resolved in validate)
  std::unique_ptr<Engine::Claim> claim;

  // The ids (validate, stage).
  std::string id;
  std::string workload;
  std::string op_dir;

  // Where it stands: the journal's state, and the steps with an undo begun (in order).
  journal::OpState progress = journal::OpState::kStarted;
  std::vector<std::string> steps;

  // The participants: the job's processes (the dump's), and the live handles of the stage, the
  // GPU's two paths and the dump's staging.
  ProcessSet procs;
  CheckpointLive live;
  // A container's job (validate): its container, its addresses at the cut when it is a job's
  // member and its earlier pods' (criu::ReadJobAddresses), and its writable layer (rootfs).
  std::optional<container::ContainerTarget> ctr;
  std::vector<std::string> pod_ips;
  criu::AddressMap former_addresses;
  std::vector<store::ManifestFile> container_files;
  // The most any of the job's threads holds (uids, capabilities, ...): recorded in the
  // manifest, the bound of a process-mode restore.
  criu::CredentialCeiling credentials;

  // The outcome. plan: set when the stop's checkpoint is not taken (the job ended; the
  // replacement resumes from `newest`).
  struct Fallback {
    store::Manifest newest;
    std::string why;
    absl::Duration lost;
  };
  std::optional<Fallback> fallback;
  // manifest, publish
  store::Manifest manifest;
  std::string published_path;
  absl::Time published_at = absl::InfinitePast();

 private:
  journal::Entry je_;
};

struct RestoreState {
  using Durable = journal::Entry;
  using Live = RestoreLive;
  RestoreRequest req;
  Operation* op = nullptr;
  StageClock* clock = nullptr;
  absl::Time t_start;

  journal::Entry je;
  RestoreLive live;
  bool journaled = false;  // je has been written once
  const journal::Entry& JournalEntry() const { return je; }

  store::Manifest m;
  std::unique_ptr<Engine::Claim> claim;
  std::optional<container::ContainerTarget> ctr;
  gpu::DeviceMap map;
  std::string dir;  // the checkpoint's local directory
  std::string op_dir;
  // verify: the pages images left to be verified while CRIU restores from them (process mode),
  // the restored tasks held at CRIU's post-restore until they pass (criu/action_gate.h).
  std::vector<ExpectedFile> pages_beside_criu;

  // job_gather, job_hold: a job member's replacement (issue 37)
  criu::AddressMap job_addresses;                  // the members' old addresses to their new
  std::string images_dir;                          // the images rewritten for them; empty: s.dir's
  std::unique_ptr<criu::ConnectionLock> job_lock;  // until every member is restored

  pid_t root = 0;       // as CRIU reports it (in the container's namespace in container mode)
  pid_t host_root = 0;  // on the host
  std::vector<gpu::GpuProcess> gpu;        // with the restored processes' host pids
  std::vector<gpu::FastpathProcess> fast;  // likewise
  // gpu_prefetch: the GPU data being read into staging memory while CRIU restores (null: the
  // library reads the files itself).
  std::unique_ptr<GpuPrefetch> prefetch;
  // gpu_fill (gpu_restore_into_gpu): per fast-path process, the parking process reading its
  // data from the store into GPU memory (null: read as without it).
  std::vector<std::unique_ptr<gpu::Parker>> fills;
  // gpu_fill: which of the fast path's processes are read into GPU memory (read by
  // gpu_prefetch, which leaves them out of the read ahead).
  std::vector<char> filling;
  // Starts them (a driver's start each) beside verify and CRIU; joined before `fills` is read
  // or dropped.
  std::jthread fills_starting;
};

}  // namespace cryo::engine
