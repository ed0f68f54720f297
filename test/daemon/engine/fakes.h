#pragma once

// Fakes of CRIU and the GPU manager for the engine's tests, and a real child process as the job.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/criu/credentials.h"
#include "daemon/criu/criu.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/gpu/gpu_manager.h"
#include "lib/base/fs.h"
#include "lib/base/proc.h"

namespace cryo::engine::testing {

class FakeCriu : public criu::Criu {
 public:
  absl::Status dump_result;
  std::vector<criu::TaskCredentials> image_creds;
  absl::Duration dump_delay = absl::ZeroDuration();
  bool dumped = false;
  int restores = 0;
  absl::Status Dump(const criu::DumpOptions& o,
                    const std::function<void(pid_t)>& started) override {
    started(0);
    last_dump = o;
    absl::SleepFor(dump_delay);
    if (!dump_result.ok()) return dump_result;
    // What CRIU does on success: images written, tree left stopped unless asked to run.
    (void)fs::WriteFileAtomic(o.images_dir + "/pages-1.img", std::string(100000, 'p'));
    // The job's credentials as CRIU records them (the restore checks them); a test may plant
    // others.
    std::vector<criu::TaskCredentials> creds = image_creds;
    if (creds.empty()) {
      auto own = criu::ReadLiveCredentials(proc::ProcReader(), ::getpid());
      if (own.ok()) {
        own->tid = o.pid;
        creds.push_back(*own);
      }
    }
    (void)criu::WriteImageCredentials(o.images_dir, creds);
    if (!o.leave_running) ::kill(o.pid, SIGSTOP);
    dumped = true;
    return absl::OkStatus();
  }
  // A restore "recreates" the job as a real sleeping child, so that whatever the engine then
  // does to the restored tree (kill it on a rollback) acts on a process of the test's own.
  // When set, a restore runs it instead of recreating the job (what a CRIU that fails half-way
  // leaves behind is the test's to make).
  std::function<absl::StatusOr<pid_t>(const criu::RestoreOptions&)> restore_hook;
  absl::StatusOr<pid_t> Restore(const criu::RestoreOptions& o,
                                const std::function<void(pid_t)>&) override {
    ++restores;
    last_restore = o;
    if (restore_hook) return restore_hook(o);
    pid_t pid = ::fork();
    if (pid == 0) {
      for (;;) ::pause();
    }
    restored.push_back(pid);
    return pid;
  }
  ~FakeCriu() {
    for (pid_t p : restored) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
  }
  std::vector<pid_t> restored;
  std::string version() const override { return ver; }
  std::string ver = "4.1.1";
  std::string path() const override { return "/fake/criu"; }
  std::string check_error() const override { return ""; }
  criu::DumpOptions last_dump;
  criu::RestoreOptions last_restore;
};

// The GPU fast path as a job's library would answer it, scripted: one process found, drains that
// report `drained` and whose files are said to hold `claimed` (what a lying job may claim).
class FakeFastpath : public gpu::Fastpath {
 public:
  using State = contract::gpu_fastpath::State;
  std::vector<FileDigest> claimed;
  uint64_t bytes = 0;
  int refills = 0;
  State state = State::kRunning;  // what Status answers
  int version = 0;                // the library's, as Find reports it (0: not asked)
  // The last drain: how many descriptors it was given, and whether into cryod's memory (then the
  // fake writes `bytes` of Pattern(i) into it, as a library would).
  size_t drain_files = 0;
  bool drained_into_memory = false, refilled_from_memory = false;
  int salt = 0;  // changes the pattern: the job's GPU data changed
  char Pattern(uint64_t i) const { return static_cast<char>((i * 131 + i / 4093 + salt) & 0xff); }
  // What the last refill from cryod's memory was given (its first `bytes`).
  std::string refilled;

  class Drain : public gpu::FastpathDrainHandle {
   public:
    Drain(contract::gpu_fastpath::DrainedReply d, std::vector<FileDigest> c)
        : d_(d), c_(std::move(c)) {}
    const contract::gpu_fastpath::DrainedReply& drained() const override { return d_; }
    absl::StatusOr<std::vector<FileDigest>> WaitSaved(bool, const std::function<bool()>&) override {
      return c_;
    }
    // Held at the cut (a library of kVersionCut or later): at once.
    absl::Status Align(uint64_t, absl::Duration) override { return absl::OkStatus(); }

   private:
    contract::gpu_fastpath::DrainedReply d_;
    std::vector<FileDigest> c_;
  };

  absl::StatusOr<std::vector<gpu::FastpathProcess>> Find(const std::vector<pid_t>& pids) override {
    gpu::FastpathProcess p;
    p.pid = pids.front();
    p.ns_pid = pids.front();
    p.bytes = bytes;
    p.version = version;
    return std::vector<gpu::FastpathProcess>{p};
  }
  absl::StatusOr<std::unique_ptr<gpu::FastpathDrainHandle>> Drain(
      const gpu::FastpathProcess& p, const gpu::FastpathDrainOptions&,
      const std::vector<int>& files) override {
    drain_files = files.size();
    drained_into_memory = p.memory;
    if (p.memory && files.size() == 1) {
      std::string data(bytes, 0);
      for (uint64_t i = 0; i < bytes; ++i) data[i] = Pattern(i);
      if (::pwrite(files[0], data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) {
        return absl::InternalError("the fake could not write cryod's memory");
      }
    }
    state = State::kSaved;
    contract::gpu_fastpath::DrainedReply d;
    d.bytes = bytes;
    d.allocations = 1;
    return std::unique_ptr<gpu::FastpathDrainHandle>(new class Drain(d, claimed));
  }
  absl::StatusOr<contract::gpu_fastpath::RefillReply> Refill(
      const gpu::FastpathProcess& p, int, const std::vector<int>& files,
      const std::vector<FileDigest>&, const std::function<bool()>&) override {
    ++refills;
    refilled_from_memory = p.memory;
    refilled.clear();
    if (p.memory && files.size() == 1) {
      refilled.resize(bytes);
      if (::pread(files[0], refilled.data(), bytes, 0) != static_cast<ssize_t>(bytes)) {
        return absl::InternalError("the fake could not read cryod's memory");
      }
    }
    state = State::kRunning;
    return contract::gpu_fastpath::RefillReply{};
  }
  absl::StatusOr<contract::gpu_fastpath::StatusReply> Status(const gpu::FastpathProcess&) override {
    contract::gpu_fastpath::StatusReply r;
    r.version = contract::gpu_fastpath::kVersion;
    r.state = state;
    return r;
  }
};

class FakeGpu : public gpu::NullGpuManager {
 public:
  bool use_gpu = false;
  absl::Status lock_result, compat_result, checkpoint_result, restore_result;
  int rollbacks = 0, locks = 0, checkpoints = 0, restores = 0, unlocks = 0;
  absl::StatusOr<std::vector<gpu::GpuProcess>> Discover(const std::vector<pid_t>& pids) override {
    if (!use_gpu) return std::vector<gpu::GpuProcess>{};
    return std::vector<gpu::GpuProcess>{{pids[0], "fake", {{"uuid", "GPU-1"}}, 0}};
  }
  absl::Status Lock(const std::vector<gpu::GpuProcess>&, absl::Duration) override {
    ++locks;
    return lock_result;
  }
  absl::Status Checkpoint(std::vector<gpu::GpuProcess>&) override {
    ++checkpoints;
    return checkpoint_result;
  }
  absl::Status Restore(const std::vector<gpu::GpuProcess>&, const gpu::DeviceMap&) override {
    ++restores;
    return restore_result;
  }
  absl::Status Unlock(const std::vector<gpu::GpuProcess>&) override {
    ++unlocks;
    return absl::OkStatus();
  }
  void Rollback(const std::vector<gpu::GpuProcess>&) override { ++rollbacks; }
  nlohmann::json Describe(const std::vector<gpu::GpuProcess>&) override {
    return {{"driver", "fake"}};
  }
  absl::Status CheckCompatible(const nlohmann::json&, gpu::DeviceMap&) override {
    return compat_result;
  }
  gpu::CriuExtras criu_extras;
  absl::StatusOr<gpu::CriuExtras> CriuOptions(const std::vector<gpu::GpuProcess>&) override {
    return criu_extras;
  }
};

// A job: a child process that just sleeps.
struct Child {
  pid_t pid;
  Child() {
    pid = ::fork();
    if (pid == 0) {
      for (;;) ::pause();
    }
  }
  ~Child() {
    if (pid <= 0) return;  // kill(-1) would signal everything
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  // Running or sleeping: anything but stopped, zombie or gone.
  bool Runs() const {
    char c = State();
    return c == 'R' || c == 'S' || c == 'D';
  }
  char State() const {
    auto i = proc::ProcReader().Read(pid);
    return i.ok() ? i->state : '-';
  }
};

}  // namespace cryo::engine::testing
