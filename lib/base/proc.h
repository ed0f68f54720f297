#pragma once

// Reads what cryod and the GPU plugins need to know about processes from /proc (the root is a
// parameter so tests can point it at a fake tree).

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cryo::proc {

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  char state = '?';
  std::string comm;
  uint64_t flags = 0;
  uint64_t start_time = 0;  // clock ticks since boot: with the pid, identifies a process
  bool kernel_thread = false;
};

class ProcReader {
 public:
  explicit ProcReader(std::string root = "/proc") : root_(std::move(root)) {}

  // NOT_FOUND when there is no such process.
  absl::StatusOr<ProcInfo> Read(pid_t pid) const;
  // The root and all its descendants (processes, not threads), root first.
  absl::StatusOr<std::vector<ProcInfo>> Tree(pid_t root) const;
  // Thread ids of a process.
  std::vector<pid_t> Threads(pid_t pid) const;
  std::vector<std::string> Cmdline(pid_t pid) const;
  // Anonymous + shared memory the process maps (what CRIU will mostly write), for progress.
  uint64_t MemoryBytes(pid_t pid) const;
  // Whether pid exists and, when start_time != 0, is still the same process.
  bool Alive(pid_t pid, uint64_t start_time = 0) const;
  // Stopped (T) or zombie (Z)?
  bool Stopped(pid_t pid) const;
  std::vector<pid_t> AllPids() const;
  // Direct children (processes) of pid.
  std::vector<pid_t> Children(pid_t pid) const;
  // The process a thread belongs to (its thread group id); the pid itself for a process's main
  // thread, 0 when unreadable.
  pid_t Tgid(pid_t pid) const;
  // The pid as seen in the process's own (innermost) pid namespace; 0 when unreadable.
  pid_t NsPid(pid_t pid) const;
  // Target of /proc/<pid>/<rel> ("fd/1" -> "pipe:[123]", "ns/pid" -> "pid:[4026...]", "exe");
  // empty when unreadable.
  std::string Link(pid_t pid, const std::string& rel) const;
  // Environment as KEY=VALUE strings.
  std::vector<std::string> Environ(pid_t pid) const;
  // The same as a map; NOT_FOUND / PERMISSION_DENIED when it cannot be read.
  absl::StatusOr<std::map<std::string, std::string>> EnvironMap(pid_t pid) const;
  // Targets of /proc/<pid>/fd/* ("/dev/nvidia0", "pipe:[123]"); empty when unreadable.
  std::vector<std::string> FdTargets(pid_t pid) const;
  // Path names of the files /proc/<pid>/maps maps.
  std::vector<std::string> MappedPaths(pid_t pid) const;
  // Whether /proc/<pid> is there (any state, zombies included).
  bool Exists(pid_t pid) const;
  // "<root>/<pid>/<rel>".
  std::string PidPath(pid_t pid, absl::string_view rel) const;
  // Clock ticks since boot now (<root>/uptime), in the unit of ProcInfo::start_time; 0 when
  // unreadable.
  uint64_t UptimeTicks() const;
  const std::string& root() const { return root_; }
  // Whether pid has a network namespace of its own (a pod's), not the node's (PID 1's); false
  // when either is unreadable.
  bool OwnNetns(pid_t pid) const {
    const std::string theirs = Link(pid, "ns/net");
    return !theirs.empty() && theirs != Link(1, "ns/net");
  }

 private:
  std::string root_;
};

// This machine's kernel release and architecture (uname), or "unknown": recorded in manifests,
// compared at restore, shown by `cryo node`.
std::string KernelRelease();
std::string MachineArch();

// Best effort: `line` and a newline on the stderr of process `pid` (a container's PID 1: its
// log, which `kubectl logs` shows). Never blocks.
void WriteToStderrOf(int pid, const std::string& line);

}  // namespace cryo::proc
