// A Prometheus registry with what every cryo binary exports besides its own metrics: the
// standard process_* metrics of Prometheus' client libraries (read from /proc/self at each
// scrape) and cryo_build_info{component,version} at 1.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "prometheus/registry.h"

namespace cryo::metrics {

// `component`: "cryod", "cryo-cri-shim". Whoever calls Collect() (an exposer, a /metrics
// handler) gets the process metrics as of that moment.
std::shared_ptr<prometheus::Registry> NewRegistry(absl::string_view component,
                                                  absl::string_view version = CRYO_VERSION);

// What NewRegistry reads from /proc (exposed for tests): CPU seconds (user + system), resident
// bytes, virtual bytes, open descriptors, the descriptor limit, and the start time (Unix s).
struct ProcessStats {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
  double start_time_seconds = 0;
};
// From /proc/self/stat, /proc/self/fd, /proc/self/limits and /proc/stat's btime; a field that
// cannot be read stays 0.
ProcessStats ReadProcessStats(const std::string& proc_root = "/proc");

}  // namespace cryo::metrics
