#include "daemon/engine/engine.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <regex>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "daemon/store/checksum.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/subprocess.h"
#include "daemon/container/archive.h"
#include "daemon/container/rootfs.h"
#include "lib/contract/cryo_init_protocol.h"

namespace cryo::service {
namespace {

std::string Uname(bool machine) {
  struct utsname u;
  if (::uname(&u) != 0) return "unknown";
  return machine ? u.machine : u.release;
}

std::string StageName(v1::Stage s) {
  std::string n = v1::Stage_Name(s);
  if (n.rfind("STAGE_", 0) == 0) n = n.substr(6);
  return absl::AsciiStrToLower(n);
}

// Times the stages of one operation for the manifest, the result and the metrics.
class StageClock {
 public:
  StageClock(std::string op, metrics::Metrics* m, Operation& o) : op_(std::move(op)), m_(m), o_(o) {}
  // A stage still open here is the one the operation failed in (success ends with End()).
  ~StageClock() {
    if (cur_ != v1::STAGE_UNSPECIFIED && m_) m_->CountFailedStage(op_, StageName(cur_));
  }
  void Begin(v1::Stage s, uint64_t total = 0, std::string msg = "") {
    End();
    cur_ = s;
    t0_ = absl::Now();
    o_.Report(s, 0, total, std::move(msg));
  }
  void End() {
    if (cur_ == v1::STAGE_UNSPECIFIED) return;
    absl::Duration d = absl::Now() - t0_;
    ms_[StageName(cur_)] += absl::ToInt64Milliseconds(d);
    if (m_) m_->ObserveStage(op_, StageName(cur_), absl::ToDoubleSeconds(d));
    cur_ = v1::STAGE_UNSPECIFIED;
  }
  const std::map<std::string, uint64_t>& ms() const { return ms_; }

 private:
  std::string op_;
  metrics::Metrics* m_;
  Operation& o_;
  v1::Stage cur_ = v1::STAGE_UNSPECIFIED;
  absl::Time t0_;
  std::map<std::string, uint64_t> ms_;
};

// Reports a byte counter as progress every 100 ms while a stage runs.
class ProgressTicker {
 public:
  ProgressTicker(Operation& op, v1::Stage stage, std::function<uint64_t()> done, uint64_t total)
      : op_(op), stage_(stage), done_(std::move(done)), total_(total), thread_([this] {
          while (!stop_.load()) {
            op_.Report(stage_, done_(), total_);
            absl::MutexLock l(&mu_);
            mu_.AwaitWithTimeout(absl::Condition(+[](std::atomic<bool>* b) { return b->load(); },
                                                 &stop_),
                                 absl::Milliseconds(100));
          }
        }) {}
  ~ProgressTicker() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    thread_.join();
    op_.Report(stage_, done_(), total_);  // where the stage ended, not its last tick
  }

 private:
  Operation& op_;
  const v1::Stage stage_;
  const std::function<uint64_t()> done_;
  const uint64_t total_;
  absl::Mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Container mode's files in a checkpoint, beside images/ (names as checkpointctl knows them).
constexpr char kContainerDir[] = "container";
constexpr char kRootfsTar[] = "container/rootfs-diff.tar";
constexpr char kDeletedFiles[] = "container/deleted.files";

std::vector<gpu::GpuProcess> GpuFromJson(const nlohmann::json& j) {
  std::vector<gpu::GpuProcess> out;
  if (!j.is_array()) return out;
  for (const auto& p : j) {
    out.push_back({p.value("pid", 0), p.value("plugin", ""), p.value("facts", nlohmann::json())});
  }
  return out;
}

nlohmann::json GpuToJson(const std::vector<gpu::GpuProcess>& procs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : procs) out.push_back({{"pid", p.pid}, {"plugin", p.plugin}, {"facts", p.facts}});
  return out;
}

}  // namespace

std::string CodeName(absl::StatusCode code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

// Marks a pid tree or checkpoint id as busy for the lifetime of an operation.
struct Engine::Claim {
  Engine* e;
  std::vector<pid_t> pids;
  std::string id;
  ~Claim() {
    absl::MutexLock l(&e->mu_);
    for (pid_t p : pids) e->busy_pids_.erase(p);
    if (!id.empty()) e->busy_ids_.erase(id);
  }
};

void Engine::Hook(const std::string& point) {
  if (cfg_.test_hook_dir.empty()) return;
  std::string reached = fs::Join(cfg_.test_hook_dir, point + ".reached");
  std::string release = fs::Join(cfg_.test_hook_dir, point + ".release");
  if (!fs::Exists(fs::Join(cfg_.test_hook_dir, point + ".enable"))) return;
  (void)fs::WriteFileAtomic(reached, std::to_string(::getpid()));
  CRYO_LOG(Info) << "test hook " << point << ": waiting for " << release;
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (!fs::Exists(release) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
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

void Engine::ResumeStopped(const std::vector<journal::Task>& tasks) {
  for (const auto& t : tasks) {
    if (d_.proc->Alive(t.pid, t.start_time)) ::kill(t.pid, SIGCONT);
  }
}

std::vector<journal::Task> Engine::WithDescendants(const std::vector<journal::Task>& tasks) const {
  std::vector<journal::Task> out = tasks;
  std::set<int> seen;
  for (const auto& t : tasks) seen.insert(t.pid);
  for (const auto& t : tasks) {
    if (!d_.proc->Alive(t.pid, t.start_time)) continue;
    auto tree = d_.proc->Tree(t.pid);
    if (!tree.ok()) continue;
    for (const auto& p : *tree) {
      if (seen.insert(p.pid).second) out.push_back({p.pid, p.start_time});
    }
  }
  return out;
}

void Engine::KillTasks(const std::vector<journal::Task>& tasks) {
  for (const auto& t : tasks) {
    if (d_.proc->Alive(t.pid, t.start_time)) ::kill(t.pid, SIGKILL);
  }
  // Wait (bounded) until they are dead; a zombie is dead, only its parent can reap it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (const auto& t : tasks) {
    while (absl::Now() < deadline) {
      auto i = d_.proc->Read(t.pid);
      if (!i.ok() || i->start_time != t.start_time || i->state == 'Z' || i->state == 'X') break;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
}

void Engine::UnlockNetwork(const std::string& op_dir, pid_t container_init) {
  // A dump with --leave-stopped keeps CRIU's nftables lock (table "inet CRIU-<run id>") for
  // the restore; when we resume the job instead, the lock must go. In container mode CRIU
  // made it in the container's network namespace, so it is removed from there.
  auto log = fs::ReadFile(fs::Join(op_dir, "dump.log"));
  if (!log.ok()) return;
  std::smatch m;
  static const std::regex kTable("CRIU-[A-Za-z0-9_-]+");
  std::set<std::string> tables;
  for (std::sregex_iterator it(log->begin(), log->end(), kTable), end; it != end; ++it) {
    tables.insert(it->str());
  }
  std::string nft = FindExecutable("nft");
  for (const auto& t : tables) {
    if (nft.empty()) break;
    std::vector<std::string> argv = {nft, "delete", "table", "inet", t};
    if (container_init > 0) {
      argv.insert(argv.begin(),
                  {cfg_.nsexec_path, "--target", std::to_string(container_init), "--"});
    }
    auto r = RunCapture(argv);
    if (r.ok() && r->exit.exited && r->exit.code == 0) {
      CRYO_LOG(Info) << "removed CRIU network lock table " << t;
    }
  }
}

absl::Status Engine::AddGpuCriuOptions(const std::vector<gpu::GpuProcess>& procs,
                                       std::vector<std::string>* args,
                                       std::vector<std::string>* env) {
  if (procs.empty()) return absl::OkStatus();
  CRYO_ASSIGN_OR_RETURN(gpu::CriuExtras extras, d_.gpu->CriuOptions(procs));
  args->insert(args->end(), extras.args.begin(), extras.args.end());
  for (const auto& [k, v] : extras.env) env->push_back(absl::StrCat(k, "=", v));
  return absl::OkStatus();
}

absl::Status Engine::Recover() {
  CRYO_ASSIGN_OR_RETURN(auto entries, d_.journal->LoadAll());
  for (const auto& e : entries) {
    CRYO_LOG(Warning) << "journal: found " << e.kind << " " << e.op_id << " of '"
                      << e.checkpoint_id << "' in state " << e.state
                      << " (cryod stopped while it ran)";
    // A CRIU still running must finish first: killing it mid-dump could damage the job.
    if (e.criu_pid > 0) {
      const absl::Time deadline = absl::Now() + absl::Minutes(5);
      while (d_.proc->Alive(e.criu_pid, e.criu_start_time) && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
    auto gpu_procs = GpuFromJson(e.gpu);
    // Children forked after the journal entry was written are in CRIU's dump (and stopped by
    // it) but not in e.tasks: whatever is done to the job is done to its whole tree as it is.
    const std::vector<journal::Task> tasks = WithDescendants(e.tasks);
    // cryod may have died between the publish (a rename) and the journal's "published": the
    // checkpoint in the store, taken by this node at this operation's start, says which.
    bool published = e.state == "published";
    if (!published && e.kind == "checkpoint" && e.state == "dumped") {
      auto m = d_.store->Get(e.checkpoint_id);
      published = m.ok() && m->node == cfg_.node_name && e.started_at.size() >= 19 &&
                  absl::StartsWith(m->created_at, e.started_at.substr(0, 19));
    }
    std::string action;
    if (e.kind == "checkpoint") {
      if (published) {
        // The checkpoint is safe in the store: finish what was asked.
        if (e.leave_running) {
          if (!gpu_procs.empty()) d_.gpu->Rollback(gpu_procs);
          ResumeStopped(tasks);
          action = "completed_resumed";
        } else {
          KillTasks(tasks);
          action = "completed_stopped";
        }
      } else {
        // Not published: undo. The job runs on as if nothing happened.
        if (!e.staging_dir.empty()) (void)fs::RemoveTree(e.staging_dir);
        // Harmless when there is no lock (a leave-running dump of a process keeps none).
        if (e.tcp_established) UnlockNetwork(OpDir(e.op_id), e.container_init_pid);
        if (!gpu_procs.empty()) d_.gpu->Rollback(gpu_procs);
        ResumeStopped(tasks);
        action = "rolled_back";
      }
    } else {
      if (!gpu_procs.empty()) d_.gpu->Rollback(gpu_procs);
      action = "restore_abandoned";
    }
    CRYO_LOG(Warning) << "journal: " << e.op_id << ": " << action;
    if (d_.metrics) d_.metrics->CountRecovered(action);
    CRYO_RETURN_IF_ERROR(d_.journal->Remove(e.op_id));
  }
  CollectIncomplete(/*own_stages=*/true);  // before serving: none of them is in progress
  PruneOpLogs();
  return absl::OkStatus();
}

int Engine::CollectIncomplete(bool own_stages) {
  auto n = d_.store->CollectIncomplete(cfg_.incomplete_ttl, own_stages);
  if (!n.ok()) {
    CRYO_LOG(Warning) << "collecting incomplete checkpoints: " << n.status();
    return 0;
  }
  if (*n > 0) CRYO_LOG(Info) << "collected " << *n << " incomplete checkpoint directories";
  return *n;
}

absl::StatusOr<ContainerTarget> Engine::Container(const std::string& id, ContainerUse use) {
  if (d_.runtime == nullptr) {
    return absl::FailedPreconditionError(
        "this cryod has no container runtime configured (runtime_endpoint); it checkpoints "
        "processes by pid only");
  }
  if (cfg_.nsexec_path.empty() || !fs::Exists(cfg_.nsexec_path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cryo-nsexec not found (", cfg_.nsexec_path, "); container mode needs it next to cryod"));
  }
  return ResolveContainer(*d_.runtime, *d_.proc, id, use);
}

absl::StatusOr<std::vector<store::ManifestFile>> Engine::SaveRootfs(const ContainerTarget& c,
                                                                    const std::string& dir) {
  CRYO_ASSIGN_OR_RETURN(std::string mountinfo,
                        fs::ReadFile(absl::StrCat("/proc/", c.init_pid, "/mountinfo")));
  CRYO_ASSIGN_OR_RETURN(auto mounts, container::ParseMountInfo(mountinfo));
  CRYO_ASSIGN_OR_RETURN(std::string upper, container::OverlayUpperDir(mounts));
  CRYO_RETURN_IF_ERROR(fs::MakeDirs(fs::Join(dir, kContainerDir), 0700));
  const std::string tar = fs::Join(dir, kRootfsTar);
  const std::string deleted = fs::Join(dir, kDeletedFiles);
  CRYO_ASSIGN_OR_RETURN(
      container::RootfsDiff diff,
      container::WriteRootfsDiff(upper, container::MountPointsBelowRoot(mounts), tar, deleted));
  CRYO_LOG(Info) << "writable layer of " << c.info.id.substr(0, 13) << ": " << diff.entries
                 << " entries, " << diff.deleted.size() << " deletions, " << diff.tar_bytes
                 << " bytes";
  std::vector<store::ManifestFile> out;
  for (const std::string& rel : {std::string(kRootfsTar), std::string(kDeletedFiles)}) {
    CRYO_ASSIGN_OR_RETURN(FileDigest dg, HashFile(fs::Join(dir, rel)));
    out.push_back({rel, dg.size, dg.checksum});
  }
  return out;
}

absl::StatusOr<v1::CheckpointInfo> Engine::Checkpoint(const v1::CheckpointRequest& req,
                                                      Operation& op, absl::Time deadline) {
  StageClock clock("checkpoint", d_.metrics, op);
  const absl::Time t_start = absl::Now();

  // --- validate: nothing is touched until the request is known to be sane.
  clock.Begin(v1::STAGE_VALIDATE);
  if (!req.checkpoint_id().empty()) CRYO_RETURN_IF_ERROR(ValidateCheckpointId(req.checkpoint_id()));
  if (req.workload().size() > 253) return absl::InvalidArgumentError("workload is too long");
  std::optional<ContainerTarget> ctr;
  pid_t target = req.pid();
  if (!req.container_id().empty()) {
    if (req.pid() != 0) {
      return absl::InvalidArgumentError("give either a pid or a container_id, not both");
    }
    CRYO_ASSIGN_OR_RETURN(ctr, Container(req.container_id(), ContainerUse::kCheckpoint));
    target = ctr->job_pid;
  } else if (!req.export_archive().empty()) {
    return absl::InvalidArgumentError("export_archive is for container checkpoints only");
  }
  std::vector<proc::ProcInfo> tree;
  CRYO_RETURN_IF_ERROR(ValidateTarget(target, &tree));
  const proc::ProcInfo root = tree.front();  // a copy: tree is re-read after the dump
  const std::string workload =
      !req.workload().empty() ? req.workload() : (ctr ? ctr->info.name : root.comm);
  const std::string id =
      req.checkpoint_id().empty() ? MakeCheckpointId(workload, absl::Now()) : req.checkpoint_id();

  Claim claim{this, {}, ""};
  {
    absl::MutexLock l(&mu_);
    for (const auto& p : tree) {
      if (busy_pids_.count(p.pid)) {
        return absl::AbortedError(
            absl::StrCat("pid ", p.pid, " is already part of a checkpoint in progress"));
      }
    }
    if (busy_ids_.count(id)) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint '", id, "' is being written"));
    }
    for (const auto& p : tree) {
      busy_pids_.insert(p.pid);
      claim.pids.push_back(p.pid);
    }
    busy_ids_.insert(id);
    claim.id = id;
  }
  CRYO_RETURN_IF_ERROR(d_.store->CheckWritable());

  std::set<pid_t> in_tree;
  std::vector<journal::Task> tasks;
  std::vector<int> pids, tids;
  uint64_t expected = 0;
  for (const auto& p : tree) {
    in_tree.insert(p.pid);
    tasks.push_back({p.pid, p.start_time});
    pids.push_back(p.pid);
    for (pid_t t : d_.proc->Threads(p.pid)) tids.push_back(t);
    expected += d_.proc->MemoryBytes(p.pid);
  }
  // CRIU refuses a tree whose session or group leader is outside it unless told it is a shell
  // job (started from a terminal); that is what the user means, so say it for them.
  const bool shell_job =
      req.shell_job() || !in_tree.count(root.sid) || !in_tree.count(root.pgid);

  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("the caller's deadline passed before the checkpoint of pid ", target,
                     " started; nothing was done"));
  }

  // --- GPU: lock every GPU process, then move device memory into host memory.
  std::vector<gpu::GpuProcess> gpu_procs;
  CRYO_ASSIGN_OR_RETURN(gpu_procs, d_.gpu->Discover(pids));
  bool gpu_checkpointed = false;
  auto gpu_undo = absl::MakeCleanup([&] {
    if (gpu_checkpointed) d_.gpu->Rollback(gpu_procs);
  });
  if (!gpu_procs.empty()) {
    clock.Begin(v1::STAGE_GPU_LOCK, 0, absl::StrCat(gpu_procs.size(), " GPU processes"));
    absl::Duration timeout = req.gpu_lock_timeout_ms() > 0
                                 ? absl::Milliseconds(req.gpu_lock_timeout_ms())
                                 : cfg_.gpu_lock_timeout;
    CRYO_RETURN_IF_ERROR(d_.gpu->Lock(gpu_procs, timeout));
    gpu_checkpointed = true;  // from here on, failures roll the GPU state back
    clock.Begin(v1::STAGE_GPU_CHECKPOINT);
    CRYO_RETURN_IF_ERROR(d_.gpu->Checkpoint(gpu_procs));
    // Device memory now sits in the processes: CRIU will write it, so count it.
    for (pid_t p : pids) expected = std::max(expected, d_.proc->MemoryBytes(p));
  }

  // --- stage in the store and record the operation before anything irreversible.
  CRYO_ASSIGN_OR_RETURN(auto staged, d_.store->Stage(id));
  journal::Entry je;
  je.op_id = op.id();
  je.kind = "checkpoint";
  je.checkpoint_id = id;
  je.state = "started";
  je.tasks = tasks;
  je.staging_dir = staged->staging_dir();
  je.leave_running = req.leave_running();
  je.tcp_established = req.tcp_established();
  je.gpu = GpuToJson(gpu_procs);
  je.container_init_pid = ctr ? ctr->init_pid : 0;
  je.started_at = absl::FormatTime(absl::RFC3339_sec, t_start, absl::UTCTimeZone());
  CRYO_RETURN_IF_ERROR(d_.journal->Put(je));
  auto journal_done = absl::MakeCleanup([&] {
    absl::Status s = d_.journal->Remove(op.id());
    if (!s.ok()) CRYO_LOG(Error) << "journal: " << s;
  });

  // --- dump, hashing the images while CRIU writes them.
  const std::string op_dir = OpDir(op.id());
  CRYO_RETURN_IF_ERROR(fs::MakeDirs(op_dir, 0700));
  Hook("before-dump");
  clock.Begin(v1::STAGE_DUMP, expected);
  TailHasher hasher(staged->images_dir(), d_.store->durable());
  hasher.Start();
  absl::Status dumped;
  criu::DumpOptions dopt;
  {
    ProgressTicker ticker(op, v1::STAGE_DUMP, [&] { return hasher.bytes_hashed(); }, expected);
    dopt.pid = ctr ? d_.proc->NsPid(target) : target;
    dopt.images_dir = staged->images_dir();
    dopt.work_dir = op_dir;
    // A container's job stays stopped until its writable layer is saved too, so that files
    // and memory are of the same moment; it is resumed after that when asked.
    dopt.leave_running = req.leave_running() && !ctr;
    dopt.tcp_established = req.tcp_established();
    dopt.shell_job = shell_job;
    if (ctr) dopt.in_container = criu::InContainer{ctr->init_pid, cfg_.nsexec_path, {}};
    CRYO_RETURN_IF_ERROR(AddGpuCriuOptions(gpu_procs, &dopt.extra_args, &dopt.env));
    dumped = d_.criu->Dump(dopt, [&](pid_t criu_pid) {
      je.state = "dumping";
      je.criu_pid = criu_pid;
      auto info = d_.proc->Read(criu_pid);
      je.criu_start_time = info.ok() ? info->start_time : 0;
      absl::Status s = d_.journal->Put(je);
      if (!s.ok()) CRYO_LOG(Error) << "journal: " << s;
    });
  }
  auto digests = hasher.Finish();
  if (!dumped.ok()) {
    // CRIU resumes the tree itself when a dump fails; the GPU side is undone by gpu_undo.
    (void)staged->Abort();
    return dumped;
  }
  if (!dopt.leave_running) {
    // Short-lived children come and go between validation and the dump; what CRIU left
    // stopped is the tree as it is now, and that is what must be resumed or killed.
    auto frozen = d_.proc->Tree(target);
    if (frozen.ok()) {
      tree = *std::move(frozen);
      tasks.clear();
      for (const auto& p : tree) tasks.push_back({p.pid, p.start_time});
      je.tasks = tasks;
    }
  }
  // The pids a restore needs free; a container's job keeps the ones it has inside.
  std::vector<int> saved_pids, saved_tids;
  for (const auto& p : tree) {
    saved_pids.push_back(ctr ? d_.proc->NsPid(p.pid) : p.pid);
    if (ctr) {
      for (pid_t t : NsThreadIds(*d_.proc, p.pid)) saved_tids.push_back(t);
    } else {
      for (pid_t t : d_.proc->Threads(p.pid)) saved_tids.push_back(t);
    }
  }
  je.state = "dumped";
  je.criu_pid = 0;
  CRYO_RETURN_IF_ERROR(d_.journal->Put(je));
  Hook("after-dump");

  // From here until publish, a failure must resume the stopped job.
  bool resume_on_failure = !dopt.leave_running;
  const pid_t net_ns_pid = ctr ? ctr->init_pid : 0;
  auto resume = absl::MakeCleanup([&] {
    if (!resume_on_failure) return;
    if (req.tcp_established()) UnlockNetwork(op_dir, net_ns_pid);
    if (gpu_checkpointed) {
      d_.gpu->Rollback(gpu_procs);
      gpu_checkpointed = false;
    }
    ResumeStopped(tasks);
    CRYO_LOG(Warning) << "checkpoint " << id << " failed after the dump; job resumed";
  });

  std::vector<store::ManifestFile> container_files;
  if (ctr) {
    clock.Begin(v1::STAGE_ROOTFS);
    CRYO_ASSIGN_OR_RETURN(container_files, SaveRootfs(*ctr, staged->staging_dir()));
    if (req.leave_running()) {
      if (req.tcp_established()) UnlockNetwork(op_dir, net_ns_pid);
      ResumeStopped(tasks);
      resume_on_failure = false;
    }
  }

  if (req.leave_running() && gpu_checkpointed) {
    // The job goes on as soon as its images are written; publish happens beside it.
    clock.Begin(v1::STAGE_GPU_RESTORE);
    CRYO_RETURN_IF_ERROR(d_.gpu->Restore(gpu_procs, {}));
    CRYO_RETURN_IF_ERROR(d_.gpu->Unlock(gpu_procs));
    gpu_checkpointed = false;
  }

  clock.Begin(v1::STAGE_CHECKSUM);
  if (!digests.ok()) return Annotate(digests.status(), "checksumming images");
  store::Manifest m;
  m.id = id;
  m.kind = ctr ? "container" : "process";
  m.workload = workload;
  m.node = cfg_.node_name;
  m.created_at = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t_start, absl::UTCTimeZone());
  m.root_pid = dopt.pid;
  m.pids = saved_pids;
  m.tids = saved_tids;
  m.command = root.comm;
  m.cmdline = d_.proc->Cmdline(target);
  m.kernel = Uname(false);
  m.arch = Uname(true);
  m.criu_version = d_.criu->version();
  m.cryo_version = CRYO_VERSION;
  m.leave_running = req.leave_running();
  m.tcp_established = req.tcp_established();
  m.shell_job = shell_job;
  m.labels = {req.labels().begin(), req.labels().end()};
  m.checksum_algorithm = kChecksumAlgorithm;
  for (const auto& [rel, dg] : *digests) {
    m.files.push_back({absl::StrCat(store::kImagesDir, "/", rel), dg.size, dg.checksum});
  }
  m.files.insert(m.files.end(), container_files.begin(), container_files.end());
  if (!gpu_procs.empty()) {
    m.gpu = d_.gpu->Describe(gpu_procs);
    m.gpu_processes = GpuToJson(gpu_procs);
    // A restore into another container finds each GPU process by its pid inside.
    if (ctr) {
      for (auto& p : m.gpu_processes) p["ns_pid"] = d_.proc->NsPid(p.value("pid", 0));
    }
  }
  if (ctr) m.container = ContainerJson(*ctr, d_.runtime->name());

  Hook("before-publish");
  // A caller with a deadline (the shim: a stop's grace period) has moved on and the stop is
  // ending the job. Published now, the checkpoint could hold the stop's signal pending in the
  // job and be resumed only to stop again: the job is resumed instead and the stop ends it.
  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "checkpoint ", id, " was not finished by the caller's deadline (",
        absl::FormatDuration(absl::Trunc(absl::Now() - t_start, absl::Milliseconds(1))),
        " after it started); not published, the job was resumed"));
  }
  // The manifest records the stages up to here; the result also has publish and finish.
  clock.End();
  m.stage_ms = clock.ms();
  clock.Begin(v1::STAGE_PUBLISH, m.TotalBytes());
  CRYO_RETURN_IF_ERROR(Annotate(staged->Publish(m), absl::StrCat("publishing checkpoint ", id)));
  Hook("after-publish");
  je.state = "published";
  (void)d_.journal->Put(je);
  resume_on_failure = false;
  if (d_.metrics) d_.metrics->AddBytesWritten(m.TotalBytes());

  // --- finish: the job either runs on (leave-running) or stops here, as for a preemption.
  clock.Begin(v1::STAGE_FINISH);
  if (!req.leave_running()) KillTasks(tasks);
  gpu_checkpointed = false;  // a killed job's GPU state dies with it
  if (cfg_.retention_keep > 0) {
    std::set<std::string> in_use;
    {
      absl::MutexLock l(&mu_);
      in_use = busy_ids_;
    }
    auto deleted = d_.store->ApplyRetention(workload, cfg_.retention_keep, in_use);
    if (deleted.ok() && !deleted->empty()) {
      CRYO_LOG(Info) << "retention: deleted " << absl::StrJoin(*deleted, ", ");
    }
  }
  const std::string published = fs::Join(fs::Join(d_.store->location(), "checkpoints"), id);
  absl::Status exported;
  if (ctr && !req.export_archive().empty()) {
    clock.Begin(v1::STAGE_EXPORT, m.TotalBytes());
    exported = ExportArchive(m, *ctr, published, fs::Join(op_dir, "dump.log"),
                             req.export_archive());
  }
  clock.End();
  if (d_.metrics) d_.metrics->ObserveOperation("checkpoint", absl::ToDoubleSeconds(absl::Now() - t_start));
  m.stage_ms = clock.ms();
  CRYO_LOG(Info) << "checkpoint " << id << " of " << (ctr ? "container " : "pid ")
                 << (ctr ? ctr->info.id.substr(0, 13) : std::to_string(target))
                 << " published (" << m.TotalBytes() << " bytes, " << m.files.size() << " files)";
  if (!exported.ok()) {
    return Annotate(exported, absl::StrCat("checkpoint ", id, " is published, but its archive ",
                                           req.export_archive(), " could not be written"));
  }
  v1::CheckpointInfo info = InfoFromManifest(m, false);
  info.set_store_path(published);
  return info;
}

nlohmann::json Engine::ContainerJson(const ContainerTarget& c, const std::string& runtime_name) {
  nlohmann::json j;
  j["id"] = c.info.id;
  j["name"] = c.info.name;
  j["image"] = c.info.image;
  j["image_ref"] = c.info.image_ref;
  j["labels"] = c.info.labels;
  j["annotations"] = c.info.annotations;
  j["runtime"] = runtime_name;
  j["created_at_ns"] = c.info.created_at_ns;
  // The pipes the job's output went to; a restore points them at the new container's.
  j["stdout_pipe"] = c.stdout_pipe;
  j["stderr_pipe"] = c.stderr_pipe;
  j["rootfs_diff"] = kRootfsTar;
  j["deleted_files"] = kDeletedFiles;
  return j;
}

absl::Status Engine::ExportArchive(const store::Manifest& m, const ContainerTarget& c,
                                   const std::string& dir, const std::string& dump_log,
                                   const std::string& path) {
  container::ArchiveInput in;
  in.images_dir = fs::Join(dir, store::kImagesDir);
  in.rootfs_diff_tar = fs::Join(dir, kRootfsTar);
  in.deleted_files = fs::Join(dir, kDeletedFiles);
  in.dump_log = dump_log;
  const absl::Time created = absl::FromUnixNanos(c.info.created_at_ns);
  in.config_dump = {
      {"id", c.info.id},
      {"name", c.info.name},
      {"rootfsImage", c.info.image_ref},
      {"rootfsImageRef", c.info.image_ref},
      {"rootfsImageName", c.info.image},
      {"runtime", "runc"},
      {"createdTime", absl::FormatTime(absl::RFC3339_full, created, absl::UTCTimeZone())},
      {"checkpointedTime", m.created_at},
      // Where the same checkpoint lives in cryo's store, for `cryo restore`-style tooling.
      {"cryo.checkpoint_id", m.id}};
  in.spec_dump = c.info.runtime_spec.is_null() ? nlohmann::json::object() : c.info.runtime_spec;
  return container::WriteCheckpointArchive(in, path);
}

absl::Status Engine::WaitPidsFree(const store::Manifest& m, Operation& op, absl::Duration timeout,
                                  pid_t container_init) {
  std::vector<int> need = m.pids;
  need.insert(need.end(), m.tids.begin(), m.tids.end());
  std::sort(need.begin(), need.end());
  need.erase(std::unique(need.begin(), need.end()), need.end());
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int busy = 0;
    std::string who;
    std::set<pid_t> in_container;
    if (container_init > 0) in_container = NsPidsInUse(*d_.proc, container_init);
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
    if (busy == 0) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pid ", busy, " (needed by checkpoint '", m.id, "') is in use by '", who,
          "'; waited ", absl::FormatDuration(timeout),
          container_init > 0 ? ". Something started in the container before the restore"
                             : ". Stop that process (is the checkpointed job still running?)",
          " and retry"));
    }
    op.Report(v1::STAGE_WAIT_PIDS, 0, 0, absl::StrCat("waiting for pid ", busy, " (", who, ")"));
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void Engine::TellInit(pid_t init_pid, int value, const std::string& why) {
  if (value <= 0 && !why.empty()) {
    // The container's stderr is its log: the reason shows in `kubectl logs`.
    int fd = ::open(absl::StrCat("/proc/", init_pid, "/fd/2").c_str(),
                    O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      std::string line = absl::StrCat("cryo: ", why, "\n");
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  // Queued before cryo-init set its signal mask, the signal would kill it: it is ready once
  // it waits for signals (it does so microseconds after it starts, long before any restore).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (d_.proc->Link(init_pid, "exe").empty() == false && absl::Now() < deadline) {
    auto w = fs::ReadFile(absl::StrCat("/proc/", init_pid, "/wchan"));
    if (w.ok() && absl::StrContains(*w, "sigtimedwait")) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  union sigval v;
  v.sival_int = value;
  if (::sigqueue(init_pid, CRYO_INIT_SIGNAL, v) != 0) {
    CRYO_LOG(Warning) << "telling cryo-init (pid " << init_pid << ") the restore result: "
                      << strerror(errno);
  }
}

absl::StatusOr<v1::RestoreResult> Engine::Restore(const v1::RestoreRequest& req, Operation& op) {
  StageClock clock("restore", d_.metrics, op);
  const absl::Time t_start = absl::Now();
  clock.Begin(v1::STAGE_VALIDATE);
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(req.checkpoint_id()));
  CRYO_ASSIGN_OR_RETURN(store::Manifest m, d_.store->Get(req.checkpoint_id()));
  const bool container_mode = m.kind == "container";
  if (m.kind != "process" && !container_mode) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint '", m.id, "' is of an unknown kind '", m.kind, "'"));
  }
  if (container_mode && req.container_id().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", m.id, "' is of a container; it is restored into a new container "
        "(pod annotation cryo.dev/resume through the CRI shim), not as a process"));
  }
  if (!container_mode && !req.container_id().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", m.id, "' is of a process tree, not of a container"));
  }
  if (m.arch != Uname(true)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint '", m.id, "' was taken on ",
                                                      m.arch, ", this node is ", Uname(true)));
  }
  // CRIU reads images of older versions, not always of newer ones: refuse before anything is
  // touched rather than fail half-way through the restore.
  if (auto c = criu::CompareVersions(d_.criu->version(), m.criu_version); c && *c < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", m.id, "' was taken with CRIU ", m.criu_version, "; this node has CRIU ",
        d_.criu->version(),
        ", which may not read its images: restore on a node with CRIU >= ", m.criu_version));
  }
  Claim claim{this, {}, ""};
  {
    absl::MutexLock l(&mu_);
    if (busy_ids_.count(m.id)) {
      return absl::AbortedError(absl::StrCat("checkpoint '", m.id, "' is busy in another operation"));
    }
    busy_ids_.insert(m.id);
    claim.id = m.id;
  }
  std::optional<ContainerTarget> ctr;
  if (container_mode) {
    CRYO_ASSIGN_OR_RETURN(ctr, Container(req.container_id(), ContainerUse::kRestore));
  }
  // From here on, a container waiting for this restore must hear how it went.
  bool restored = false;
  absl::Status failure;
  auto tell_failure = absl::MakeCleanup([&] {
    if (ctr && !restored) {
      TellInit(ctr->init_pid, -1,
               absl::StrCat("restore of checkpoint ", m.id, " failed: ",
                            failure.ok() ? "cryod gave up" : failure.ToString()));
    }
  });
  auto fail = [&](absl::Status s) {
    failure = s;
    return s;
  };
  if (ctr) {
    if (ctr->restore_from != m.id) {
      return fail(absl::FailedPreconditionError(
          absl::StrCat("container ", ctr->info.name, " waits for checkpoint '", ctr->restore_from,
                       "', not '", m.id, "'")));
    }
    const std::string want = m.container.value("image_ref", "");
    if (!want.empty() && want != ctr->info.image_ref) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "checkpoint '", m.id, "' was taken in a container of image ", want, " (",
          m.container.value("image", ""), "); container ", ctr->info.name, " runs ",
          ctr->info.image_ref, ": a job resumes only on the image it ran on")));
    }
  }
  gpu::DeviceMap map(req.gpu_map().begin(), req.gpu_map().end());
  if (absl::Status s = d_.gpu->CheckCompatibleFor(m.gpu, ctr ? ctr->init_pid : 0, map); !s.ok()) {
    return fail(Annotate(s, absl::StrCat("checkpoint '", m.id, "'")));
  }

  // --- verify every file before anything starts: a bad image must never half-restore a job.
  auto dir = d_.store->LocalPath(m.id);
  if (!dir.ok()) return fail(dir.status());
  clock.Begin(v1::STAGE_VERIFY, m.TotalBytes());
  std::atomic<uint64_t> verified{0};
  {
    ProgressTicker ticker(op, v1::STAGE_VERIFY, [&] { return verified.load(); }, m.TotalBytes());
    std::vector<ExpectedFile> files;
    for (const auto& f : m.files) files.push_back({f.path, f.size, f.checksum});
    absl::Status s = VerifyFiles(*dir, files, cfg_.verify_threads, &verified);
    if (!s.ok()) {
      if (absl::IsDataLoss(s)) {
        // Remembered, so that automatic resumes pick an older checkpoint next time; an I/O
        // error (store unreachable) says nothing about the checkpoint and is not recorded.
        if (absl::Status ms = d_.store->MarkDamaged(m.id, std::string(s.message())); !ms.ok()) {
          CRYO_LOG(Warning) << "recording checkpoint " << m.id << " as damaged: " << ms;
        }
      }
      return fail(Annotate(s, absl::StrCat("checkpoint '", m.id,
                                           "' is damaged, refusing to restore")));
    }
  }
  if (d_.metrics) d_.metrics->AddBytesRead(m.TotalBytes());

  clock.Begin(v1::STAGE_WAIT_PIDS);
  if (absl::Status s = WaitPidsFree(m, op,
                                    req.pid_wait_timeout_ms() > 0
                                        ? absl::Milliseconds(req.pid_wait_timeout_ms())
                                        : cfg_.pid_wait_timeout,
                                    ctr ? ctr->init_pid : 0);
      !s.ok()) {
    return fail(s);
  }

  journal::Entry je;
  je.op_id = op.id();
  je.kind = "restore";
  je.checkpoint_id = m.id;
  je.state = "restoring";
  je.started_at = absl::FormatTime(absl::RFC3339_sec, t_start, absl::UTCTimeZone());
  je.gpu = m.gpu_processes;
  je.container_init_pid = ctr ? ctr->init_pid : 0;
  if (absl::Status s = d_.journal->Put(je); !s.ok()) return fail(s);
  auto journal_done = absl::MakeCleanup([&] { (void)d_.journal->Remove(op.id()); });
  const std::string op_dir = OpDir(op.id());
  if (absl::Status s = fs::MakeDirs(op_dir, 0700); !s.ok()) return fail(s);

  if (ctr) {
    // The job's files must be where it left them before CRIU reopens them.
    clock.Begin(v1::STAGE_ROOTFS);
    auto r = RunCapture({cfg_.nsexec_path, "--target", std::to_string(ctr->init_pid),
                         "--apply-rootfs-diff", fs::Join(*dir, kContainerDir)},
                        absl::Minutes(30));
    if (!r.ok()) return fail(r.status());
    if (!r->exit.exited || r->exit.code != 0) {
      return fail(absl::InternalError(
          absl::StrCat("putting back the container's writable layer failed (",
                       r->exit.Describe(), "): ", absl::StripAsciiWhitespace(r->output))));
    }
  }

  clock.Begin(v1::STAGE_RESTORE, m.TotalBytes());
  criu::RestoreOptions ropt;
  ropt.images_dir = fs::Join(*dir, store::kImagesDir);
  ropt.work_dir = op_dir;
  ropt.tcp_established = m.tcp_established;
  ropt.shell_job = m.shell_job;
  if (ctr) {
    // The job's output pipes become the new container's, so its log goes on where kubelet
    // reads it; the new container's pipes are its cryo-init's fd 1 and 2.
    criu::InContainer in{ctr->init_pid, cfg_.nsexec_path, {}};
    // Seen on 2026-11-23: CRIU's cgroupd helper took pid 18, which the job's child needed.
    for (int p : m.pids) in.last_pid = std::max<pid_t>(in.last_pid, p);
    for (int p : m.tids) in.last_pid = std::max<pid_t>(in.last_pid, p);
    const std::string out = m.container.value("stdout_pipe", "");
    const std::string err = m.container.value("stderr_pipe", "");
    if (!out.empty()) {
      in.fds.emplace_back(10, absl::StrCat("/proc/", ctr->init_pid, "/fd/1:w"));
      ropt.extra_args.insert(ropt.extra_args.end(), {"--inherit-fd", absl::StrCat("fd[10]:", out)});
    }
    if (!err.empty() && err != out) {
      in.fds.emplace_back(11, absl::StrCat("/proc/", ctr->init_pid, "/fd/2:w"));
      ropt.extra_args.insert(ropt.extra_args.end(), {"--inherit-fd", absl::StrCat("fd[11]:", err)});
    }
    ropt.in_container = in;
  }
  if (absl::Status s = AddGpuCriuOptions(GpuFromJson(je.gpu), &ropt.extra_args, &ropt.env);
      !s.ok()) {
    return fail(s);
  }
  absl::StatusOr<pid_t> root = d_.criu->Restore(ropt, [&](pid_t criu_pid) {
    je.criu_pid = criu_pid;
    (void)d_.journal->Put(je);
  });
  if (!root.ok()) return fail(root.status());
  pid_t host_root = *root;
  auto gpu_procs = GpuFromJson(je.gpu);
  if (ctr) {
    host_root = HostPidInNamespace(*d_.proc, ctr->init_pid, *root);
    // The GPU processes have new host pids: find them by their pids inside.
    for (size_t i = 0; i < gpu_procs.size() && i < m.gpu_processes.size(); ++i) {
      gpu_procs[i].pid =
          HostPidInNamespace(*d_.proc, ctr->init_pid, m.gpu_processes[i].value("ns_pid", 0));
    }
  }

  if (!gpu_procs.empty()) {
    clock.Begin(v1::STAGE_GPU_RESTORE);
    absl::Status s = d_.gpu->Restore(gpu_procs, map);
    if (s.ok()) s = d_.gpu->Unlock(gpu_procs);
    if (!s.ok()) {
      // The processes cannot run without their GPU state; do not leave them half-alive.
      std::vector<journal::Task> t;
      for (const auto& p : gpu_procs) t.push_back({p.pid, 0});
      KillTasks(t);
      return fail(Annotate(s, "restoring GPU state (restored processes were stopped)"));
    }
  }
  if (ctr) TellInit(ctr->init_pid, *root, "");
  restored = true;
  clock.End();
  if (d_.metrics) d_.metrics->ObserveOperation("restore", absl::ToDoubleSeconds(absl::Now() - t_start));
  CRYO_LOG(Info) << "restored checkpoint " << m.id << " as pid " << host_root
                 << (ctr ? absl::StrCat(" (pid ", *root, " in container ",
                                        ctr->info.id.substr(0, 13), ")")
                         : "");
  v1::RestoreResult r;
  r.set_checkpoint_id(m.id);
  r.set_root_pid(host_root);
  for (const auto& [k, v] : clock.ms()) (*r.mutable_stage_ms())[k] = v;
  return r;
}

v1::CheckpointInfo Engine::InfoFromManifest(const store::Manifest& m, bool with_files) {
  v1::CheckpointInfo i;
  i.set_checkpoint_id(m.id);
  i.set_workload(m.workload);
  i.set_node_name(m.node);
  i.set_created_at(m.created_at);
  i.set_root_pid(m.root_pid);
  for (int p : m.pids) i.add_pids(p);
  i.set_command(m.command);
  i.set_size_bytes(m.TotalBytes());
  i.set_file_count(m.files.size());
  i.set_criu_version(m.criu_version);
  i.set_kernel(m.kernel);
  i.set_leave_running(m.leave_running);
  i.set_kind(m.kind);
  i.set_damaged(m.damaged);
  for (const auto& [k, v] : m.labels) (*i.mutable_labels())[k] = v;
  for (const auto& [k, v] : m.stage_ms) (*i.mutable_stage_ms())[k] = v;
  if (with_files) {
    for (const auto& f : m.files) {
      auto* fi = i.add_files();
      fi->set_path(f.path);
      fi->set_size(f.size);
      fi->set_checksum(f.checksum);
    }
    i.set_manifest_json(store::ManifestToJson(m));
  }
  return i;
}

absl::StatusOr<std::vector<v1::CheckpointRequest>> Engine::OptedInCheckpoints(
    const std::string& reason) {
  if (d_.runtime == nullptr) {
    return absl::FailedPreconditionError("no container runtime configured (runtime_endpoint)");
  }
  CRYO_ASSIGN_OR_RETURN(auto running, d_.runtime->ListRunning());
  const std::string p = cfg_.annotation_prefix;
  std::vector<v1::CheckpointRequest> out;
  for (const auto& c : running) {
    auto on_stop = c.annotations.find(p + "/checkpoint-on-stop");
    if (on_stop == c.annotations.end() || on_stop->second != "true") continue;
    v1::CheckpointRequest req;
    req.set_container_id(c.id);
    // The notice may be withdrawn, and kubelet's own stop (if it comes) checkpoints again:
    // the job keeps running.
    req.set_leave_running(true);
    auto wk = c.annotations.find(p + "/workload-key");
    if (wk != c.annotations.end()) req.set_workload(wk->second);
    for (const char* k : {"io.kubernetes.pod.namespace", "io.kubernetes.pod.name",
                          "io.kubernetes.pod.uid", "io.kubernetes.container.name"}) {
      auto it = c.labels.find(k);
      if (it != c.labels.end()) (*req.mutable_labels())[k] = it->second;
    }
    (*req.mutable_labels())[p + "/reason"] = reason;
    out.push_back(std::move(req));
  }
  return out;
}

absl::StatusOr<v1::CheckpointInfo> Engine::Get(const std::string& id) {
  CRYO_ASSIGN_OR_RETURN(store::Manifest m, d_.store->Get(id));
  v1::CheckpointInfo i = InfoFromManifest(m, true);
  auto path = d_.store->LocalPath(id);
  if (path.ok()) i.set_store_path(*path);
  return i;
}

absl::StatusOr<std::vector<v1::CheckpointInfo>> Engine::List(const std::string& workload) {
  CRYO_ASSIGN_OR_RETURN(auto all, d_.store->List());
  if (d_.metrics) d_.metrics->SetCheckpointsStored(all.size());
  std::vector<v1::CheckpointInfo> out;
  for (const auto& m : all) {
    if (!workload.empty() && m.workload != workload) continue;
    out.push_back(InfoFromManifest(m, false));
  }
  return out;
}

absl::Status Engine::Delete(const std::string& id) {
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
  {
    absl::MutexLock l(&mu_);
    if (busy_ids_.count(id)) {
      return absl::AbortedError(absl::StrCat("checkpoint '", id, "' is in use by an operation"));
    }
  }
  return d_.store->Delete(id);
}

v1::NodeInfoResponse Engine::NodeInfo(const std::vector<std::shared_ptr<Operation>>& running) {
  v1::NodeInfoResponse r;
  r.set_node_name(cfg_.node_name);
  r.set_cryo_version(CRYO_VERSION);
  r.set_kernel(Uname(false));
  r.set_arch(Uname(true));
  r.set_criu_version(d_.criu->version());
  r.set_criu_path(d_.criu->path());
  r.set_criu_check_error(d_.criu->check_error());
  r.set_store_path(d_.store->location());
  if (auto f = d_.store->FreeBytes(); f.ok()) r.set_store_free_bytes(*f);
  for (const auto& p : d_.gpu->Plugins()) {
    auto* pi = r.add_plugins();
    pi->set_name(p.name);
    pi->set_version(p.version);
    pi->set_available(p.available);
    pi->set_detail(p.detail);
  }
  for (const auto& g : d_.gpu->Devices()) {
    auto* gi = r.add_gpus();
    gi->set_vendor(g.vendor);
    gi->set_uuid(g.uuid);
    gi->set_name(g.name);
    gi->set_chip(g.chip);
    gi->set_memory_total_bytes(g.memory_total_bytes);
    gi->set_memory_free_bytes(g.memory_free_bytes);
    gi->set_driver_version(g.driver_version);
  }
  for (const auto& op : running) {
    auto* o = r.add_operations();
    o->set_operation_id(op->id());
    o->set_kind(op->kind());
    o->set_target(op->target());
    o->set_stage(op->stage());
  }
  return r;
}

}  // namespace cryo::service
