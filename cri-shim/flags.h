// Command-line options of cryo-cri-shim.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/base/log.h"

namespace cryo::shim {

struct Options {
  // Unix socket the shim serves CRI on (what kubelet's --container-runtime-endpoint names).
  std::string listen = "/run/cryo/cri-shim.sock";
  // The real runtime: containerd or CRI-O, "unix:///path" or a plain path.
  std::string runtime_endpoint = "unix:///run/containerd/containerd.sock";
  // cryod's socket: checkpoints and restores of opted-in containers go through it.
  std::string cryod_socket = "/run/cryo/cryod.sock";
  // Prefix of the pod annotations that opt a pod in (see opt_in.h).
  std::string annotation_prefix = "cryo.dev";
  // Host path of the static cryo-init that is bind-mounted into opted-in containers.
  std::string init_path = "/usr/local/lib/cryo/cryo-init";
  std::string fastpath_library = "/usr/local/lib/cryo/libcryo_gpu_fastpath.so";
  // host:port for Prometheus metrics; empty disables them.
  std::string metrics_address = "127.0.0.1:9466";
  // The same metrics written to this file every metrics_file_interval_s (empty: none), for
  // whoever cannot reach the endpoint: cryod serves the file at /metrics/shim.
  std::string metrics_file;
  int metrics_file_interval_s = 10;
  LogLevel log_level = LogLevel::kInfo;
  // Exit code of a container stopped after its checkpoint (see lib/contract/cryo_init_protocol.h).
  int checkpointed_exit_code = 75;
  // Stops giving less grace than this are not checkpointed (kubelet never gives less than 2 s).
  int checkpoint_min_grace_s = 2;
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
