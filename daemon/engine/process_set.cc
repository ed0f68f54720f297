#include "daemon/engine/process_set.h"

#include <algorithm>

#include "daemon/container/target.h"
#include "daemon/criu/network_lock.h"

namespace cryo::engine {

namespace {

std::vector<pid_t> PidsOf(const std::vector<journal::Task>& tasks) {
  std::vector<pid_t> out;
  for (const auto& t : tasks) out.push_back(t.pid);
  return out;
}

}  // namespace

void ProcessSet::Take(pid_t target, std::vector<proc::ProcInfo> tree, const proc::ProcReader& proc,
                      const JobControl& jobs) {
  target_ = target;
  tree_ = std::move(tree);
  root_ = tree_.front();
  for (const auto& p : tree_) {
    pids_.push_back(p.pid);
    expected_ += proc.MemoryBytes(p.pid);
  }
  tasks_ = jobs.TasksOf(tree_);
}

void ProcessSet::Remeasure(const proc::ProcReader& proc) {
  for (pid_t p : pids_) expected_ = std::max(expected_, proc.MemoryBytes(p));
}

void ProcessSet::CriuStarted(pid_t criu_pid, const proc::ProcReader& proc) {
  criu_pid_ = criu_pid;
  auto info = proc.Read(criu_pid);
  criu_start_time_ = info.ok() ? info->start_time : 0;
}

void ProcessSet::Dumped(bool left_stopped, bool in_container, const proc::ProcReader& proc,
                        const JobControl& jobs) {
  criu_pid_ = 0;
  left_stopped_ = left_stopped;
  if (left_stopped_) {
    auto frozen = proc.Tree(target_);
    if (frozen.ok()) {
      const std::vector<journal::Task> before = tasks_;
      tree_ = *std::move(frozen);
      tasks_ = jobs.TasksOf(tree_);
      // CRIU stopped them all now: who was stopped before is what validation saw.
      for (auto& t : tasks_) {
        t.was_stopped = false;
        for (const auto& b : before) {
          if (b.pid == t.pid && b.start_time == t.start_time) t.was_stopped = b.was_stopped;
        }
      }
    }
  }
  // The pids a restore needs free; a container's job keeps the ones it has inside.
  for (const auto& p : tree_) {
    saved_pids_.push_back(in_container ? proc.NsPid(p.pid) : p.pid);
    const std::vector<pid_t> tids =
        in_container ? container::NsThreadIds(proc, p.pid) : proc.Threads(p.pid);
    saved_tids_.insert(saved_tids_.end(), tids.begin(), tids.end());
  }
}

uint64_t ProcessSet::DumpBytes() const {
  uint64_t b = 0;
  for (const auto& [rel, d] : digests_) b += d.size;
  return b;
}

void ProcessSet::Record(journal::Entry* e) const {
  e->tasks = tasks_;
  e->criu_pid = criu_pid_;
  e->criu_start_time = criu_start_time_;
}

void ProcessSet::Undo(const journal::Entry& e, const JobControl& jobs, const std::string& dump_log,
                      const std::string& nsexec) {
  const std::vector<journal::Task> all = jobs.WithDescendants(e.tasks);
  LeaveRepair(all, e.tcp_established, dump_log, e.container_init_pid, nsexec);
  jobs.Resume(all);
}

void ProcessSet::LeaveRepair(const std::vector<journal::Task>& tasks, bool tcp_established,
                             const std::string& dump_log, pid_t container_init,
                             const std::string& nsexec) {
  // Harmless when there is no lock (a leave-running dump of a process keeps none).
  if (!tcp_established) return;
  criu::RemoveNetworkLock(dump_log, container_init, nsexec);
  criu::LeaveTcpRepair(PidsOf(tasks));
}

}  // namespace cryo::engine
