// Command-line options of cryo-cri-shim.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cri-shim/log.h"

namespace cryo::shim {

struct Options {
  // Unix socket the shim serves CRI on (what kubelet's --container-runtime-endpoint names).
  std::string listen = "/run/cryo/cri-shim.sock";
  // The real runtime: containerd or CRI-O, "unix:///path" or a plain path.
  std::string runtime_endpoint = "unix:///run/containerd/containerd.sock";
  // cryod's socket; used once checkpoint and restore are wired in.
  std::string cryod_socket = "/run/cryo/cryod.sock";
  // host:port for Prometheus metrics; empty disables them.
  std::string metrics_address = "127.0.0.1:9466";
  LogLevel log_level = LogLevel::kInfo;
  bool show_help = false;
};

// Accepts --name=value and --name value; dashes and underscores in names are equivalent.
absl::StatusOr<Options> ParseFlags(const std::vector<std::string>& args);

std::string UsageText();

// "unix:///x", "unix:/x" or "/x" -> "unix:///x"; anything else is refused (the shim only talks
// to local runtimes).
absl::StatusOr<std::string> NormalizeUnixEndpoint(absl::string_view endpoint);

// The filesystem path of a unix endpoint in any of the forms above.
absl::StatusOr<std::string> UnixEndpointPath(absl::string_view endpoint);

}  // namespace cryo::shim
