#pragma once

// manifest.json: the record of one checkpoint, written last. Its presence is what makes a
// checkpoint visible; every image file is listed with its size and checksum.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace cryo::store {

inline constexpr char kManifestFormat[] = "cryo.checkpoint/v1";
inline constexpr char kManifestName[] = "manifest.json";
// Beside the manifest once a restore found a file damaged; holds the reason.
inline constexpr char kDamagedName[] = "damaged";
inline constexpr char kImagesDir[] = "images";

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory
  uint64_t size = 0;
  std::string checksum;
};

struct Manifest {
  std::string id;
  std::string workload;
  std::string node;
  std::string created_at;  // RFC 3339, UTC
  std::string kind = "process";
  // The tree as dumped: the restore needs all of these ids free.
  int root_pid = 0;
  std::vector<int> pids;
  std::vector<int> tids;
  std::string command;
  std::vector<std::string> cmdline;
  // Facts of the source node a restore checks against.
  std::string kernel;
  std::string arch;
  std::string criu_version;
  std::string cryo_version;
  // Options the checkpoint was taken with (the restore repeats some of them).
  bool leave_running = false;
  bool tcp_established = false;
  bool shell_job = false;
  std::map<std::string, std::string> labels;
  std::map<std::string, uint64_t> stage_ms;
  std::string checksum_algorithm;
  std::vector<ManifestFile> files;
  nlohmann::json gpu;        // GPU plugins' facts by plugin name; null when the job used no GPU
  nlohmann::json gpu_processes;  // [{pid, plugin, facts}] of the GPU processes, for the restore
  nlohmann::json container;  // container mode's facts; null in process mode
  // Store state, not in manifest.json: why a restore refused the checkpoint (empty: none did).
  std::string damaged;

  uint64_t TotalBytes() const;
};

std::string ManifestToJson(const Manifest& m);
// INVALID_ARGUMENT for malformed JSON or unsafe file paths; FAILED_PRECONDITION for a format
// this cryod does not know (written by a newer one).
absl::StatusOr<Manifest> ParseManifest(absl::string_view json);

// A relative path inside the checkpoint: no "..", no absolute path, no empty component.
bool SafeRelativePath(absl::string_view p);

}  // namespace cryo::store
