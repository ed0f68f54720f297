// The checkpoint's first step, `validate`: everything that can be refused is refused here,
// while the job runs and before anything is locked, drained or stopped.

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/criu/credentials.h"
#include "daemon/criu/dumpable.h"
#include "daemon/criu/job_network.h"
#include "daemon/criu/listen_ports.h"
#include "daemon/criu/resources.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/states.h"
#include "daemon/engine/validate.h"
#include "lib/base/ids.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "lib/contract/labels.h"

namespace cryo::engine {

absl::Status Engine::ValidateCheckpoint(CheckpointState& s) {
  const CheckpointRequest& req = s.req;
  CRYO_RETURN_IF_ERROR(ValidateRequest(req));
  pid_t target = req.pid;
  if (!req.container_id.empty()) {
    CRYO_ASSIGN_OR_RETURN(s.ctr, Container(req.container_id, /*restore=*/false));
    target = s.ctr->job_pid;
  }
  std::vector<proc::ProcInfo> tree;
  CRYO_RETURN_IF_ERROR(ValidateTarget(target, &tree));
  for (const auto& p : tree) {
    CRYO_RETURN_IF_ERROR(CheckNodeUserNamespace(
        p.pid, absl::StrCat("pid ", p.pid, " runs in a user namespace of its own"),
        "nothing was stopped"));
  }
  if (s.ctr && s.req.job_part) {
    // A job's member found by lookup comes with the job's options only: its own workload key
    // and pod, as the shim recorded them on its container, are its part's (what its
    // replacement's `resume: auto` and `cryo list` look for).
    const auto& info = s.ctr->info;
    if (s.req.workload.empty()) {
      auto it = info.annotations.find(
          contract::Key(cfg_.annotation_prefix, contract::container::kWorkloadKey));
      if (it != info.annotations.end()) s.req.workload = it->second;
    }
    for (const char* k : contract::k8s::kContainerIdentity) {
      auto it = info.labels.find(k);
      if (it != info.labels.end()) s.req.labels.emplace(k, it->second);
    }
  }
  s.workload =
      !req.workload.empty() ? req.workload : (s.ctr ? s.ctr->info.name : tree.front().comm);
  s.id = req.checkpoint_id.empty() ? MakeCheckpointId(s.workload, absl::Now()) : req.checkpoint_id;

  s.procs.Take(target, std::move(tree), *d_.proc, jobs_);
  const ProcessSet& procs = s.procs;
  s.claim = std::make_unique<Claim>(this);
  CRYO_RETURN_IF_ERROR(s.claim->Take(procs.pids(), s.id, /*id_is_new=*/true));
  s.claim->HoldSpace(procs.expected());
  CRYO_ASSIGN_OR_RETURN(s.credentials, LiveCredentials(procs.tree()));
  // CRIU refuses a tree whose session or group leader is outside it unless told it is a shell
  // job (started from a terminal); that is what the user means, so say it for them.
  const bool own_netns = s.ctr && d_.proc->OwnNetns(s.ctr->init_pid);
  CRYO_RETURN_IF_ERROR(criu::Resolve(cfg_.criu_defaults, req.criu, own_netns, &s.job));
  const std::set<pid_t> in_tree(procs.pids().begin(), procs.pids().end());
  s.job.shell_job =
      req.shell_job || !in_tree.count(procs.root().sid) || !in_tree.count(procs.root().pgid);
  // A pod resumes in another pod, with other addresses: sockets on this one's are refused now,
  // while the job runs (criu/listen_ports.h).
  if (own_netns) {
    if (req.job_part) {
      // A job member's sockets on its pod's addresses (NCCL listens on the pod's interface) move
      // with it: its replacement's restore rewrites these to the new pod's (job_hold).
      CRYO_ASSIGN_OR_RETURN(s.pod_ips, criu::PodAddresses(s.ctr->init_pid));
      // A job that moved before may still dial its first pods' addresses (the restore's table).
      CRYO_ASSIGN_OR_RETURN(s.former_addresses,
                            criu::ReadJobAddresses(s.ctr->init_pid, cfg_.nsexec_path));
    } else {
      CRYO_RETURN_IF_ERROR(
          criu::CheckPortableSockets(procs.pids(), s.ctr->init_pid, s.job.tcp_close));
    }
  }
  // What CRIU cannot dump is refused now, not after the GPU was drained and the job frozen.
  CRYO_RETURN_IF_ERROR(criu::CheckDumpable(*d_.proc, procs.pids()));
  // A GPU feature the driver cannot checkpoint is refused here, before anything is locked.
  CRYO_ASSIGN_OR_RETURN(std::vector<gpu::GpuProcess> gpu, d_.gpu->Discover(procs.pids()));
  if (s.ctr) {
    for (auto& g : gpu) g.ns_pid = d_.proc->NsPid(g.pid);
  }
  s.live.driver = gpu::DriverSession(std::move(gpu));
  // Processes that run the fast-path library move what it owns themselves.
  if (d_.fastpath != nullptr && cfg_.fastpath.enabled) {
    CRYO_ASSIGN_OR_RETURN(std::vector<gpu::FastpathProcess> found, d_.fastpath->Find(procs.pids()));
    s.live.fast = gpu::FastpathSession(std::move(found));
    // Claimed now, well before the drain: jobs preempted together see each other there.
    s.live.copy_claim = copy_share_.Take(static_cast<int>(s.live.fast.size()));
  }
  // A job's member with no GPU memory of the fast path's takes no part in the GPU cut: the
  // others do not wait for it there (job_cut.h).
  if (s.live.fast.empty()) LeaveJobGpuCut(s);
  return CheckNcclSharing(s.live.driver.records(), s.live.fast.records());
}

absl::Status CheckNcclSharing(const std::vector<gpu::GpuProcess>& gpu,
                              const std::vector<gpu::FastpathProcess>& fast) {
  // NCCL's ranks map each other's GPU memory: the driver checkpoints that but cannot restore
  // it, while the fast path (version kVersionCut on) carries it. Every such rank must run it.
  if (gpu.size() < 2) return absl::OkStatus();
  for (const auto& g : gpu) {
    if (!g.facts.is_object() || !g.facts.value("nccl_ipc", false)) continue;
    const bool carried = std::any_of(fast.begin(), fast.end(), [&](const gpu::FastpathProcess& f) {
      return f.pid == g.pid && f.version >= contract::gpu_fastpath::kVersionCut;
    });
    if (carried) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", g.pid,
        " runs NCCL across processes with its shared-memory transports on (CUDA IPC, cuMem): the "
        "driver checkpoints such a job but cannot restore it. Run every rank with the GPU fast "
        "path (the pod annotation cryo.dev/gpu-fast-path: \"true\"; docs/gpu.md), or with "
        "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0. "
        "Nothing was stopped"));
  }
  return absl::OkStatus();
}

absl::StatusOr<criu::CredentialCeiling> Engine::LiveCredentials(
    const std::vector<proc::ProcInfo>& tree) {
  std::vector<criu::TaskCredentials> all;
  for (const auto& p : tree) {
    for (pid_t t : d_.proc->Threads(p.pid)) {
      auto c = criu::ReadLiveCredentials(*d_.proc, p.pid, t == p.pid ? 0 : t);
      // A thread that ended since the tree was read holds nothing any more.
      if (absl::IsNotFound(c.status())) continue;
      CRYO_RETURN_IF_ERROR(c.status());
      all.push_back(*std::move(c));
    }
  }
  if (all.empty()) {
    return absl::NotFoundError(
        absl::StrCat("pid ", tree.front().pid, " ended before its credentials could be read"));
  }
  criu::CredentialCeiling c = criu::CeilingOf(all);
  // The highest hard limit of each resource among the tree's processes.
  for (const auto& p : tree) {
    auto limits = criu::ReadLiveHardLimits(*d_.proc, p.pid);
    if (absl::IsNotFound(limits.status())) continue;
    CRYO_RETURN_IF_ERROR(limits.status());
    if (c.rlimit_max.size() < limits->size()) c.rlimit_max.resize(limits->size(), 0);
    for (size_t i = 0; i < limits->size(); ++i) {
      c.rlimit_max[i] = std::max(c.rlimit_max[i], (*limits)[i]);
    }
  }
  return c;
}

}  // namespace cryo::engine
