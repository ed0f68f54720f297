// The shim's metrics, written to a file in Prometheus' text format every interval (a temp file
// renamed over it, so a reader never sees half of one), for whoever cannot reach the shim's
// HTTP endpoint on the host's loopback: cryod, in its pod, serves the file at /metrics/shim.
// The file is removed when the writer stops: a file that stops changing means a shim that
// stopped without saying so.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/registry.h"

namespace cryo::shim {

class MetricsFileWriter {
 public:
  // Writes once (an error here is the caller's: a path that cannot be written), then every
  // `interval` on a thread of its own.
  static absl::StatusOr<std::unique_ptr<MetricsFileWriter>> Start(
      std::shared_ptr<prometheus::Registry> registry, std::string path, absl::Duration interval);
  // Stops the thread and removes the file.
  ~MetricsFileWriter();

  absl::Status WriteOnce();

 private:
  MetricsFileWriter(std::shared_ptr<prometheus::Registry> registry, std::string path,
                    absl::Duration interval)
      : registry_(std::move(registry)), path_(std::move(path)), interval_(interval) {}
  void Loop();

  std::shared_ptr<prometheus::Registry> registry_;
  const std::string path_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cryo::shim
