#include "service/engine.h"

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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/fs.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/status.h"
#include "common/subprocess.h"

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
      : thread_([this, &op, stage, done = std::move(done), total] {
          while (!stop_.load()) {
            op.Report(stage, done(), total);
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
  }

 private:
  absl::Mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

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

void Engine::UnlockNetwork(const std::string& op_dir) {
  // A dump with --leave-stopped keeps CRIU's nftables lock (table "inet CRIU-<run id>") for
  // the restore; when we resume the job instead, the lock must go.
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
    auto r = RunCapture({nft, "delete", "table", "inet", t});
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
    std::string action;
    if (e.kind == "checkpoint") {
      if (e.state == "published") {
        // The checkpoint is safe in the store: finish what was asked.
        if (e.leave_running) {
          if (!gpu_procs.empty()) d_.gpu->Rollback(gpu_procs);
          ResumeStopped(e.tasks);
          action = "completed_resumed";
        } else {
          KillTasks(e.tasks);
          action = "completed_stopped";
        }
      } else {
        // Not published: undo. The job runs on as if nothing happened.
        if (!e.staging_dir.empty()) (void)fs::RemoveTree(e.staging_dir);
        if (e.tcp_established && !e.leave_running) UnlockNetwork(OpDir(e.op_id));
        if (!gpu_procs.empty()) d_.gpu->Rollback(gpu_procs);
        ResumeStopped(e.tasks);
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
  auto n = d_.store->CollectIncomplete({}, cfg_.incomplete_ttl);
  if (!n.ok()) {
    CRYO_LOG(Warning) << "collecting incomplete checkpoints: " << n.status();
  } else if (*n > 0) {
    CRYO_LOG(Info) << "collected " << *n << " incomplete checkpoint directories";
  }
  PruneOpLogs();
  return absl::OkStatus();
}

absl::StatusOr<v1::CheckpointInfo> Engine::Checkpoint(const v1::CheckpointRequest& req,
                                                      Operation& op) {
  StageClock clock("checkpoint", d_.metrics, op);
  const absl::Time t_start = absl::Now();

  // --- validate: nothing is touched until the request is known to be sane.
  clock.Begin(v1::STAGE_VALIDATE);
  if (!req.checkpoint_id().empty()) CRYO_RETURN_IF_ERROR(ValidateCheckpointId(req.checkpoint_id()));
  if (req.workload().size() > 253) return absl::InvalidArgumentError("workload is too long");
  std::vector<proc::ProcInfo> tree;
  CRYO_RETURN_IF_ERROR(ValidateTarget(req.pid(), &tree));
  const proc::ProcInfo& root = tree.front();
  const std::string workload = req.workload().empty() ? root.comm : req.workload();
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
  TailHasher hasher(staged->images_dir());
  hasher.Start();
  absl::Status dumped;
  {
    ProgressTicker ticker(op, v1::STAGE_DUMP, [&] { return hasher.bytes_hashed(); }, expected);
    criu::DumpOptions dopt;
    dopt.pid = req.pid();
    dopt.images_dir = staged->images_dir();
    dopt.work_dir = op_dir;
    dopt.leave_running = req.leave_running();
    dopt.tcp_established = req.tcp_established();
    dopt.shell_job = shell_job;
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
  je.state = "dumped";
  je.criu_pid = 0;
  CRYO_RETURN_IF_ERROR(d_.journal->Put(je));
  Hook("after-dump");

  // From here until publish, a failure must resume the stopped job.
  bool resume_on_failure = !req.leave_running();
  auto resume = absl::MakeCleanup([&] {
    if (!resume_on_failure) return;
    if (req.tcp_established()) UnlockNetwork(op_dir);
    if (gpu_checkpointed) {
      d_.gpu->Rollback(gpu_procs);
      gpu_checkpointed = false;
    }
    ResumeStopped(tasks);
    CRYO_LOG(Warning) << "checkpoint " << id << " failed after the dump; job resumed";
  });

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
  m.workload = workload;
  m.node = cfg_.node_name;
  m.created_at = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t_start, absl::UTCTimeZone());
  m.root_pid = req.pid();
  m.pids = pids;
  m.tids = tids;
  m.command = root.comm;
  m.cmdline = d_.proc->Cmdline(req.pid());
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
  if (!gpu_procs.empty()) {
    m.gpu = d_.gpu->Describe(gpu_procs);
    m.gpu_processes = GpuToJson(gpu_procs);
  }

  Hook("before-publish");
  clock.Begin(v1::STAGE_PUBLISH, m.TotalBytes());
  clock.End();
  m.stage_ms = clock.ms();
  CRYO_RETURN_IF_ERROR(Annotate(staged->Publish(m), absl::StrCat("publishing checkpoint ", id)));
  je.state = "published";
  (void)d_.journal->Put(je);
  resume_on_failure = false;
  if (d_.metrics) d_.metrics->AddBytesWritten(m.TotalBytes());

  // --- finish: the job either runs on (leave-running) or stops here, as for a preemption.
  clock.Begin(v1::STAGE_FINISH);
  if (!req.leave_running()) KillTasks(tasks);
  gpu_checkpointed = false;  // a killed job's GPU state dies with it
  if (cfg_.retention_keep > 0) {
    auto deleted = d_.store->ApplyRetention(workload, cfg_.retention_keep);
    if (deleted.ok() && !deleted->empty()) {
      CRYO_LOG(Info) << "retention: deleted " << absl::StrJoin(*deleted, ", ");
    }
  }
  clock.End();
  if (d_.metrics) d_.metrics->ObserveOperation("checkpoint", absl::ToDoubleSeconds(absl::Now() - t_start));
  m.stage_ms = clock.ms();
  CRYO_LOG(Info) << "checkpoint " << id << " of pid " << req.pid() << " published ("
                 << m.TotalBytes() << " bytes, " << m.files.size() << " files)";
  v1::CheckpointInfo info = InfoFromManifest(m, false);
  info.set_store_path(fs::Join(fs::Join(d_.store->location(), "checkpoints"), id));
  return info;
}

absl::Status Engine::WaitPidsFree(const store::Manifest& m, Operation& op, absl::Duration timeout) {
  std::vector<int> need = m.pids;
  need.insert(need.end(), m.tids.begin(), m.tids.end());
  std::sort(need.begin(), need.end());
  need.erase(std::unique(need.begin(), need.end()), need.end());
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int busy = 0;
    std::string who;
    for (int p : need) {
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
          ". Stop that process (is the checkpointed job still running?) and retry"));
    }
    op.Report(v1::STAGE_WAIT_PIDS, 0, 0, absl::StrCat("waiting for pid ", busy, " (", who, ")"));
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<v1::RestoreResult> Engine::Restore(const v1::RestoreRequest& req, Operation& op) {
  StageClock clock("restore", d_.metrics, op);
  const absl::Time t_start = absl::Now();
  clock.Begin(v1::STAGE_VALIDATE);
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(req.checkpoint_id()));
  CRYO_ASSIGN_OR_RETURN(store::Manifest m, d_.store->Get(req.checkpoint_id()));
  if (m.kind != "process") {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", m.id, "' is of a ", m.kind,
        "; it is restored by creating its container through the CRI shim, not by cryo restore"));
  }
  if (m.arch != Uname(true)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint '", m.id, "' was taken on ",
                                                      m.arch, ", this node is ", Uname(true)));
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
  gpu::DeviceMap map(req.gpu_map().begin(), req.gpu_map().end());
  CRYO_RETURN_IF_ERROR(Annotate(d_.gpu->CheckCompatible(m.gpu, map),
                                absl::StrCat("checkpoint '", m.id, "'")));

  // --- verify every file before anything starts: a bad image must never half-restore a job.
  CRYO_ASSIGN_OR_RETURN(std::string dir, d_.store->LocalPath(m.id));
  clock.Begin(v1::STAGE_VERIFY, m.TotalBytes());
  std::atomic<uint64_t> verified{0};
  {
    ProgressTicker ticker(op, v1::STAGE_VERIFY, [&] { return verified.load(); }, m.TotalBytes());
    std::vector<ExpectedFile> files;
    for (const auto& f : m.files) files.push_back({f.path, f.size, f.checksum});
    CRYO_RETURN_IF_ERROR(Annotate(VerifyFiles(dir, files, cfg_.verify_threads, &verified),
                                  absl::StrCat("checkpoint '", m.id, "' is damaged, refusing to restore")));
  }
  if (d_.metrics) d_.metrics->AddBytesRead(m.TotalBytes());

  clock.Begin(v1::STAGE_WAIT_PIDS);
  CRYO_RETURN_IF_ERROR(WaitPidsFree(m, op,
                                    req.pid_wait_timeout_ms() > 0
                                        ? absl::Milliseconds(req.pid_wait_timeout_ms())
                                        : cfg_.pid_wait_timeout));

  journal::Entry je;
  je.op_id = op.id();
  je.kind = "restore";
  je.checkpoint_id = m.id;
  je.state = "restoring";
  je.started_at = absl::FormatTime(absl::RFC3339_sec, t_start, absl::UTCTimeZone());
  je.gpu = m.gpu_processes;
  CRYO_RETURN_IF_ERROR(d_.journal->Put(je));
  auto journal_done = absl::MakeCleanup([&] { (void)d_.journal->Remove(op.id()); });

  clock.Begin(v1::STAGE_RESTORE, m.TotalBytes());
  const std::string op_dir = OpDir(op.id());
  criu::RestoreOptions ropt;
  ropt.images_dir = fs::Join(dir, store::kImagesDir);
  ropt.work_dir = op_dir;
  ropt.tcp_established = m.tcp_established;
  ropt.shell_job = m.shell_job;
  CRYO_RETURN_IF_ERROR(AddGpuCriuOptions(GpuFromJson(je.gpu), &ropt.extra_args, &ropt.env));
  CRYO_ASSIGN_OR_RETURN(pid_t root, d_.criu->Restore(ropt, [&](pid_t criu_pid) {
    je.criu_pid = criu_pid;
    (void)d_.journal->Put(je);
  }));

  auto gpu_procs = GpuFromJson(je.gpu);
  if (!gpu_procs.empty()) {
    clock.Begin(v1::STAGE_GPU_RESTORE);
    absl::Status s = d_.gpu->Restore(gpu_procs, map);
    if (s.ok()) s = d_.gpu->Unlock(gpu_procs);
    if (!s.ok()) {
      // The processes cannot run without their GPU state; do not leave them half-alive.
      std::vector<journal::Task> t;
      for (const auto& p : gpu_procs) t.push_back({p.pid, 0});
      KillTasks(t);
      return Annotate(s, "restoring GPU state (restored processes were stopped)");
    }
  }
  clock.End();
  if (d_.metrics) d_.metrics->ObserveOperation("restore", absl::ToDoubleSeconds(absl::Now() - t_start));
  CRYO_LOG(Info) << "restored checkpoint " << m.id << " as pid " << root;
  v1::RestoreResult r;
  r.set_checkpoint_id(m.id);
  r.set_root_pid(root);
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
