#pragma once

// The dump's participant (docs/architecture.md, "Participants"): the job's processes as a
// checkpoint sees them. It owns the tree read at validate and again after the dump, the tasks a
// rollback or the end of the job acts on (pid and start time), the CRIU that dumps them, what
// CRIU left stopped, the pids and tids a restore needs free, and the digests of CRIU's images.
// The steps validate, dump, resume_early, gpu_resume and finish are its operations; its
// durable record is the journal entry's tasks and CRIU, and its undo needs only that record.

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "daemon/engine/job_control.h"
#include "daemon/journal/journal.h"
#include "daemon/store/checksum.h"
#include "lib/base/proc.h"

namespace cryo::engine {

class ProcessSet {
 public:
  // validate: the tree ValidateTarget read under `target` (its root first), running; the tasks
  // recorded with whether their owner had stopped them, and the memory they hold.
  void Take(pid_t target, std::vector<proc::ProcInfo> tree, const proc::ProcReader& proc,
            const JobControl& jobs);

  pid_t target() const { return target_; }
  // The root as validate saw it (the tree is re-read after the dump).
  const proc::ProcInfo& root() const { return root_; }
  const std::vector<proc::ProcInfo>& tree() const { return tree_; }
  const std::vector<pid_t>& pids() const { return pids_; }
  const std::vector<journal::Task>& tasks() const { return tasks_; }
  // The bytes the dump is expected to write: the job's memory.
  uint64_t expected() const { return expected_; }
  // gpu_checkpoint: the driver moved device memory into the processes; CRIU writes it too.
  void Remeasure(const proc::ProcReader& proc);

  // dump: CRIU runs (recovery waits for it to end before it undoes anything).
  void CriuStarted(pid_t criu_pid, const proc::ProcReader& proc);
  // dump: CRIU ended well. `left_stopped`: it left the job stopped, so the tree is re-read
  // (short-lived children come and go) and that is what is resumed or killed. The pids and
  // tids a restore needs free are taken, numbered inside the container's pid namespace when
  // `in_container`.
  void Dumped(bool left_stopped, bool in_container, const proc::ProcReader& proc,
              const JobControl& jobs);
  void SetDigests(std::map<std::string, FileDigest> d) { digests_ = std::move(d); }

  bool left_stopped() const { return left_stopped_; }
  const std::vector<pid_t>& saved_pids() const { return saved_pids_; }
  const std::vector<pid_t>& saved_tids() const { return saved_tids_; }
  // CRIU's images, relative to the images directory.
  const std::map<std::string, FileDigest>& digests() const { return digests_; }
  uint64_t DumpBytes() const;

  // resume_early, gpu_resume: the job runs on (a task its owner had stopped stays stopped).
  void Resume(const JobControl& jobs) const { jobs.Resume(tasks_); }

  // Its durable record: the journal entry's tasks and CRIU.
  void Record(journal::Entry* e) const;
  // The dump's undo from the record (recovery has nothing else): the connections CRIU left in
  // repair mode and its network lock released (when it dumped them), then every task and its
  // descendants resumed. Harmless when the job already runs.
  static void Undo(const journal::Entry& e, const JobControl& jobs, const std::string& dump_log,
                   const std::string& nsexec);
  // The same release of the connections for a job resumed early (resume_early).
  static void LeaveRepair(const std::vector<journal::Task>& tasks, bool tcp_established,
                          const std::string& dump_log, pid_t container_init,
                          const std::string& nsexec);

 private:
  pid_t target_ = 0;
  proc::ProcInfo root_;
  std::vector<proc::ProcInfo> tree_;
  std::vector<pid_t> pids_;
  std::vector<journal::Task> tasks_;
  uint64_t expected_ = 0;
  int criu_pid_ = 0;
  uint64_t criu_start_time_ = 0;
  bool left_stopped_ = false;
  std::vector<pid_t> saved_pids_, saved_tids_;
  std::map<std::string, FileDigest> digests_;
};

}  // namespace cryo::engine
