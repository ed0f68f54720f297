#include "daemon/engine/engine.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/container/target.h"
#include "daemon/engine/states.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/poll.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"

namespace cryo::engine {

Engine::Engine(EngineConfig cfg, EngineDeps deps)
    : cfg_(std::move(cfg)), d_(deps), jobs_(d_.proc), hooks_(cfg_.test_hook_dir) {
  checkpoint_txn_ = std::make_unique<Transaction<CheckpointState>>(CheckpointSteps());
  restore_txn_ = std::make_unique<Transaction<RestoreState>>(RestoreSteps());
  signing_key_ = cfg_.signing_key;
  if (signing_key_.empty()) {
    signing_key_.resize(32);
    if (::getrandom(signing_key_.data(), signing_key_.size(), 0) != 32) {
      // Unguessable is what matters; the clock and the address space will do for tests.
      signing_key_ = absl::StrCat(absl::ToUnixNanos(absl::Now()), "/",
                                  reinterpret_cast<uintptr_t>(this), "/", ::getpid());
    }
  }
  // containerd serves its image API on the CRI socket: checkpoint images are read there unless
  // the caller gave a reader (tests).
  if (d_.images == nullptr && d_.runtime != nullptr) {
    if (auto c = containerd::ConnectImageContent(d_.runtime->endpoint()); c.ok()) {
      own_images_ = std::move(*c);
      d_.images = own_images_.get();
    }
  }
}

Engine::~Engine() {
  // The recovery thread's waits end once cryod stops (at once if nobody called Stop), and its
  // claims go before the sets they are in.
  if (!stopping_.load()) Stop();
  if (recovery_.joinable()) recovery_.join();
  deferred_.clear();
}

std::vector<std::string> Engine::CheckpointStepNames() const {
  std::vector<std::string> out;
  for (const auto& s : checkpoint_txn_->steps()) out.push_back(s.name);
  return out;
}

std::vector<std::string> Engine::RestoreStepNames() const {
  std::vector<std::string> out;
  for (const auto& s : restore_txn_->steps()) out.push_back(s.name);
  return out;
}

void Engine::Claim::HoldSpace(uint64_t bytes) {
  absl::MutexLock l(&e_->mu_);
  e_->space_held_ = e_->space_held_ - space_ + bytes;
  space_ = bytes;
}

uint64_t Engine::SpaceHeldByCheckpoints() {
  absl::MutexLock l(&mu_);
  return space_held_;
}

Engine::Claim::~Claim() {
  absl::MutexLock l(&e_->mu_);
  e_->space_held_ -= space_;
  for (pid_t p : pids_) e_->busy_pids_.erase(p);
  if (!id_.empty()) e_->busy_ids_.erase(id_);
  for (const auto& r : refs_) e_->held_refs_.erase(e_->held_refs_.find(r));
}

void Engine::Claim::HoldReferences(const std::set<std::string>& ids) {
  absl::MutexLock l(&e_->mu_);
  for (const auto& r : ids) {
    e_->held_refs_.insert(r);
    refs_.push_back(r);
  }
}

absl::Status Engine::Claim::Take(const std::vector<pid_t>& pids, const std::string& id,
                                 bool id_is_new) {
  absl::MutexLock l(&e_->mu_);
  for (pid_t p : pids) {
    if (e_->busy_pids_.count(p)) {
      return absl::AbortedError(
          absl::StrCat("pid ", p, " is already part of a checkpoint in progress"));
    }
  }
  if (e_->busy_ids_.count(id)) {
    return id_is_new
               ? absl::AlreadyExistsError(absl::StrCat("checkpoint '", id, "' is being written"))
               : absl::AbortedError(
                     absl::StrCat("checkpoint '", id, "' is busy in another operation"));
  }
  for (pid_t p : pids) {
    e_->busy_pids_.insert(p);
    pids_.push_back(p);
  }
  e_->busy_ids_.insert(id);
  id_ = id;
  return absl::OkStatus();
}

std::string Engine::OpDir(const std::string& op_id) const {
  return fs::Join(fs::Join(cfg_.state_dir, "ops"), op_id);
}

void Engine::PruneOpLogs() {
  std::string root = fs::Join(cfg_.state_dir, "ops");
  auto entries = fs::ListDir(root);
  if (!entries.ok()) return;
  std::vector<std::pair<time_t, std::string>> dirs;
  for (const auto& e : *entries) {
    struct stat st;
    std::string p = fs::Join(root, e.name);
    if (e.is_dir && ::stat(p.c_str(), &st) == 0) dirs.emplace_back(st.st_mtime, p);
  }
  if (static_cast<int>(dirs.size()) <= cfg_.keep_op_logs) return;
  std::sort(dirs.begin(), dirs.end());
  // Best effort: a log that could not go is tried again after the next operation.
  for (size_t i = 0; i + cfg_.keep_op_logs < dirs.size(); ++i) (void)fs::RemoveTree(dirs[i].second);
}

absl::Status Engine::ValidateTarget(pid_t pid, std::vector<proc::ProcInfo>* tree) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
  if (pid == 1) {
    return absl::InvalidArgumentError(
        "pid 1 is the init of this pid namespace; cryo checkpoints jobs, not the node's init");
  }
  if (pid == cfg_.self_pid) {
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is cryod itself"));
  }
  CRYO_ASSIGN_OR_RETURN(proc::ProcInfo root, d_.proc->Read(pid));
  // /proc/<tid> resolves for a thread too; CRIU would fail on it with an internal error.
  if (pid_t tgid = d_.proc->Tgid(pid); tgid > 0 && tgid != pid) {
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is a thread of process ", tgid,
                                                   " (", root.comm,
                                                   "); checkpoint the process, pid ", tgid));
  }
  if (root.kernel_thread) {
    return absl::InvalidArgumentError(
        absl::StrCat("pid ", pid, " (", root.comm, ") is a kernel thread"));
  }
  if (root.state == 'Z' || root.state == 'X') {
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", pid, " (", root.comm, ") has exited (zombie)"));
  }
  CRYO_ASSIGN_OR_RETURN(*tree, d_.proc->Tree(pid));
  for (const auto& p : *tree) {
    if (p.pid == cfg_.self_pid) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tree of pid ", pid, " contains cryod itself (pid ", p.pid, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<container::ContainerTarget> Engine::Container(const std::string& id, bool restore) {
  if (d_.runtime == nullptr) {
    return absl::FailedPreconditionError(
        "this cryod has no container runtime configured (runtime_endpoint); it checkpoints "
        "processes by pid only");
  }
  if (cfg_.nsexec_path.empty() || !fs::Exists(cfg_.nsexec_path)) {
    return absl::FailedPreconditionError(absl::StrCat("cryo-nsexec not found (", cfg_.nsexec_path,
                                                      "); container mode needs it next to cryod"));
  }
  CRYO_ASSIGN_OR_RETURN(
      container::ContainerTarget t,
      container::ResolveContainer(
          *d_.runtime, *d_.proc, id,
          restore ? container::ContainerUse::kRestore : container::ContainerUse::kCheckpoint));
  CRYO_RETURN_IF_ERROR(CheckNodeUserNamespace(
      t.init_pid,
      absl::StrCat("container ", t.info.name,
                   " runs in a user namespace of its own (its pod sets hostUsers: false, or the "
                   "runtime maps its users)"),
      restore ? "nothing was started" : "nothing was stopped"));
  return t;
}

absl::Status Engine::CheckNodeUserNamespace(pid_t pid, absl::string_view who,
                                            absl::string_view outcome) {
  // CRIU creates restored tasks in its own user namespace, the node's, and the credentials check
  // reads ids and capabilities as that namespace sees them; /proc shows a task's capabilities
  // as its own namespace grants them. In a namespace of its own the pod's root would come back
  // as the node's root: refused until restores run inside the pod's user namespace.
  const std::string node = d_.proc->Link(cfg_.self_pid > 0 ? cfg_.self_pid : ::getpid(), "ns/user");
  const std::string theirs = d_.proc->Link(pid, "ns/user");
  if (node.empty() || theirs.empty() || node == theirs) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      who, ": cryo checkpoints and restores only jobs in the node's user namespace (", node,
      "; this one is in ", theirs,
      "), because CRIU would recreate it in the node's, where its ids and capabilities are the "
      "node's. Run the pod with hostUsers: true to use cryo; ",
      outcome));
}

namespace {

// CRIU's size syntax, as plugins write it: digits with an optional K, M or G.
bool ParseCriuSize(absl::string_view v, uint64_t* out) {
  uint64_t mult = 1;
  if (!v.empty() && (v.back() == 'K' || v.back() == 'M' || v.back() == 'G')) {
    mult = v.back() == 'K' ? 1ull << 10 : v.back() == 'M' ? 1ull << 20 : 1ull << 30;
    v.remove_suffix(1);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n > criu::kMaxGhostLimit / mult) return false;
  *out = n * mult;
  return true;
}

}  // namespace

absl::Status Engine::AddGpuCriuOptions(const std::vector<gpu::GpuProcess>& procs,
                                       criu::JobOptions* job, std::vector<std::string>* args,
                                       std::vector<std::string>* env) {
  if (procs.empty()) return absl::OkStatus();
  CRYO_ASSIGN_OR_RETURN(gpu::CriuExtras extras, d_.gpu->CriuOptions(procs));
  for (size_t i = 0; i < extras.args.size(); ++i) {
    const std::string& a = extras.args[i];
    // What a plugin needs of the options cryo types (NCCL's deleted files) raises the job's
    // own, so that the manifest records what the dump used and a later flag cannot undo it.
    uint64_t ghost = 0;
    if (job != nullptr && a == "--link-remap") {
      job->link_remap = true;
    } else if (job != nullptr && a == "--ghost-limit" && i + 1 < extras.args.size() &&
               ParseCriuSize(extras.args[i + 1], &ghost)) {
      job->ghost_limit = std::max(job->ghost_limit, ghost);
      ++i;
    } else {
      args->push_back(a);
    }
  }
  for (const auto& [k, v] : extras.env) env->push_back(absl::StrCat(k, "=", v));
  return absl::OkStatus();
}

absl::Status Engine::Recover() {
  CRYO_ASSIGN_OR_RETURN(auto entries, d_.journal->LoadAll());
  for (const auto& e : entries) {
    if (d_.journal->OfEarlierBoot(e)) {
      // Its tasks, GPU locks and network lock ended with that boot, and its pids (even with
      // their start times, counted from boot) may name other processes now: nothing to undo.
      // Its stage is collected below.
      CRYO_LOG(Warning) << "journal: " << journal::Name(e.kind) << " " << e.op_id << " of '"
                        << e.checkpoint_id << "' in state " << journal::Name(e.state)
                        << " was cut off by a reboot; its processes are gone, nothing to undo";
      if (d_.metrics) d_.metrics->CountRecovered("earlier_boot");
    } else if (!e.fastpath.empty() && d_.fastpath != nullptr) {
      // Its undo gives jobs their GPU memory back: after cryod serves (RecoverInBackground).
      // Until then its jobs and its checkpoint are claimed, and the entry stays in the journal.
      auto claim = std::make_unique<Claim>(this);
      std::vector<pid_t> pids;
      for (const auto& t : e.tasks) pids.push_back(t.pid);
      for (const auto& f : e.fastpath) pids.push_back(f.pid);
      std::sort(pids.begin(), pids.end());
      pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
      if (absl::Status c = claim->Take(pids, e.checkpoint_id, false); !c.ok()) {
        CRYO_LOG(Warning) << "journal: " << e.op_id << ": " << c;
      }
      CRYO_LOG(Info) << "journal: " << e.op_id << " gives " << e.fastpath.size()
                     << " processes their GPU memory back once cryod serves";
      deferred_.emplace_back(e, std::move(claim));
      continue;
    } else {
      RecoverEntry(e);
    }
    CRYO_RETURN_IF_ERROR(d_.journal->Remove(e.op_id));
  }
  std::set<std::string> keep;  // what the deferred entries still read
  for (const auto& [e, claim] : deferred_) {
    if (!e.staging_dir.empty()) keep.insert(e.staging_dir);
  }
  CollectIncomplete(/*own_stages=*/true, keep);  // before serving: none of them is in progress
  PruneOpLogs();
  SeedPace();
  return absl::OkStatus();
}

void Engine::RecoverInBackground() {
  if (deferred_.empty() || recovery_.joinable()) return;
  recovery_ = std::thread([this] {
    for (auto& [e, claim] : deferred_) {
      if (PastStopGrace()) break;
      RecoverEntry(e);
      // Cut short by cryod's stop, it is done again at the next start (each undo is).
      if (PastStopGrace()) {
        CRYO_LOG(Warning) << "journal: " << e.op_id
                          << ": cryod stopped during its recovery; the next start finishes it";
        break;
      }
      if (absl::Status st = d_.journal->Remove(e.op_id); !st.ok()) {
        CRYO_LOG(Error) << "journal: removing " << e.op_id << ": " << st;
      }
      // What it staged is not collected before the next start (it was kept): now.
      if (!e.staging_dir.empty() && fs::Exists(e.staging_dir)) {
        if (absl::Status st = d_.store->RemoveStagingDir(e.staging_dir); !st.ok()) {
          CRYO_LOG(Warning) << "journal: " << e.op_id << ": " << st;
        }
      }
      claim.reset();
    }
  });
}

absl::Status Engine::JournalBefore(const journal::Entry& e) {
  return Annotate(d_.journal->Put(e), "recording the operation in the journal");
}

void Engine::JournalAfter(const journal::Entry& e) {
  if (absl::Status st = d_.journal->Put(e); !st.ok()) {
    CRYO_LOG(Error) << "journal: recording " << journal::Name(e.kind) << " " << e.op_id
                    << " (done, not undone): " << st;
  }
}

void Engine::SeedPace() {
  // The pace survives a restart in the store: this node's newest checkpoints, oldest first so
  // the newest stay. Their stages' sum stands for the whole time (a little less: the wait
  // between stages is not in it).
  auto all = d_.store->List();
  if (!all.ok()) return;
  std::vector<const store::Manifest*> mine;
  for (const auto& m : *all) {
    // (Not those that referred to earlier ones: Finish says why.)
    if (m.node == cfg_.node_name && m.ReferencedBytes() == 0) mine.push_back(&m);
    if (mine.size() == 4 * CheckpointPace::kSamples) break;
  }
  for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
    uint64_t ms = 0;
    for (const auto& [stage, t] : (*it)->stage_ms) ms += t;
    pace_.Add((*it)->workload, (*it)->TotalBytes(), absl::Milliseconds(ms));
  }
}

void Engine::RecoverEntry(const journal::Entry& e) {
  CRYO_LOG(Warning) << "journal: found " << journal::Name(e.kind) << " " << e.op_id << " of '"
                    << e.checkpoint_id << "' in state " << journal::Name(e.state)
                    << " (cryod stopped while it ran)";
  // A CRIU still running must finish first: killing it mid-dump could damage the job.
  if (e.criu_pid > 0) {
    PollUntil([&] { return !d_.proc->Alive(e.criu_pid, e.criu_start_time); }, absl::Minutes(5),
              absl::Milliseconds(20));
  }
  std::string action;
  std::vector<std::string> unknown;  // step names this cryod does not have
  if (e.kind == journal::OpKind::kCheckpoint) {
    // cryod may have died between the publish (a rename) and the journal's "published": the
    // checkpoint in the store, taken by this node at this operation's start, says which.
    bool published = e.state == journal::OpState::kPublished;
    if (!published && e.state == journal::OpState::kDumped) {
      auto m = d_.store->Get(e.checkpoint_id);
      published = m.ok() && m->node == cfg_.node_name && e.started_at.size() >= 19 &&
                  absl::StartsWith(m->created_at, e.started_at.substr(0, 19));
    }
    if (published) {
      CompletePublished(e);
      action = e.leave_running ? "completed_resumed" : "completed_stopped";
    } else {
      // Not published: the same undos as a live failure. The job runs on as if nothing
      // happened. Children forked after the entry was written are in CRIU's dump (and stopped
      // by it): the undos act on the tree as it is now.
      journal::Entry now = e;
      now.tasks = jobs_.WithDescendants(e.tasks);
      unknown = checkpoint_txn_->Undo(e.steps, now);
      action = "rolled_back";
    }
  } else {
    unknown = restore_txn_->Undo(e.steps, e);
    action = "restore_abandoned";
  }
  CRYO_LOG(Warning) << "journal: " << e.op_id << ": " << action;
  if (d_.metrics) d_.metrics->CountRecovered(action);
  for (const std::string& name : unknown) {
    // Written by another cryod version: whatever that step did is not undone here.
    CRYO_LOG(Error) << "journal: " << e.op_id << ": step '" << name
                    << "' is not a step of this cryod; its undo did not run";
    if (d_.metrics) d_.metrics->CountRecovered("unknown_step");
  }
}

int Engine::CollectIncomplete(bool own_stages, const std::set<std::string>& keep) {
  auto n = d_.store->CollectIncomplete(cfg_.incomplete_ttl, own_stages, keep);
  if (!n.ok()) {
    CRYO_LOG(Warning) << "collecting incomplete checkpoints: " << n.status();
    return 0;
  }
  if (*n > 0) CRYO_LOG(Info) << "collected " << *n << " incomplete checkpoint directories";
  return *n;
}

absl::StatusOr<CheckpointRecord> Engine::Get(const std::string& id) {
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
  CRYO_ASSIGN_OR_RETURN(store::Manifest m, d_.store->Get(id));
  CheckpointRecord r{std::move(m), ""};
  if (auto path = d_.store->LocalPath(id); path.ok()) r.store_path = *path;
  r.job_uncommitted = JobUncommitted(r.manifest);
  return r;
}

std::string Engine::JobUncommitted(const store::Manifest& m) {
  if (!m.job) return "";
  auto jc = store::CommittedJobCheckpointOf(*d_.store, m);
  return jc.ok() ? "" : std::string(jc.status().message());
}

absl::StatusOr<std::vector<CheckpointRecord>> Engine::List(const std::string& workload) {
  CRYO_ASSIGN_OR_RETURN(auto all, d_.store->List());
  if (d_.metrics) d_.metrics->SetCheckpointsStored(all.size());
  std::vector<CheckpointRecord> out;
  for (auto& m : all) {
    if (!workload.empty() && m.workload != workload) continue;
    std::string uncommitted = JobUncommitted(m);
    out.push_back({std::move(m), "", std::move(uncommitted)});
  }
  return out;
}

absl::Status Engine::Delete(const std::string& id) {
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
  {
    absl::MutexLock l(&mu_);
    if (busy_ids_.count(id) || held_refs_.count(id)) {
      return absl::AbortedError(absl::StrCat("checkpoint '", id, "' is in use by an operation"));
    }
  }
  // Another checkpoint's GPU data may be partly this one's (incremental): it stays while that
  // one does.
  CRYO_ASSIGN_OR_RETURN(auto all, d_.store->List());
  std::vector<std::string> by;
  for (const auto& m : all) {
    if (m.References().count(id)) by.push_back(m.id);
  }
  if (!by.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint '", id, "' holds GPU data that ", absl::StrJoin(by, ", "),
                     " refer", by.size() == 1 ? "s" : "", " to; delete ",
                     by.size() == 1 ? "that one" : "those", " first"));
  }
  return d_.store->Delete(id);
}

NodeFacts Engine::Node() {
  NodeFacts n;
  n.node_name = cfg_.node_name;
  n.cryo_version = CRYO_VERSION;
  n.kernel = proc::KernelRelease();
  n.arch = proc::MachineArch();
  n.criu_version = d_.criu->version();
  n.criu_path = d_.criu->path();
  n.criu_check_error = d_.criu->check_error();
  n.store_path = d_.store->location();
  if (auto f = d_.store->FreeBytes(); f.ok()) n.store_free_bytes = *f;
  n.plugins = d_.gpu->Plugins();
  n.gpus = d_.gpu->Devices();
  n.fastpath_enabled = d_.fastpath != nullptr && cfg_.fastpath.enabled;
  n.fastpath_library = cfg_.fastpath_library;
  n.fastpath_library_present = !n.fastpath_library.empty() && fs::Exists(n.fastpath_library);
  return n;
}

}  // namespace cryo::engine
