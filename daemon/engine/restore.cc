// The restore transaction (see engine.h for the steps and transaction.h for the rules).

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "daemon/container/container_checkpoint.h"
#include "daemon/criu/action_gate.h"
#include "daemon/criu/job_network.h"
#include "daemon/criu/listen_ports.h"
#include "daemon/criu/resources.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/states.h"
#include "daemon/engine/step_hooks.h"
#include "daemon/engine/validate.h"
#include "daemon/store/signature.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/poll.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"
#include "lib/base/subprocess.h"
#include "lib/contract/archive.h"
#include "lib/contract/labels.h"

namespace cryo::engine {

Transaction<RestoreState> Engine::RestoreSteps() {
  using S = RestoreState;
  auto run = [this](absl::Status (Engine::*f)(S&)) {
    return [this, f](S& s) { return (this->*f)(s); };
  };
  auto undo = [this](void (Engine::*f)(const journal::Entry&, RestoreLive*)) {
    return [this, f](const journal::Entry& e, RestoreLive* live) { (this->*f)(e, live); };
  };
  auto step = [](auto&&... a) { return MakeStep<S>(std::forward<decltype(a)>(a)...); };
  auto image_bytes = [](const S& s) { return StageSize{s.m.TotalBytes(), ""}; };
  // A job member's replacement (a node's RestoreJob holds the job's connections itself).
  auto job_member = [](const S& s) { return s.m.job.has_value() && !s.req.job_restore; };
  return Transaction<S>({
      step("validate", Stage::kValidate, run(&Engine::ValidateRestore)),
      // From here on, a container waiting for this restore must hear how it went.
      step(
          "init_handshake", Stage::kUnspecified, [](S&) { return absl::OkStatus(); },
          undo(&Engine::UndoInitHandshake)),
      step("check", Stage::kUnspecified, run(&Engine::CheckRestore)),
      // With gpu_restore_into_gpu, the GPU data read into GPU memory from here on, beside the
      // rest (gpu_refill waits for it and checks it).
      step("gpu_fill", Stage::kUnspecified, run(&Engine::StartGpuFills), nullptr,
           [this](const S& s) {
             return cfg_.fastpath.restore_into_gpu && !s.m.gpu_fastpath.empty();
           }),
      step("verify", Stage::kVerify, run(&Engine::Verify), nullptr, nullptr, image_bytes),
      // What the images would make the restored threads: never more than the target grants.
      step("credentials", Stage::kUnspecified, run(&Engine::CheckRestoreCredentials)),
      // The rest of the GPU data into staging memory while the rest runs (gpu_refill waits for
      // it).
      step("gpu_prefetch", Stage::kUnspecified, run(&Engine::PrefetchGpuData), nullptr,
           [this](const S& s) {
             return cfg_.fastpath.staging != nullptr && !s.m.gpu_fastpath.empty();
           }),
      // A job member's replacement waits for the others' (a node's RestoreJob restores them
      // all itself).
      step("job_gather", Stage::kUnspecified, run(&Engine::GatherJobMembers),
           undo(&Engine::UndoJobGather), job_member),
      step("wait_pids", Stage::kWaitPids, run(&Engine::WaitPidsFree)),
      // The job's TCP listeners must bind where CRIU restores them (criu/listen_ports.h).
      step("ports", Stage::kUnspecified, run(&Engine::FreeListenPorts)),
      step("journal", Stage::kUnspecified, run(&Engine::JournalRestore)),
      // The job's files must be where it left them before CRIU reopens them.
      step("rootfs", Stage::kRootfs, run(&Engine::ApplyRootfs), nullptr,
           [](const S& s) { return s.ctr.has_value(); }),
      // Its connections to the others move with the pods (new addresses) and are held until
      // every member is restored (job_release).
      step("job_hold", Stage::kUnspecified, run(&Engine::HoldJobConnections), nullptr, job_member),
      step("criu_restore", Stage::kRestore, run(&Engine::RunCriuRestore),
           undo(&Engine::UndoCriuRestore), nullptr, image_bytes),
      step("gpu_restore", Stage::kGpuRestore, run(&Engine::RestoreGpus), nullptr,
           [](const S& s) { return !s.gpu.empty(); }),
      // begins its stage itself: the size is known once the restored processes are found
      step("gpu_refill", Stage::kUnspecified, run(&Engine::RefillRestoredGpus), nullptr,
           [](const S& s) { return !s.m.gpu_fastpath.empty(); }),
      step("job_release", Stage::kUnspecified, run(&Engine::ReleaseJobConnections), nullptr,
           job_member),
      step("done", Stage::kUnspecified, run(&Engine::Done), nullptr, nullptr, nullptr,
           /*commit=*/true),
  });
}

absl::StatusOr<RestoreResult> Engine::Restore(const RestoreRequest& req, Operation& op) {
  StageClock clock("restore", d_.metrics, op);
  auto prune = absl::MakeCleanup([this] { PruneOpLogs(); });
  RestoreState s;
  s.req = req;
  s.op = &op;
  s.clock = &clock;
  s.t_start = absl::Now();
  s.map = req.gpu_map;
  s.je.op_id = op.id();
  s.je.kind = journal::OpKind::kRestore;
  s.je.checkpoint_id = req.checkpoint_id;
  s.je.state = journal::OpState::kRestoring;
  s.je.started_at = absl::FormatTime(absl::RFC3339_sec, s.t_start, absl::UTCTimeZone());

  auto deadline = [&](const Step<RestoreState>& step) -> absl::Status {
    if (absl::Now() <= req.deadline) return absl::OkStatus();
    return absl::DeadlineExceededError(
        absl::StrCat("the caller's deadline passed before the restore's ", step.name,
                     " step; the restore was abandoned"));
  };
  auto hooks = StepHooks<RestoreState>(cfg_.fault, op, clock, "restore", deadline, "");
  hooks.on_begin = [&](const std::string& name) -> absl::Status {
    s.je.steps.push_back(name);
    return s.journaled ? JournalBefore(s.je) : absl::OkStatus();
  };
  hooks.on_failure = [&](const absl::Status& failure) { s.live.failure = failure; };
  absl::Status st = restore_txn_->Run(s, hooks);
  if (s.journaled) {
    if (absl::Status r = d_.journal->Remove(op.id()); !r.ok()) {
      CRYO_LOG(Warning) << "restore " << op.id() << ": removing its journal entry failed: " << r;
    }
  }
  if (!st.ok()) return st;
  clock.End();
  if (d_.metrics) {
    d_.metrics->ObserveOperation("restore", absl::ToDoubleSeconds(absl::Now() - s.t_start));
  }
  // The stages in the log too: in container mode nobody else sees the restore's answer whole.
  std::vector<std::string> stages;
  for (const auto& [stage, ms] : clock.ms()) stages.push_back(absl::StrCat(stage, " ", ms));
  CRYO_LOG(Info) << "restored checkpoint " << s.m.id << " as pid " << s.host_root
                 << (s.ctr ? absl::StrCat(" (pid ", s.root, " in container ",
                                          s.ctr->info.id.substr(0, 13), ")")
                           : "")
                 << "; stages (ms): " << absl::StrJoin(stages, ", ");
  return RestoreResult{s.m.id, s.host_root, clock.ms()};
}

absl::Status Engine::ValidateRestore(RestoreState& s) {
  CRYO_RETURN_IF_ERROR(ValidateRequest(s.req));
  CRYO_ASSIGN_OR_RETURN(s.m, d_.store->Get(s.req.checkpoint_id));
  const bool container_mode = s.m.kind == store::CheckpointKind::kContainer;
  if (container_mode && s.req.container_id.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint '", s.m.id,
                     "' is of a container; it is restored into a new container "
                     "(pod annotation cryo.dev/resume through the CRI shim), not as a process"));
  }
  if (!container_mode && !s.req.container_id.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint '", s.m.id, "' is of a process tree, not of a container"));
  }
  if (!container_mode && !s.req.gpu_map.empty() && s.m.gpu_processes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", s.m.id, "' holds no GPU state: a GPU map has nothing to apply to"));
  }
  if (s.m.arch != proc::MachineArch()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint '", s.m.id, "' was taken on ",
                                                      s.m.arch, ", this node is ",
                                                      proc::MachineArch()));
  }
  // CRIU reads images of older versions, not always of newer ones: refuse before anything is
  // touched rather than fail half-way through the restore.
  if (auto c = criu::CompareVersions(d_.criu->version(), s.m.criu_version); c && *c < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", s.m.id, "' was taken with CRIU ", s.m.criu_version, "; this node has CRIU ",
        d_.criu->version(),
        ", which may not read its images: restore on a node with CRIU >= ", s.m.criu_version));
  }
  if (s.m.job) {
    // A member's part restores only as part of a whole job checkpoint: its record written
    // (every member durable), this part in it as committed, and signed by a node of ours.
    CRYO_ASSIGN_OR_RETURN(store::JobCheckpoint jc, store::CommittedJobCheckpointOf(*d_.store, s.m));
    CRYO_RETURN_IF_ERROR(store::VerifyJobCheckpointSignature(jc, signing_key_));
  }
  s.claim = std::make_unique<Claim>(this);
  CRYO_RETURN_IF_ERROR(s.claim->Take({}, s.m.id, /*id_is_new=*/false));
  if (container_mode) {
    CRYO_ASSIGN_OR_RETURN(s.ctr, Container(s.req.container_id, /*restore=*/true));
    s.je.container_init_pid = s.ctr->init_pid;
  }
  s.je.gpu = s.m.gpu_processes;
  return absl::OkStatus();
}

void Engine::UndoInitHandshake(const journal::Entry& e, RestoreLive* live) {
  if (e.container_init_pid <= 0) return;
  // Recovery has no live failure: cryod restarted in the middle of the restore.
  const absl::Status why =
      live ? live->failure : absl::AbortedError("cryod restarted during the restore");
  container::TellInit(*d_.proc, e.container_init_pid, -1,
                      absl::StrCat("restore of checkpoint ", e.checkpoint_id,
                                   " failed: ", why.ok() ? "cryod gave up" : why.ToString()));
}

absl::Status CheckSameNamespace(const store::Manifest& m, const runtime::ContainerInfo& target) {
  // A container checkpoint holds its pod's memory (tokens, weights, data): only a pod of the same
  // namespace may resume it. The namespaces are the runtime's labels (kubelet's), on both sides.
  if (!m.container) return absl::OkStatus();
  auto from = m.container->labels.find(contract::k8s::kPodNamespace);
  if (from == m.container->labels.end() || from->second.empty()) return absl::OkStatus();
  auto to = target.labels.find(contract::k8s::kPodNamespace);
  const std::string theirs = to == target.labels.end() ? "" : to->second;
  if (theirs == from->second) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "checkpoint '", m.id, "' belongs to namespace ", from->second, "; container ", target.name,
      " is in ", theirs.empty() ? "no namespace" : absl::StrCat("namespace ", theirs),
      ": a pod resumes only checkpoints of its own namespace; nothing was started"));
}

namespace {

// The device files an OCI spec gives its container (linux.devices): for a pod, those its
// device plugin allocated. A spec without the list gives none; nullopt when the runtime did not
// report the spec (then the environment alone says).
std::optional<std::vector<std::string>> SpecDevices(const nlohmann::json& spec) {
  if (!spec.is_object() || !spec.contains("linux")) return std::nullopt;
  std::vector<std::string> out;
  const nlohmann::json& lx = spec["linux"];
  if (!lx.is_object() || !lx.contains("devices")) return out;
  const nlohmann::json& devices = lx["devices"];
  if (!devices.is_array()) return out;
  for (const nlohmann::json& d : devices) {
    if (d.is_object() && d.contains("path") && d["path"].is_string()) {
      out.push_back(d["path"].get<std::string>());
    }
  }
  return out;
}

}  // namespace

absl::Status Engine::CheckRestore(RestoreState& s) {
  if (s.ctr) {
    if (s.ctr->restore_from != s.m.id) {
      return absl::FailedPreconditionError(
          absl::StrCat("container ", s.ctr->info.name, " waits for checkpoint '",
                       s.ctr->restore_from, "', not '", s.m.id, "'"));
    }
    CRYO_RETURN_IF_ERROR(CheckSameNamespace(s.m, s.ctr->info));
    const std::string want = s.m.container ? s.m.container->image_ref : "";
    if (!want.empty() && want != s.ctr->info.image_ref) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint '", s.m.id, "' was taken in a container of image ", want, " (",
                       s.m.container->image, "); container ", s.ctr->info.name, " runs ",
                       s.ctr->info.image_ref, ": a job resumes only on the image it ran on"));
    }
  }
  if (!s.m.gpu_fastpath.empty() && d_.fastpath == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint '", s.m.id,
                     "' moved GPU memory through the fast path, which is off on this "
                     "node (config gpu_fast_path)"));
  }
  gpu::GpuManager::RestoreTarget target;
  if (s.ctr) {
    target.env_pid = s.ctr->init_pid;
    target.devices = SpecDevices(s.ctr->info.runtime_spec);
  }
  if (absl::Status st = d_.gpu->CheckCompatibleFor(s.m.gpu, target, s.map); !st.ok()) {
    return Annotate(st, absl::StrCat("checkpoint '", s.m.id, "'"));
  }
  CRYO_ASSIGN_OR_RETURN(s.dir, d_.store->LocalPath(s.m.id));
  return absl::OkStatus();
}

namespace {

// A pages image of CRIU's ("images/pages-3.img"): what CRIU copies into the restored memory
// as it is, without parsing it.
bool IsPagesImage(absl::string_view path) {
  return absl::ConsumePrefix(&path, store::kImagesDir) && absl::ConsumePrefix(&path, "/pages-") &&
         absl::ConsumeSuffix(&path, ".img") && !path.empty() &&
         path.find('/') == absl::string_view::npos;
}

}  // namespace

absl::Status Engine::Verify(RestoreState& s) {
  // Every file before anything starts: a bad image must never half-restore a job. In process
  // mode the pages images (most of the bytes) are only checked for size and kind here and
  // hashed while CRIU restores from them: CRIU copies them into memory without parsing them,
  // and the tasks it restored are held at its post-restore gate, before any of them runs,
  // until they pass (RunCriuRestore). In container mode CRIU runs inside the new container,
  // where the gate program cannot be reached, so everything is hashed first.
  const bool pages_later = !s.ctr && GateProgramUsable();
  s.pages_beside_criu.clear();
  std::atomic<uint64_t> verified{0};
  absl::Status st;
  {
    std::vector<ExpectedFile> files;
    std::set<std::string> listed;
    uint64_t now_bytes = 0;
    for (const auto& f : s.m.files) {
      // The fast path's files are checked by the library as it reads them, before the job may
      // use a byte of them: reading them twice would double the restore.
      const bool fast = absl::StartsWith(f.path, "gpu/fastpath-");
      const bool pages = pages_later && IsPagesImage(f.path);
      files.push_back({f.path, f.size, f.checksum, fast || pages});
      if (pages) s.pages_beside_criu.push_back({f.path, f.size, f.checksum, false});
      if (!fast && !pages) now_bytes += f.size;
      listed.insert(f.path);
    }
    ProgressTicker ticker(
        *s.op, Stage::kVerify, [&] { return verified.load(); }, now_bytes);
    // Nothing the manifest does not list: CRIU reads every image of the directory by name.
    st = RefuseUnlistedFiles(s.dir, listed, {store::kManifestName, store::kDamagedName});
    if (st.ok()) st = VerifyFiles(s.dir, files, cfg_.verify_threads, &verified);
    // And what other checkpoints hold for it (incremental GPU data).
    if (st.ok()) st = CheckReferences(s.m);
  }
  if (!st.ok()) return RefuseUnverified(s, st);
  if (d_.metrics) d_.metrics->AddBytesRead(s.m.TotalBytes());
  return absl::OkStatus();
}

absl::Status Engine::RefuseUnverified(RestoreState& s, const absl::Status& st) {
  if (absl::IsDataLoss(st)) {
    // Remembered, so that automatic resumes pick an older checkpoint next time; an I/O
    // error (store unreachable) says nothing about the checkpoint and is not recorded.
    if (absl::Status ms = d_.store->MarkDamaged(s.m.id, std::string(st.message())); !ms.ok()) {
      CRYO_LOG(Warning) << "recording checkpoint " << s.m.id << " as damaged: " << ms;
    }
  }
  // (Files it does not list are someone's addition, not damage of its own.)
  return Annotate(st, absl::StrCat("checkpoint '", s.m.id, "' ",
                                   absl::IsDataLoss(st) ? "is damaged" : "was refused",
                                   ", refusing to restore"));
}

absl::StatusOr<criu::CredentialCeiling> Engine::ContainerCeiling(pid_t init_pid) {
  CRYO_ASSIGN_OR_RETURN(criu::TaskCredentials init, criu::ReadLiveCredentials(*d_.proc, init_pid));
  criu::CredentialCeiling ceiling = criu::CeilingOf({init});
  CRYO_ASSIGN_OR_RETURN(ceiling.rlimit_max, criu::ReadLiveHardLimits(*d_.proc, init_pid));
  if (init.seccomp_mode == criu::kSeccompFilter) {
    auto filters = criu::ReadSeccompFilters(init_pid);
    if (!filters.ok()) return Annotate(filters.status(), "reading the container's seccomp filters");
    ceiling.seccomp_filters = *std::move(filters);
  }
  return ceiling;
}

absl::Status Engine::CheckImageCredentials(const std::string& images, bool container,
                                           const criu::CredentialCeiling& ceiling,
                                           absl::string_view whose) {
  CRYO_RETURN_IF_ERROR(criu::CheckNoNamespaceImages(images, /*user_only=*/!container));
  CRYO_ASSIGN_OR_RETURN(auto threads, criu::ReadImageCredentials(images));
  CRYO_RETURN_IF_ERROR(criu::CheckCredentials(threads, ceiling, whose));
  return criu::CheckImageResources(images, ceiling, whose);
}

absl::Status Engine::CheckRestoreCredentials(RestoreState& s) {
  const std::string images = fs::Join(s.dir, store::kImagesDir);
  criu::CredentialCeiling ceiling;
  std::string whose;
  if (s.ctr) {
    // The new container's cryo-init runs as the runtime set it up from the container's OCI
    // spec (user, groups, capabilities, no_new_privs, seccomp, LSM label): that is the most the
    // job may have. The checkpoint may come from a pod author's image, so nothing in it counts.
    CRYO_ASSIGN_OR_RETURN(ceiling, ContainerCeiling(s.ctr->init_pid));
    whose = absl::StrCat("container ", s.ctr->info.name);
  } else {
    // What the job held when it was checkpointed, as the node that took it recorded and
    // signed it: a store writer can neither raise it nor change the images it bounds.
    CRYO_RETURN_IF_ERROR(store::VerifyManifestSignature(s.m, signing_key_));
    if (!s.m.credentials) {
      return absl::PermissionDeniedError(
          absl::StrCat("checkpoint '", s.m.id,
                       "' records no credentials (field credentials), so nothing "
                       "bounds what its images would restore: refused"));
    }
    ceiling = *s.m.credentials;
    whose = "the job had when it was checkpointed";
  }
  return Annotate(CheckImageCredentials(images, s.ctr.has_value(), ceiling, whose),
                  absl::StrCat("checkpoint '", s.m.id, "'"));
}

absl::Status Engine::FreeListenPorts(RestoreState& s) {
  const std::string images = fs::Join(s.dir, store::kImagesDir);
  CRYO_ASSIGN_OR_RETURN(auto listing, fs::ListDir(images));
  // Images with a network namespace of their own: CRIU creates a fresh one, where nothing waits.
  for (const auto& e : listing) {
    if (absl::StartsWith(e.name, "netns-")) return absl::OkStatus();
  }
  CRYO_ASSIGN_OR_RETURN(auto listeners, criu::ReadImageListeners(images));
  if (listeners.empty()) return absl::OkStatus();
  // A job member listens where job_hold's rewrite will make it: on its new pod's address.
  if (!s.job_addresses.empty()) listeners = criu::RewriteListeners(listeners, s.job_addresses);
  criu::FreePortsOptions o;
  o.netns_pid = s.ctr ? s.ctr->init_pid : 0;  // process mode: cryod's own namespace
  o.deadline = s.req.deadline;
  o.stop = [&s] { return s.op->cancelled(); };
  auto freed = criu::FreeListenPorts(listeners, o);
  if (!freed.ok()) {
    return Annotate(freed.status(), absl::StrCat("checkpoint ", s.m.id, ": "));
  }
  if (!freed->ports.empty()) {
    CRYO_LOG(Info) << "restore of " << s.m.id << ": cleared " << freed->cleared
                   << " TIME_WAIT socket(s) of the job's closed connections from "
                   << absl::StrJoin(freed->ports, ", ") << " in "
                   << absl::FormatDuration(freed->waited);
  }
  return absl::OkStatus();
}

absl::Status Engine::WaitPidsFree(RestoreState& s) {
  const absl::Duration timeout = s.req.pid_wait_timeout > absl::ZeroDuration()
                                     ? s.req.pid_wait_timeout
                                     : cfg_.pid_wait_timeout;
  const pid_t container_init = s.ctr ? s.ctr->init_pid : 0;
  std::vector<int> need = s.m.pids;
  need.insert(need.end(), s.m.tids.begin(), s.m.tids.end());
  std::sort(need.begin(), need.end());
  need.erase(std::unique(need.begin(), need.end()), need.end());
  int busy = 0;
  std::string who;
  auto free = [&] {
    busy = 0;
    std::set<pid_t> in_container;
    if (container_init > 0) in_container = container::NsPidsInUse(*d_.proc, container_init);
    for (int p : need) {
      if (container_init > 0) {
        if (in_container.count(p)) {
          busy = p;
          who = "a process of the container";
          break;
        }
        continue;
      }
      // /proc/<tid> resolves for threads too; a zombie still holds its pid.
      auto i = d_.proc->Read(p);
      if (i.ok()) {
        busy = p;
        who = i->comm;
        break;
      }
    }
    if (busy != 0) {
      s.op->Report(Stage::kWaitPids, 0, 0, absl::StrCat("waiting for pid ", busy, " (", who, ")"));
    }
    // The wait ends early when the caller gives up.
    return busy == 0 || s.op->cancelled() || absl::Now() > s.req.deadline;
  };
  const absl::Time until = std::min(absl::Now() + timeout, s.req.deadline);
  PollUntilDeadline(free, until, absl::Milliseconds(20));
  if (busy == 0) return absl::OkStatus();
  if (s.op->cancelled()) {
    return absl::CancelledError(absl::StrCat("restore cancelled while waiting for pid ", busy));
  }
  if (absl::Now() > s.req.deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the caller's deadline passed while the restore waited for pid ", busy, " (", who, ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "pid ", busy, " (needed by checkpoint '", s.m.id, "') is in use by '", who, "'; waited ",
      absl::FormatDuration(timeout),
      container_init > 0 ? ". Something started in the container before the restore"
                         : ". Stop that process (is the checkpointed job still running?)",
      " and retry"));
}

absl::Status Engine::JournalRestore(RestoreState& s) {
  CRYO_RETURN_IF_ERROR(JournalBefore(s.je));
  s.journaled = true;
  s.op_dir = OpDir(s.op->id());
  return fs::MakeDirs(s.op_dir, 0700);
}

absl::Status Engine::ApplyRootfs(RestoreState& s) {
  RunOptions ro;
  ro.argv = {cfg_.nsexec_path, "--target", std::to_string(s.ctr->init_pid), "--apply-rootfs-diff",
             fs::Join(s.dir, contract::checkpoint::kContainerDir)};
  ro.timeout = absl::Minutes(30);
  ro.merge_stderr = true;
  CRYO_ASSIGN_OR_RETURN(RunOutput r, Run(ro));
  if (!r.exit.exited || r.exit.code != 0) {
    return absl::InternalError(absl::StrCat("putting back the container's writable layer failed (",
                                            r.exit.Describe(),
                                            "): ", absl::StripAsciiWhitespace(r.out)));
  }
  return absl::OkStatus();
}

absl::Status Engine::RunCriuRestore(RestoreState& s) {
  criu::RestoreOptions ropt;
  ropt.images_dir = s.images_dir.empty() ? fs::Join(s.dir, store::kImagesDir) : s.images_dir;
  ropt.work_dir = s.op_dir;
  ropt.job = s.m.options;
  // CRIU may not finish (a broken image, a hung file system): the restore ends with its
  // caller's deadline, its cancel or cryod's SIGTERM, and leaves nothing half-restored.
  ropt.deadline = s.req.deadline;
  Operation* op = s.op;
  ropt.stop = [op] { return op->cancelled(); };
  if (s.ctr) {
    // The job's output pipes become the new container's, so its log goes on where kubelet
    // reads it; the new container's pipes are its cryo-init's fd 1 and 2.
    criu::InContainer in{s.ctr->init_pid, cfg_.nsexec_path, {}};
    // Seen on 2026-11-23: CRIU's cgroupd helper took pid 18, which the job's child needed.
    for (int p : s.m.pids) in.last_pid = std::max<pid_t>(in.last_pid, p);
    for (int p : s.m.tids) in.last_pid = std::max<pid_t>(in.last_pid, p);
    const std::string out = s.m.container ? s.m.container->stdout_pipe : "";
    const std::string err = s.m.container ? s.m.container->stderr_pipe : "";
    if (!out.empty()) {
      in.fds.emplace_back(10, d_.proc->PidPath(s.ctr->init_pid, "fd/1") + ":w");
      ropt.extra_args.insert(ropt.extra_args.end(), {"--inherit-fd", absl::StrCat("fd[10]:", out)});
    }
    if (!err.empty() && err != out) {
      in.fds.emplace_back(11, d_.proc->PidPath(s.ctr->init_pid, "fd/2") + ":w");
      ropt.extra_args.insert(ropt.extra_args.end(), {"--inherit-fd", absl::StrCat("fd[11]:", err)});
    }
    ropt.in_container = in;
  }
  CRYO_RETURN_IF_ERROR(AddGpuCriuOptions(s.m.gpu_processes, nullptr, &ropt.extra_args, &ropt.env));
  // The job's lock holds the connections until every member is restored.
  ropt.network_lock_held = s.req.job_restore || s.job_lock != nullptr;
  s.live.criu_pids = s.m.pids;
  s.live.ns_init = s.ctr ? s.ctr->init_pid : 0;
  s.live.criu_started = d_.proc->UptimeTicks();
  // The pages images hashed while CRIU restores from them, its tasks held until they pass.
  std::unique_ptr<criu::ActionGate> gate;
  std::thread pages;
  absl::Status pages_st;
  absl::Duration pages_took;
  if (!s.pages_beside_criu.empty()) {
    auto opened = criu::ActionGate::Open(fs::Join(s.op_dir, "restore-gate"), GateProgram());
    if (!opened.ok()) {
      // Without the gate, the pages are checked before CRIU starts, as everything else.
      CRYO_LOG(Warning) << "restore of " << s.m.id << ": " << opened.status()
                        << "; verifying the pages images before CRIU instead";
      if (absl::Status st = VerifyFiles(s.dir, s.pages_beside_criu, cfg_.verify_threads);
          !st.ok()) {
        return RefuseUnverified(s, st);
      }
    } else {
      gate = *std::move(opened);
    }
  }
  if (gate) {
    for (auto& a : gate->Args()) ropt.extra_args.push_back(std::move(a));
    for (auto& e : gate->Env()) ropt.env.push_back(std::move(e));
    pages = std::thread([&] {
      const absl::Time t0 = absl::Now();
      // Half the threads: CRIU is copying the same pages into memory beside them.
      pages_st = VerifyFiles(s.dir, s.pages_beside_criu, std::max(1, cfg_.verify_threads / 2));
      pages_took = absl::Now() - t0;
      if (absl::Status told = gate->Tell(pages_st.ok()); !told.ok()) {
        // A gate without a verdict refuses: CRIU kills what it restored, and the restore fails.
        CRYO_LOG(Warning) << "restore of " << s.m.id << ": " << told;
        gate->Withdraw();
      }
    });
  }
  absl::StatusOr<pid_t> root = d_.criu->Restore(ropt, [&](pid_t criu_pid) {
    s.je.criu_pid = criu_pid;
    JournalAfter(s.je);
  });
  if (pages.joinable()) {
    pages.join();
    // CRIU killed the tasks at its gate: none of them ran.
    if (!pages_st.ok()) return RefuseUnverified(s, pages_st);
    CRYO_LOG(Info) << "restore of " << s.m.id << ": pages images verified beside CRIU's restore in "
                   << absl::ToInt64Milliseconds(pages_took) << " ms";
  }
  CRYO_ASSIGN_OR_RETURN(s.root, std::move(root));
  s.host_root = s.ctr ? container::HostPidInNamespace(*d_.proc, s.ctr->init_pid, s.root) : s.root;
  s.gpu = s.m.gpu_processes;
  if (s.ctr) {
    // The GPU processes have new host pids: find them by their pids inside.
    for (auto& g : s.gpu)
      g.pid = container::HostPidInNamespace(*d_.proc, s.ctr->init_pid, g.ns_pid);
  }
  // What the undo kills if a later step fails (matched by start time, like every task).
  s.je.criu_pid = 0;
  s.je.tasks.clear();
  auto tree = d_.proc->Tree(s.host_root);
  if (tree.ok()) s.je.tasks = jobs_.TasksOf(*tree);
  JournalAfter(s.je);
  if (s.ctr && tree.ok()) RaiseOomScores(*tree, s.ctr->init_pid);
  return absl::OkStatus();
}

void Engine::RaiseOomScores(const std::vector<proc::ProcInfo>& tree, pid_t init_pid) {
  // CRIU restored the images' OOM scores; none stays below the one the kubelet gave the new
  // pod (its cryo-init's): a checkpoint may not make its job the last the kernel kills.
  auto text = fs::ReadFile(d_.proc->PidPath(init_pid, "oom_score_adj"));
  int floor = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &floor)) return;
  std::vector<pid_t> pids;
  for (const auto& p : tree) pids.push_back(p.pid);
  const std::vector<pid_t> raised = criu::RaiseOomScoreAdj(*d_.proc, pids, floor);
  if (!raised.empty()) {
    CRYO_LOG(Warning) << "restored pid(s) " << absl::StrJoin(raised, ", ")
                      << " had an oom_score_adj below the container's " << floor
                      << "; raised to it";
  }
}

void Engine::UndoCriuRestore(const journal::Entry& e, RestoreLive* live) {
  // The restored processes cannot run without their GPU state: do not leave them half-alive.
  std::vector<journal::Task> tasks = e.tasks;
  // A CRIU that did not finish (the caller's deadline, a cancel, its own failure) said nothing
  // of what it restored, and its helpers died with it; what it had already created runs at the
  // checkpoint's pids, which were free before it started (wait_pids), in processes started
  // since. Only a live rollback knows that: after a crash those pids may be anybody's by now.
  if (tasks.empty() && live != nullptr) {
    std::vector<std::string> killed;
    for (int p : live->criu_pids) {
      const pid_t host =
          live->ns_init > 0 ? container::HostPidInNamespace(*d_.proc, live->ns_init, p) : p;
      if (host <= 0 || host == live->ns_init || host == cfg_.self_pid) continue;
      auto info = d_.proc->Read(host);
      if (!info.ok() || info->start_time < live->criu_started) continue;
      tasks.push_back({host, info->start_time, false});
      killed.push_back(live->ns_init > 0 ? absl::StrCat(host, " (", p, " in the container)")
                                         : absl::StrCat(host));
    }
    if (!killed.empty()) {
      CRYO_LOG(Warning) << "restore of " << e.checkpoint_id << " did not finish; killing pid(s) "
                        << absl::StrJoin(killed, ", ") << " it had restored";
    }
  }
  jobs_.Kill(jobs_.WithDescendants(tasks));
}

absl::Status Engine::RestoreGpus(RestoreState& s) {
  absl::Status st = d_.gpu->Restore(s.gpu, s.map);
  if (st.ok()) st = d_.gpu->Unlock(s.gpu);
  if (!st.ok()) return Annotate(st, "restoring GPU state (restored processes were stopped)");
  return absl::OkStatus();
}

absl::Status Engine::Done(RestoreState& s) {
  if (s.ctr) container::TellInit(*d_.proc, s.ctr->init_pid, s.root, "");
  return absl::OkStatus();
}

}  // namespace cryo::engine
