#include "daemon/engine/job_control.h"

#include <signal.h>

#include <set>

#include "lib/base/poll.h"

namespace cryo::engine {

std::vector<journal::Task> JobControl::TasksOf(const std::vector<proc::ProcInfo>& tree) const {
  std::vector<journal::Task> out;
  for (const auto& p : tree) out.push_back({p.pid, p.start_time, p.state == 'T' || p.state == 't'});
  return out;
}

std::vector<journal::Task> JobControl::WithDescendants(
    const std::vector<journal::Task>& tasks) const {
  std::vector<journal::Task> out = tasks;
  std::set<int> seen;
  for (const auto& t : tasks) seen.insert(t.pid);
  for (const auto& t : tasks) {
    if (!proc_->Alive(t.pid, t.start_time)) continue;
    auto tree = proc_->Tree(t.pid);
    if (!tree.ok()) continue;
    for (const auto& p : *tree) {
      if (seen.insert(p.pid).second) out.push_back({p.pid, p.start_time, false});
    }
  }
  return out;
}

void JobControl::Resume(const std::vector<journal::Task>& tasks) const {
  for (const auto& t : tasks) {
    if (t.was_stopped) continue;  // stopped by its owner before us: it stays so
    if (proc_->Alive(t.pid, t.start_time)) ::kill(t.pid, SIGCONT);
  }
}

void JobControl::Kill(const std::vector<journal::Task>& tasks) const {
  for (const auto& t : tasks) {
    if (proc_->Alive(t.pid, t.start_time)) ::kill(t.pid, SIGKILL);
  }
  // A zombie is dead: only its parent can reap it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (const auto& t : tasks) {
    PollUntilDeadline(
        [&] {
          auto i = proc_->Read(t.pid);
          return !i.ok() || i->start_time != t.start_time || i->state == 'Z' || i->state == 'X';
        },
        deadline, absl::Milliseconds(5));
  }
}

}  // namespace cryo::engine
