#pragma once

// A job checkpoint (issue 37): one checkpoint of every member of a job that spans pods and
// nodes, taken at one cut. Each member's part is an ordinary checkpoint of the store, labelled
// with the job checkpoint's id; the job checkpoint exists only once its record (this) is
// written, last, by an atomic rename in the shared store. A part whose record was never written
// is never restored and is collected. The record names each part with the digest of its
// manifest, so a part replaced after the commit does not pass for the one committed.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/store/manifest.h"

namespace cryo::store {

inline constexpr char kJobCheckpointFormat[] = "cryo.job-checkpoint/v1";
// Bound on a record's size (it lists at most contract::kMaxJobMembers members).
inline constexpr size_t kMaxJobCheckpointBytes = 4u << 20;

struct JobCheckpointMember {
  std::string member;           // the member's name (lib/contract/job.h), unique in the record
  std::string checkpoint_id;    // its part: a checkpoint of the store
  std::string node;             // where the part was taken
  std::string manifest_digest;  // ManifestDigest of the part's manifest
};

struct JobCheckpoint {
  std::string id;  // a checkpoint id (lib/base/ids.h), unique among the job's records
  std::string namespace_;
  std::string job;
  std::string created_at;                    // RFC 3339, UTC
  std::vector<JobCheckpointMember> members;  // one per member, as many as the job has
  // The cut: how long each step across the members took, and how far apart their freezes were.
  std::map<std::string, uint64_t> cut_ms;
  // "hmac-sha256:<hex>" over everything above (store/signature.h); empty: unsigned.
  std::string signature;
};

// "sha256:<hex>" of the manifest as the store serializes it (ManifestToJson).
std::string ManifestDigest(const Manifest& m);

std::string JobCheckpointToJson(const JobCheckpoint& jc);
// INVALID_ARGUMENT for anything malformed: a missing field, a name that is not a Kubernetes
// name, an id that is not a checkpoint id, a member listed twice, a part listed twice.
// FAILED_PRECONDITION for a newer format. Never throws.
absl::StatusOr<JobCheckpoint> ParseJobCheckpoint(absl::string_view text);

// The record's file name in the store: "<namespace>+<job>+<id>.json" ('+' is in none of them).
std::string JobCheckpointFileName(const std::string& ns, const std::string& job,
                                  const std::string& id);

// A member's replacement that is ready to resume a job checkpoint (its container waits): the
// members restore once every member of that job checkpoint has arrived (Engine's restore step
// `job_gather`). Kept in the shared store, one per member of a job, overwritten by each arrival.
struct JobArrival {
  std::string member;
  std::string job_checkpoint;  // the id its replacement resumes
  std::string node;
  absl::Time at;  // the arriving node's clock
  // The replacement pod's own addresses (what the members' connections are rewritten to).
  std::vector<std::string> pod_ips;
  // Written again once the member is restored (the members hold their connections until all
  // are) or has failed (the others do not wait for it); removed once every member is restored,
  // so that a later resume of the same job checkpoint meets only its own replacements.
  enum class State { kArrived, kRestored, kFailed };
  State state = State::kArrived;
};
std::string JobArrivalToJson(const JobArrival& a);
// INVALID_ARGUMENT for anything malformed. Never throws.
absl::StatusOr<JobArrival> ParseJobArrival(absl::string_view text);
// "<namespace>+<job>@arrival@<member>": '@' is in no Kubernetes name, so no record's name.
std::string JobArrivalFileName(const std::string& ns, const std::string& job,
                               const std::string& member);
inline constexpr char kJobArrivalInfix[] = "@arrival@";

}  // namespace cryo::store
