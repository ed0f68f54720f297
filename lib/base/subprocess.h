#pragma once

// The one way cryo starts other programs (CRIU, nft, cryo-nsexec, kubectl; the test harnesses'
// daemons). Spawn starts a child and returns; Run waits for it and collects its output.
//
// By default a child gets its own process group and no parent-death signal: a CRIU that is
// dumping must be allowed to finish even if cryod dies, because killing it while its parasite
// code runs inside the target could corrupt the job.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cryo {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up like FindExecutable
  std::vector<std::string> env;   // "K=V" added to (or replacing in) this process's environment
  std::string stdout_path;        // appended to; empty: /dev/null
  std::string stderr_path;        // empty: same as stdout
  std::string cwd;
  // Descriptors used instead of the paths above when >= 0 (the caller keeps and closes them).
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // A process group of its own (signals to cryod's group do not reach it).
  bool own_process_group = true;
  // A session of its own (a daemon started by a test).
  bool new_session = false;
  // SIGKILL when this process dies (helpers of tests, never CRIU).
  bool die_with_parent = false;
};

// NOT_FOUND when the program does not exist, PERMISSION_DENIED when it cannot be executed.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& opts);

struct ExitInfo {
  bool exited = false;  // false: killed by signal
  int code = 0;         // exit code or signal number
  std::string Describe() const;
  // The shell's convention: the exit code, or 128 + the signal.
  int ShellCode() const { return exited ? code : 128 + code; }
};

// Waits for a child of this process.
absl::StatusOr<ExitInfo> WaitChild(pid_t pid);

struct RunOptions {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string input;  // the child's stdin
  // DEADLINE_EXCEEDED (the child's group killed) when it runs longer.
  absl::Duration timeout = absl::InfiniteDuration();
  bool merge_stderr = false;  // stderr into `out`
};
struct RunOutput {
  ExitInfo exit;
  std::string out;
  std::string err;
};
absl::StatusOr<RunOutput> Run(const RunOptions& opts);

// Runs to completion and captures stdout+stderr together (small outputs: `criu --version`).
struct RunResult {
  ExitInfo exit;
  std::string output;
};
absl::StatusOr<RunResult> RunCapture(const std::vector<std::string>& argv,
                                     absl::Duration timeout = absl::Seconds(30));

// Finds an executable regular file by name in PATH and the sbin dirs (which a daemon's PATH may
// lack); a name with a '/' is checked as is. Empty when there is none.
std::string FindExecutable(const std::string& name);

}  // namespace cryo
