#pragma once

// Stopping, resuming and ending a job's tasks, always matched by pid *and* start time so a
// process that reused a pid is never touched.

#include <vector>

#include "daemon/journal/journal.h"
#include "lib/base/proc.h"

namespace cryo::engine {

class JobControl {
 public:
  explicit JobControl(const proc::ProcReader* proc) : proc_(proc) {}

  // The tasks of a tree as they are now, with whether each was already stopped.
  std::vector<journal::Task> TasksOf(const std::vector<proc::ProcInfo>& tree) const;
  // `tasks` and every live descendant of them (children forked after the tasks were recorded
  // were stopped with their parents by CRIU).
  std::vector<journal::Task> WithDescendants(const std::vector<journal::Task>& tasks) const;
  // SIGCONT to every live task that was not stopped before the checkpoint began.
  void Resume(const std::vector<journal::Task>& tasks) const;
  // SIGKILL, then waits (bounded) until each is gone or a zombie.
  void Kill(const std::vector<journal::Task>& tasks) const;

 private:
  const proc::ProcReader* proc_;
};

}  // namespace cryo::engine
