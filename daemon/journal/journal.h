#pragma once

// The job journal: one small JSON file per operation in flight, replaced atomically at every
// state change and removed when the operation ends. After a crash or restart cryod reads it to
// finish or undo what was in flight (see Engine::Recover).

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace cryo::journal {

struct Task {
  int pid = 0;
  uint64_t start_time = 0;  // tells the task from a later process that reused its pid
};

struct Entry {
  std::string op_id;
  std::string kind;  // "checkpoint" | "restore"
  std::string checkpoint_id;
  // checkpoint: "started" -> "dumping" -> "dumped" -> "published"; restore: "restoring"
  std::string state;
  std::vector<Task> tasks;
  int criu_pid = 0;
  uint64_t criu_start_time = 0;
  std::string staging_dir;
  bool leave_running = false;
  bool tcp_established = false;
  nlohmann::json gpu;  // GPU processes locked or checkpointed, for rollback
  int container_init_pid = 0;  // container mode: host pid of the container's cryo-init
  std::string started_at;
};

nlohmann::json EntryToJson(const Entry& e);
absl::StatusOr<Entry> EntryFromJson(const nlohmann::json& j);

class Journal {
 public:
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir);
  absl::Status Put(const Entry& e);
  absl::Status Remove(const std::string& op_id);
  // Every entry left behind; unreadable files are reported and skipped.
  absl::StatusOr<std::vector<Entry>> LoadAll();
  const std::string& dir() const { return dir_; }

 private:
  explicit Journal(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(const std::string& op_id) const;
  std::string dir_;
};

}  // namespace cryo::journal
