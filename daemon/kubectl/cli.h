#pragma once

// kubectl-checkpoint's commands: checkpoint a pod's container through kubelet, and list,
// inspect and restore cryo's checkpoints through cryod's HTTP API on the cryo pods.

#include <ostream>
#include <string>
#include <vector>

namespace cryo::kubectl {

// Runs the plugin on its arguments (what follows "kubectl checkpoint"); returns the exit code
// (errors.h). Output goes to `out`, errors and warnings to `err`.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace cryo::kubectl
