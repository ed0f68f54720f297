// kubectl cryo version: the plugin's and kubectl's versions.

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "clients/kubectl/context.h"
#include "clients/kubectl/errors.h"
#include "clients/kubectl/kubectl.h"
#include "clients/kubectl/objects.h"
#include "lib/base/flags.h"
#include "lib/base/human.h"
#include "lib/base/ids.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"

namespace cryo::kubectl {

// ---- version

absl::Status Version(Ctx& c, const std::vector<std::string>& pos) {
  if (!pos.empty()) return Failure(kExitUsage, "version takes no arguments");
  if (c.o.output == Output::kName) {
    return Failure(kExitUsage, "version prints text, json or yaml");
  }
  auto kubectl_version = c.kubectl.ClientVersion();
  if (!kubectl_version.ok()) {
    if (!c.Structured()) c.out << "kubectl cryo " << CRYO_VERSION << "\n";
    return WithContext(kubectl_version.status(), "asking kubectl for its version");
  }
  auto builtin = c.kubectl.HasBuiltin("checkpoint");
  if (c.Structured()) {
    json j = {{"kubectlCryo", {{"version", CRYO_VERSION}}},
              {"kubectl", {{"clientVersion", *kubectl_version}}}};
    if (builtin.ok()) j["kubectl"]["builtinCheckpoint"] = *builtin;
    c.Print(j);
    return absl::OkStatus();
  }
  c.out << "kubectl cryo " << CRYO_VERSION << "\n";
  c.out << "kubectl " << *kubectl_version << " (" << c.kubectl.options().kubectl << ")\n";
  if (builtin.ok()) {
    c.out << (*builtin ? "kubectl checkpoint: kubectl's built-in command, not this plugin: use "
                         "kubectl cryo\n"
                       : "kubectl checkpoint: not built into this kubectl; kubectl-checkpoint, "
                         "where installed, runs this plugin\n");
  }
  return absl::OkStatus();
}

// kubectl never runs a plugin whose name is a built-in command: once kubectl has its own
// "checkpoint" (KEP-5091), "kubectl checkpoint" runs that one. Someone running this binary as
// kubectl-checkpoint is told which name keeps working.

}  // namespace cryo::kubectl
