#pragma once

// Container mode: turning a CRI container id into the processes cryod works on. An opted-in
// container runs cryo-init as PID 1 (injected by the shim) and the job as its only child; the
// job is what is checkpointed and what a restore recreates, under the new container's
// cryo-init.

#include <sys/types.h>

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/container/runtime.h"
#include "lib/base/proc.h"

namespace cryo::container {

struct ContainerTarget {
  runtime::ContainerInfo info;
  pid_t init_pid = 0;  // host pid of cryo-init
  pid_t job_pid = 0;   // host pid of the job (checkpoint only)
  // Targets of cryo-init's fd 1 and 2 ("pipe:[123]"): the container's log pipes. The job's
  // output goes to them; a restore points the same pipes of the new container at the job.
  std::string stdout_pipe;
  std::string stderr_pipe;
  std::string restore_from;  // cryo-init's CRYO_INIT_RESTORE_FROM (empty: normal start)
};

enum class ContainerUse { kCheckpoint, kRestore };

// kCheckpoint: the container runs, PID 1 is cryo-init, it has exactly one child (the job).
// kRestore: it runs, PID 1 is cryo-init waiting in restore mode, and it has no child yet; a
// PID 1 that is not cryo-init yet is given up to `exec_wait` to become it (a container just
// started: the runtime's init execs the container's command only after the start returned).
// Errors name the container and say what to do.
absl::StatusOr<ContainerTarget> ResolveContainer(runtime::ContainerRuntime& rt,
                                                 const proc::ProcReader& proc,
                                                 const std::string& id, ContainerUse use,
                                                 absl::Duration exec_wait = absl::Seconds(5));

// Pids (processes and threads, as numbered inside) in use in the pid namespace of init_pid.
std::set<pid_t> NsPidsInUse(const proc::ProcReader& proc, pid_t init_pid);

// Host pid of the process numbered ns_pid in the pid namespace of init_pid; 0 if none.
pid_t HostPidInNamespace(const proc::ProcReader& proc, pid_t init_pid, pid_t ns_pid);

// Thread ids of a process as numbered inside its own pid namespace.
std::vector<pid_t> NsThreadIds(const proc::ProcReader& proc, pid_t pid);

}  // namespace cryo::container
