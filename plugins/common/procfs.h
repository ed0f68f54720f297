#pragma once

// Reads the bits of /proc (and /sys) the plugins need. The root is configurable so unit tests
// point it at a temp dir tree instead of the real /proc.

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cryo::gpu {

absl::StatusOr<std::string> ReadFile(const std::string& path);
bool PathExists(const std::string& path);
// Names in a directory (no "." / ".."); empty when it cannot be read.
std::vector<std::string> ListDir(const std::string& path);
// "a [b] c" -> "b": the selected value of a sysfs choice file.
std::string SelectedChoice(absl::string_view text);

class ProcFs {
 public:
  explicit ProcFs(std::string root = "/proc") : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string PidPath(pid_t pid, absl::string_view rel) const;
  bool Exists(pid_t pid) const;
  // Targets of /proc/PID/fd/* symlinks (e.g. "/dev/nvidia0"); empty when unreadable.
  std::vector<std::string> FdTargets(pid_t pid) const;
  // Path names of /proc/PID/maps entries that map a file.
  std::vector<std::string> MappedPaths(pid_t pid) const;
  absl::StatusOr<std::map<std::string, std::string>> Environ(pid_t pid) const;

 private:
  std::string root_;
};

}  // namespace cryo::gpu
