#pragma once

// manifest.json: the record of one checkpoint, written last. Its presence is what makes a
// checkpoint visible; every image file is listed with its size and checksum. Manifests are read
// from a store other nodes write, so parsing is total: a malformed one is an error, never a
// crash, and every section is checked when parsed.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/criu/credentials.h"
#include "daemon/criu/options.h"
#include "daemon/records/gpu_process.h"
#include "nlohmann/json.hpp"

namespace cryo::store {

inline constexpr char kManifestFormat[] = "cryo.checkpoint/v1";
inline constexpr char kManifestName[] = "manifest.json";
// Beside the manifest once a restore found a file damaged; holds the reason.
inline constexpr char kDamagedName[] = "damaged";
inline constexpr char kImagesDir[] = "images";
// Bounds on what a manifest may hold (it is read on every node that lists the store).
inline constexpr size_t kMaxManifestBytes = 16u << 20;
inline constexpr int kMaxManifestDepth = 32;
// Per field of what every list shows (labels and workload: lib/base/limits.h).
inline constexpr size_t kMaxManifestTasks = 1 << 16;
inline constexpr size_t kMaxManifestStages = 64;
// Fast-path processes of one checkpoint (each is one process of it), and files of each.
inline constexpr size_t kMaxManifestFastpath = 1024;
inline constexpr int kMaxManifestFastpathFiles = 64;
inline constexpr size_t kMaxManifestField = 4096;

enum class CheckpointKind { kProcess, kContainer };
const char* KindName(CheckpointKind k);
std::optional<CheckpointKind> ParseKind(const std::string& s);

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory
  uint64_t size = 0;
  std::string checksum;
  // Files cryod wrote itself (the GPU data of a drain into its memory): each checksum chunk's
  // XXH3-128 digest (hex), in order, so that the workload's next checkpoint can refer to the
  // chunks that did not change. Empty for other files.
  std::vector<std::string> chunks = {};
  // Chunks this file does not hold (a hole there) because the same file of another checkpoint
  // holds them, at the same offsets: checkpoint id -> chunk indices. Always the checkpoint that
  // holds the bytes, never one that refers on. Read through on restore (daemon/gpu/host_copy.h).
  std::map<std::string, std::vector<uint32_t>> refs = {};

  // The bytes of the chunks in `refs`.
  uint64_t ReferencedBytes() const;
};

// How many checksum chunks a file of `size` bytes has (an empty file has one).
uint64_t ChunkCount(uint64_t size);

// Container mode's facts: where the job ran and how its output was wired.
struct ContainerSection {
  std::string id;
  std::string name;
  std::string image;      // as asked for
  std::string image_ref;  // what it resolved to
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::string runtime;
  int64_t created_at_ns = 0;
  // The pipes the job's output went to; a restore points them at the new container's.
  std::string stdout_pipe;
  std::string stderr_pipe;
  std::string rootfs_diff;
  std::string deleted_files;
};

// A checkpoint that is one member's part of a job checkpoint (store/job_checkpoint.h): it is
// restored only as part of that job checkpoint, once committed, and collected when never.
struct JobPart {
  std::string namespace_;
  std::string job;
  std::string job_checkpoint;  // the job checkpoint's id
  std::string member;
  // The pod's own addresses at the cut (a container member): its replacement has others, and
  // the connections between the members are rewritten from these to theirs.
  std::vector<std::string> pod_ips;
  // The addresses of the members' earlier pods, which the job's memory may still hold, to the
  // members' addresses at the cut (criu::KeepJobAddresses): empty until the job has moved.
  std::map<std::string, std::string> former_addresses;
};

struct Manifest {
  std::string id;
  std::string workload;
  std::string node;
  std::string created_at;  // RFC 3339, UTC
  CheckpointKind kind = CheckpointKind::kProcess;
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
  // Options the checkpoint was taken with (the restore repeats those CRIU needs).
  bool leave_running = false;
  criu::JobOptions options;
  std::map<std::string, std::string> labels;
  std::map<std::string, uint64_t> stage_ms;
  std::string checksum_algorithm;
  std::vector<ManifestFile> files;
  // GPU plugins' sections by plugin name (each plugin reads its own); null without GPU state.
  nlohmann::json gpu;
  std::vector<gpu::GpuProcess> gpu_processes;
  // Processes whose device memory the GPU fast path moved (its files are in `files`).
  std::vector<gpu::FastpathProcess> gpu_fastpath;
  std::optional<ContainerSection> container;  // container mode only
  // The most the job's threads held when it was checkpointed (read from /proc by the node that
  // took it): a process-mode restore runs nothing above it. Absent in older manifests.
  std::optional<criu::CredentialCeiling> credentials;
  std::optional<JobPart> job;  // a job checkpoint's part only
  // "hmac-sha256:<hex>" over everything above (store/signature.h); empty: unsigned.
  std::string signature;
  // Store state, not in manifest.json: why a restore refused the checkpoint (empty: none did).
  std::string damaged;

  uint64_t TotalBytes() const;
  // What other checkpoints hold for this one (ManifestFile::refs), and what it wrote itself.
  uint64_t ReferencedBytes() const;
  uint64_t WrittenBytes() const { return TotalBytes() - ReferencedBytes(); }
  // The checkpoints this one refers to.
  std::set<std::string> References() const;
};

std::string ManifestToJson(const Manifest& m);
// INVALID_ARGUMENT for malformed JSON, a missing or mistyped field, a section that does not fit
// its kind, or an unsafe file path; FAILED_PRECONDITION for a format this cryod does not know
// (written by a newer one). Never throws.
absl::StatusOr<Manifest> ParseManifest(absl::string_view json);

// A relative path inside the checkpoint: no "..", no absolute path, no empty component.
bool SafeRelativePath(absl::string_view p);

}  // namespace cryo::store
