#pragma once

// kubectl cryo's commands: checkpoint a pod's container through kubelet, and list, inspect and
// restore cryo's checkpoints through cryod's HTTP API, which the API server proxies to.

#include <ostream>
#include <string>
#include <vector>

namespace cryo::kubectl {

// The plugin's name: kubectl runs it as "kubectl cryo".
inline constexpr char kPluginName[] = "kubectl-cryo";
// Its second name, for "kubectl checkpoint POD", usable while kubectl has no built-in command
// of that name (kubectl never runs a plugin that a built-in shadows).
inline constexpr char kLegacyPluginName[] = "kubectl-checkpoint";

// Runs the plugin on its arguments (what follows "kubectl cryo"); `invoked_as` is the base
// name it was run by (kLegacyPluginName takes "POD" for "checkpoint POD"). Returns the exit code
// (errors.h). Output goes to `out`, errors, warnings and kubectl's -v log to `err`.
int RunCli(const std::vector<std::string>& args, const std::string& invoked_as, std::ostream& out,
           std::ostream& err);

}  // namespace cryo::kubectl
