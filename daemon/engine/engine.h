#pragma once

// The checkpoint and restore flows of cryod, independent of gRPC. Every outside system is an
// interface (store, CRIU, GPU plugins, /proc) so the flows can be tested with fakes, and the
// real ones are used by cryod and the integration tests.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <algorithm>
#include <set>
#include <thread>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/proc.h"
#include "daemon/criu/criu.h"
#include "cryo/v1/cryo.pb.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/journal/journal.h"
#include "daemon/metrics/metrics.h"
#include "daemon/container/runtime.h"
#include "daemon/container/target.h"
#include "daemon/engine/operations.h"
#include "daemon/store/store.h"

namespace cryo::service {

struct EngineConfig {
  std::string node_name;
  std::string state_dir;  // journal/ and ops/<op-id>/ (CRIU logs)
  absl::Duration pid_wait_timeout = absl::Seconds(10);
  absl::Duration gpu_lock_timeout = absl::Seconds(10);
  absl::Duration incomplete_ttl = absl::Hours(24);
  // Newest checkpoints kept per workload after each checkpoint; 0 keeps all.
  int retention_keep = 0;
  // Threads that verify checksums before a restore (the images are read from the page cache
  // or the store's network link: several streams go faster than one).
  int verify_threads = std::clamp<int>(std::thread::hardware_concurrency(), 2, 8);
  // Operation log directories kept under state_dir/ops.
  int keep_op_logs = 50;
  pid_t self_pid = 0;
  // cryo-nsexec, which runs CRIU inside containers (container mode).
  std::string nsexec_path;
  // Prefix of the annotations the shim puts on the containers it manages.
  std::string annotation_prefix = "cryo.dev";
  // Tests only: at named points the engine creates <dir>/<point>.reached and waits for
  // <dir>/<point>.release, so a test can act (kill cryod, kill the job) at that exact moment.
  std::string test_hook_dir;
};

struct EngineDeps {
  store::CheckpointStore* store = nullptr;
  criu::Criu* criu = nullptr;
  gpu::GpuManager* gpu = nullptr;
  journal::Journal* journal = nullptr;
  metrics::Metrics* metrics = nullptr;
  const proc::ProcReader* proc = nullptr;
  // The node's container runtime; null: container mode is refused.
  runtime::ContainerRuntime* runtime = nullptr;
};

class Engine {
 public:
  Engine(EngineConfig cfg, EngineDeps deps) : cfg_(std::move(cfg)), d_(deps) {}

  // Finishes or undoes what the journal says was in flight when cryod stopped, then collects
  // incomplete checkpoints. Called once at startup, before serving.
  absl::Status Recover();

  // Removes other nodes' stages older than the incomplete TTL (the node died mid-checkpoint),
  // published directories that never got a manifest, the trash, and with `own_stages` this
  // node's stages (only at start, before any operation). Without `own_stages` it is safe while
  // operations run and takes no lock they wait on; cryod calls it so every 10 minutes.
  // Returns how many directories went.
  int CollectIncomplete(bool own_stages = false);

  // `deadline`: the caller's (gRPC) deadline; past it, the checkpoint is not published and the
  // job goes on as before (DEADLINE_EXCEEDED).
  absl::StatusOr<v1::CheckpointInfo> Checkpoint(const v1::CheckpointRequest& req, Operation& op,
                                                absl::Time deadline = absl::InfiniteFuture());
  absl::StatusOr<v1::RestoreResult> Restore(const v1::RestoreRequest& req, Operation& op);

  // Checkpoint requests (leave running) for every running container whose pod opted in to
  // checkpoint-on-stop, labelled with `reason`. FAILED_PRECONDITION without a runtime.
  absl::StatusOr<std::vector<v1::CheckpointRequest>> OptedInCheckpoints(const std::string& reason);

  absl::StatusOr<v1::CheckpointInfo> Get(const std::string& id);
  absl::StatusOr<std::vector<v1::CheckpointInfo>> List(const std::string& workload);
  absl::Status Delete(const std::string& id);
  v1::NodeInfoResponse NodeInfo(const std::vector<std::shared_ptr<Operation>>& running);

  static v1::CheckpointInfo InfoFromManifest(const store::Manifest& m, bool with_files);

 private:
  struct Claim;
  absl::Status ValidateTarget(pid_t pid, std::vector<proc::ProcInfo>* tree);
  void Hook(const std::string& point);
  std::string OpDir(const std::string& op_id) const;
  void PruneOpLogs();
  void ResumeStopped(const std::vector<journal::Task>& tasks);
  // `tasks` and every live descendant of them (matched by pid and start time).
  std::vector<journal::Task> WithDescendants(const std::vector<journal::Task>& tasks) const;
  void KillTasks(const std::vector<journal::Task>& tasks);
  void UnlockNetwork(const std::string& op_dir, pid_t container_init);
  absl::Status AddGpuCriuOptions(const std::vector<gpu::GpuProcess>& procs,
                                 std::vector<std::string>* args, std::vector<std::string>* env);
  // container_init > 0: the pids must be free in that container's pid namespace.
  absl::Status WaitPidsFree(const store::Manifest& m, Operation& op, absl::Duration timeout,
                            pid_t container_init);

  // Container mode.
  absl::StatusOr<ContainerTarget> Container(const std::string& id, ContainerUse use);
  // Saves the writable layer of a stopped container into dir/container/; returns its files.
  absl::StatusOr<std::vector<store::ManifestFile>> SaveRootfs(const ContainerTarget& c,
                                                              const std::string& dir);
  static nlohmann::json ContainerJson(const ContainerTarget& c, const std::string& runtime_name);
  absl::Status ExportArchive(const store::Manifest& m, const ContainerTarget& c,
                             const std::string& dir, const std::string& dump_log,
                             const std::string& path);
  // Tells a resuming cryo-init the job's pid (value > 0) or that the restore failed, and why.
  void TellInit(pid_t init_pid, int value, const std::string& why);

  EngineConfig cfg_;
  EngineDeps d_;
  absl::Mutex mu_;
  std::set<pid_t> busy_pids_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> busy_ids_ ABSL_GUARDED_BY(mu_);
};

// Lower-case status code name for metrics ("resource_exhausted").
std::string CodeName(absl::StatusCode code);

}  // namespace cryo::service
