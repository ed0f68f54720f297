#pragma once

// CRIU, behind an interface: CriuExec runs the real binary; tests of the flows around it use a
// fake. Each call writes CRIU's own log under work_dir, and a failed call's status quotes the
// log's last error and names the file.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/criu/options.h"

namespace cryo::criu {

// Container mode: CRIU runs inside the container whose init is `init_pid`, through cryo-nsexec
// (see daemon/nsexec). It then records no namespaces and recreates the processes wherever it
// runs: in the same container for a dump, in the new one for a restore.
struct InContainer {
  pid_t init_pid = 0;
  std::string nsexec;  // path of cryo-nsexec
  // Host paths opened as fixed descriptors in CRIU (numbers >= 10), e.g. the new container's
  // stdout pipe for --inherit-fd.
  std::vector<std::pair<int, std::string>> fds;
  // Restore: the highest pid or tid of the checkpoint. CRIU's own helper processes are forked
  // above it, so they cannot take a pid the restored tree needs.
  pid_t last_pid = 0;
};

struct DumpOptions {
  pid_t pid = 0;
  std::string images_dir;
  std::string work_dir;  // logs and CRIU's scratch files
  // After the dump the tree is left running (CRIU resumes it) or left stopped (cryod resumes or
  // kills it once it knows whether the checkpoint was published).
  bool leave_running = false;
  JobOptions job;
  // From the GPU plugins (never from a caller).
  std::vector<std::string> extra_args;
  std::vector<std::string> env;
  std::optional<InContainer> in_container;
};

struct RestoreOptions {
  std::string images_dir;
  std::string work_dir;
  JobOptions job;  // as the checkpoint was dumped
  // The job's connections are held by cryod (JobOptions::RestoreArgs).
  bool network_lock_held = false;
  std::vector<std::string> extra_args;
  std::vector<std::string> env;
  // Restores into this container (joining its cgroups; CRIU itself at a far pid so the job's
  // pids stay free). The returned root pid is then the one in the container's pid namespace.
  std::optional<InContainer> in_container;
  // A restore that has not finished by `deadline`, or when `stop` says so (asked every 20 ms),
  // is ended: CRIU and every process it had started are killed, nothing half-restored is left
  // (DEADLINE_EXCEEDED / CANCELLED).
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> stop;
};

class Criu {
 public:
  virtual ~Criu() = default;
  // `started` is called with CRIU's pid as soon as it runs, so the journal can record it.
  virtual absl::Status Dump(const DumpOptions& o, const std::function<void(pid_t)>& started) = 0;
  // Restores detached; returns the root pid of the restored tree.
  virtual absl::StatusOr<pid_t> Restore(const RestoreOptions& o,
                                        const std::function<void(pid_t)>& started) = 0;
  virtual std::string version() const = 0;
  virtual std::string path() const = 0;
  // Output of `criu check` when it failed; empty when it passed.
  virtual std::string check_error() const = 0;
  // Whether a checkpoint could run CRIU now: `criu check` passed at start and (for the real
  // binary) it is still there and executable. FAILED_PRECONDITION saying why not.
  virtual absl::Status CheckUsable() const {
    if (check_error().empty()) return absl::OkStatus();
    return absl::FailedPreconditionError("criu check failed: " + check_error());
  }
};

struct CriuConfig {
  std::string path;  // empty: search PATH and the sbin dirs
  int log_level = 4;
  // Whether CRIU may stop tasks with x86 hardware breakpoints when it removes its parasite
  // code. Off: CRIU traps on system calls instead (its CRIU_FAULT=130 mode), which costs
  // microseconds. Some VMs never deliver the breakpoint and CRIU then waits forever with the
  // job half-seized (seen on Firecracker guests, kernel 6.18, 2026-11-23).
  bool hw_breakpoints = false;
};

// Finds CRIU, reads its version and runs `criu check`. FAILED_PRECONDITION when it is missing
// or older than 4.1 (3.17 cannot handle kernels >= 6.13).
absl::StatusOr<std::unique_ptr<Criu>> CreateCriuExec(const CriuConfig& cfg);

// Orders dotted version numbers ("4.1.1" < "4.2"; a missing part counts as 0): <0, 0 or >0.
// nullopt when either is not of that form.
std::optional<int> CompareVersions(absl::string_view a, absl::string_view b);

// Turns a CRIU log into a status a person can act on (exposed for tests). Where CRIU says an
// option would have helped, FAILED_PRECONDITION naming cryo's flag, config key and annotation.
absl::Status StatusFromLog(absl::string_view action, absl::string_view log,
                           absl::string_view log_path, absl::string_view exit_desc);

}  // namespace cryo::criu
