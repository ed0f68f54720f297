#pragma once

// The local store's job checkpoint records and the replacements' arrivals, one file each in the
// store's jobs/ (store/job_checkpoint.h says what they hold). LocalStore owns one and answers the
// CheckpointStore calls about jobs with it; the rest of the store reaches it through Hooks.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/store/job_checkpoint.h"
#include "daemon/store/manifest.h"
#include "lib/base/fd.h"

namespace cryo::store {

// The store's layout names the records use (a real directory each, never a link).
inline constexpr char kJobsDir[] = "jobs";
inline constexpr char kTrashDir[] = ".trash";
// A record being written: "<kJobTempPrefix><node>+<random>", renamed to its name when whole.
inline constexpr char kJobTempPrefix[] = ".commit+";

class JobRecords {
 public:
  struct Hooks {
    std::string root;  // the store's root
    std::string node;  // this node's name as ids take it
    bool fsync = true;
    std::function<absl::Status()> ready;  // the store is there and still the one opened
    // A directory of the layout, opened beneath the root without following links.
    std::function<absl::StatusOr<UniqueFd>(const char* dir)> open;
    std::function<absl::StatusOr<Manifest>(const std::string& id)> part;  // a published manifest
    std::function<absl::Status(const std::string& id)> delete_part;
  };
  explicit JobRecords(Hooks h) : h_(std::move(h)) {}

  // The commit: every part published as the record names it, then the record renamed into place
  // whole and never over another (ALREADY_EXISTS).
  absl::Status Commit(const JobCheckpoint& jc);
  absl::StatusOr<JobCheckpoint> Get(const std::string& ns, const std::string& job,
                                    const std::string& id);
  // Newest first.
  absl::StatusOr<std::vector<JobCheckpoint>> List(const std::string& ns, const std::string& job);
  // The record first (to the trash), then its parts.
  absl::Status Delete(const std::string& ns, const std::string& job, const std::string& id);
  // A later arrival of the same member replaces it.
  absl::Status MarkArrival(const std::string& ns, const std::string& job, const JobArrival& a);
  absl::Status RemoveArrival(const std::string& ns, const std::string& job,
                             const std::string& member);
  absl::StatusOr<std::vector<JobArrival>> Arrivals(const std::string& ns, const std::string& job);

 private:
  std::string jobs() const;
  // `text` written to a temporary file in jobs/ and renamed to `name`: it appears whole or not at
  // all. `commit`: it never replaces another (ALREADY_EXISTS), and the file and the directory
  // are fsynced when the store is; otherwise it replaces whatever had its name.
  absl::Status WriteWhole(const std::string& name, const std::string& text, bool commit);
  absl::StatusOr<JobCheckpoint> ReadJobCheckpoint(const std::string& name, const std::string& ns,
                                                  const std::string& job, const std::string& id);
  Hooks h_;
};

}  // namespace cryo::store
