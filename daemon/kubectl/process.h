#pragma once

// Running a helper program (kubectl) with a given stdin and collecting its stdout and stderr.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cryo::kubectl {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal number when killed by a signal
  std::string out;
  std::string err;
};

// Runs argv[0] (looked up in PATH) with `input` as its stdin. `env` entries ("K=V") are added
// to this process's environment or replace a variable there. NOT_FOUND when the program cannot
// be executed at all.
absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::string& input,
                                         const std::vector<std::string>& env = {});

// The full path of an executable found in PATH, or "" (a name with a '/' is checked as is).
std::string FindInPath(const std::string& name);

}  // namespace cryo::kubectl
