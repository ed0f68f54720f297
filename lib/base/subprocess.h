#pragma once

// Starting and waiting for helper programs (CRIU). Children get their own process group and no
// parent-death signal: a CRIU that is dumping must be allowed to finish even if cryod dies,
// because killing it while its parasite code runs inside the target could corrupt the job.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cryo {

struct SpawnOptions {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V" added to (or replacing in) cryod's environment
  std::string stdout_path;       // empty: /dev/null
  std::string stderr_path;       // empty: same as stdout
  std::string cwd;
};

absl::StatusOr<pid_t> Spawn(const SpawnOptions& opts);

struct ExitInfo {
  bool exited = false;  // false: killed by signal
  int code = 0;         // exit code or signal number
  std::string Describe() const;
};

// Waits for a child of this process.
absl::StatusOr<ExitInfo> WaitChild(pid_t pid);

// Runs to completion and captures stdout+stderr (small outputs only: `criu --version`).
struct RunResult {
  ExitInfo exit;
  std::string output;
};
absl::StatusOr<RunResult> RunCapture(const std::vector<std::string>& argv,
                                     absl::Duration timeout = absl::Seconds(30));

// Finds an executable by name in PATH (and the sbin dirs, which a daemon's PATH may lack).
std::string FindExecutable(const std::string& name);

}  // namespace cryo
