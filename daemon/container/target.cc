#include "daemon/container/target.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "lib/contract/cryo_init_protocol.h"

namespace cryo::container {
namespace {

bool IsCryoInit(const proc::ProcReader& proc, pid_t pid) {
  // The exe link is read relative to the container's root: the shim's mount point.
  std::string exe = proc.Link(pid, "exe");
  if (exe == CRYO_INIT_CONTAINER_PATH || absl::EndsWith(exe, "/cryo-init")) return true;
  auto cmd = proc.Cmdline(pid);
  return !cmd.empty() && cmd[0] == CRYO_INIT_CONTAINER_PATH;
}

}  // namespace

absl::StatusOr<ContainerTarget> ResolveContainer(runtime::ContainerRuntime& rt,
                                                 const proc::ProcReader& proc,
                                                 const std::string& id, ContainerUse use,
                                                 absl::Duration exec_wait) {
  ContainerTarget t;
  absl::StatusOr<runtime::ContainerInfo> info = rt.Inspect(id);
  if (!info.ok()) return info.status();
  t.info = *std::move(info);
  const std::string what = absl::StrCat("container ", t.info.name.empty() ? id : t.info.name, " (",
                                        id.substr(0, 13), ")");
  if (t.info.state != runtime::ContainerInfo::State::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " is ", runtime::StateName(t.info.state),
        t.info.state == runtime::ContainerInfo::State::kExited
            ? absl::StrCat(" (exit code ", t.info.exit_code, "); there is no job to ",
                           use == ContainerUse::kCheckpoint ? "checkpoint" : "restore into")
            : ", not running"));
  }
  if (t.info.pid <= 0 || !proc.Alive(t.info.pid)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the runtime at ", rt.endpoint(), " reports no live init process for ", what));
  }
  t.init_pid = t.info.pid;
  // runc's `start` returns once its init was told to go, before that execs the command: a
  // restore asked for at once can find PID 1 still runc's init (seen on CI's loaded 2 cores:
  // its exe runc's bind-mounted copy, which reads '/'). And in the middle of the exec the exe is
  // already cryo-init's while the environment is not yet there (the kernel sets the new image's
  // environment after its exe): seen on CI as a container "not created to resume".
  if (use == ContainerUse::kRestore) {
    const absl::Time until = absl::Now() + exec_wait;
    auto execd = [&] { return IsCryoInit(proc, t.init_pid) && !proc.Environ(t.init_pid).empty(); };
    while (!execd() && proc.Alive(t.init_pid) && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (!IsCryoInit(proc, t.init_pid)) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " does not run under cryo-init (PID 1 is '", proc.Link(t.init_pid, "exe"),
        "'): only containers of pods that opted in to cryo (pod annotations, see "
        "docs/containers.md) can be checkpointed and restored"));
  }
  for (const auto& kv : proc.Environ(t.init_pid)) {
    if (absl::StartsWith(kv, CRYO_INIT_RESTORE_ENV "=")) {
      t.restore_from = kv.substr(sizeof(CRYO_INIT_RESTORE_ENV));
    }
  }
  t.stdout_pipe = proc.Link(t.init_pid, "fd/1");
  t.stderr_pipe = proc.Link(t.init_pid, "fd/2");
  if (!absl::StartsWith(t.stdout_pipe, "pipe:") || !absl::StartsWith(t.stderr_pipe, "pipe:")) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " has its output on '", t.stdout_pipe,
                     "', not on the runtime's log pipes; "
                     "containers with a terminal (tty: true) are not supported"));
  }
  std::vector<pid_t> children = proc.Children(t.init_pid);
  if (use == ContainerUse::kCheckpoint) {
    if (children.size() != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, children.empty()
                    ? " has no job running under cryo-init (still starting, or "
                      "waiting for a restore)"
                    : absl::StrCat(" has ", children.size(), " processes under cryo-init (pids ",
                                   absl::StrJoin(children, ", "),
                                   "); cryo checkpoints one job tree: a process that "
                                   "daemonized out of it cannot be saved")));
    }
    t.job_pid = children[0];
  } else {
    if (t.restore_from.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " was not created to resume (its cryo-init has no ", CRYO_INIT_RESTORE_ENV,
          "); create it through the shim with the resume annotation"));
    }
    if (!children.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " already runs processes (pids ", absl::StrJoin(children, ", "),
                       "); a job can only be restored into a container that is waiting for it"));
    }
  }
  return t;
}

std::set<pid_t> NsPidsInUse(const proc::ProcReader& proc, pid_t init_pid) {
  std::set<pid_t> out;
  const std::string ns = proc.Link(init_pid, "ns/pid");
  if (ns.empty()) return out;
  for (pid_t p : proc.AllPids()) {
    if (proc.Link(p, "ns/pid") != ns) continue;
    pid_t n = proc.NsPid(p);
    if (n > 0) out.insert(n);
    for (pid_t t : NsThreadIds(proc, p)) out.insert(t);
  }
  return out;
}

pid_t HostPidInNamespace(const proc::ProcReader& proc, pid_t init_pid, pid_t ns_pid) {
  const std::string ns = proc.Link(init_pid, "ns/pid");
  if (ns.empty()) return 0;
  for (pid_t p : proc.AllPids()) {
    if (proc.NsPid(p) == ns_pid && proc.Link(p, "ns/pid") == ns) return p;
  }
  return 0;
}

std::vector<pid_t> NsThreadIds(const proc::ProcReader& proc, pid_t pid) {
  std::vector<pid_t> out;
  for (pid_t t : proc.Threads(pid)) {
    pid_t n = proc.NsPid(t);  // /proc/<tid>/status resolves for threads too
    if (n > 0) out.push_back(n);
  }
  return out;
}

}  // namespace cryo::container
