#pragma once

// The state objects of the engine's two transactions (engine.h). Everything an undo reads is in
// the journal entry `je`: recovery rebuilds a state from a journal entry alone and runs the same
// undos.

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/container/target.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/stage_clock.h"
#include "daemon/store/checksum.h"

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

 private:
  Engine* e_;
  std::vector<pid_t> pids_;
  std::string id_;
};

struct CheckpointState {
  CheckpointState() = default;
  CheckpointState(const CheckpointState&) = delete;
  CheckpointState& operator=(const CheckpointState&) = delete;
  ~CheckpointState();

  // Inputs.
  CheckpointRequest req;
  Operation* op = nullptr;
  StageClock* clock = nullptr;
  absl::Time t_start;

  // Durable: the journal entry, the only thing undos read.
  journal::Entry je;

  // validate
  std::optional<container::ContainerTarget> ctr;
  pid_t target = 0;
  std::vector<proc::ProcInfo> tree;
  proc::ProcInfo root;
  std::string workload;
  std::string id;
  std::vector<int> pids, tids;
  uint64_t expected = 0;
  criu::JobOptions job;  // what CRIU dumps with (resolved in validate)
  std::unique_ptr<Engine::Claim> claim;
  std::vector<gpu::GpuProcess> gpu;
  std::vector<gpu::FastpathProcess> fast;  // processes the fast path moves
  // The most any of the job's threads holds (uids, capabilities, ...): recorded in the
  // manifest, the bound of a process-mode restore.
  criu::CredentialCeiling credentials;

  // plan: set when the stop's checkpoint is not taken (the job ended; the replacement resumes
  // from `newest`).
  struct Fallback {
    store::Manifest newest;
    std::string why;
    absl::Duration lost;
  };
  std::optional<Fallback> fallback;

  // gpu_drain, gpu_save: per fast-path process, its drain and its files.
  std::vector<std::unique_ptr<gpu::FastpathDrainHandle>> drains;
  std::vector<std::vector<int>> fast_fds;
  std::vector<std::vector<FileDigest>> fast_digests;
  std::vector<store::ManifestFile> fast_files;

  // stage
  std::unique_ptr<store::StagedCheckpoint> staged;
  std::string op_dir;

  // The GPU state is back in the job (rolled back, or restored for a leave-running checkpoint):
  // no undo needs to touch it again.
  bool gpu_back = false;

  // dump
  bool left_stopped = false;  // the dump left the job stopped (cryod resumes or kills it)
  std::map<std::string, FileDigest> digests;
  std::vector<int> saved_pids, saved_tids;
  std::vector<store::ManifestFile> container_files;

  // manifest, publish
  store::Manifest manifest;
  std::string published_path;
};

struct RestoreState {
  RestoreRequest req;
  Operation* op = nullptr;
  StageClock* clock = nullptr;
  absl::Time t_start;

  journal::Entry je;
  bool journaled = false;  // je has been written once

  store::Manifest m;
  std::unique_ptr<Engine::Claim> claim;
  std::optional<container::ContainerTarget> ctr;
  gpu::DeviceMap map;
  std::string dir;  // the checkpoint's local directory
  std::string op_dir;
  // Why the restore failed, for the container's log (set by the transaction on failure).
  absl::Status failure;

  pid_t root = 0;       // as CRIU reports it (in the container's namespace in container mode)
  pid_t host_root = 0;  // on the host
  std::vector<gpu::GpuProcess> gpu;        // with the restored processes' host pids
  std::vector<gpu::FastpathProcess> fast;  // likewise
};

}  // namespace cryo::engine
