#pragma once

// Operations in flight and their progress, so any number of clients can watch one. The
// operation runs to its end even if the client that started it goes away: a half-done
// checkpoint is worse than an unwatched one. A client may cancel one (or a caller's deadline
// pass): the operation then rolls back at its next safe point, unless it is past its commit.

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/engine/types.h"

namespace cryo::engine {

// Operation ids of the periodic schedule's checkpoints begin so, for people reading them; what
// they yield to is their Priority, not their id.
inline constexpr char kPeriodicOpPrefix[] = "periodic-";

// Who gives way to whom on one target (OperationRunner::Start): a stop outranks the background.
enum class Priority {
  kBackground,  // the periodic schedule's checkpoints: cancelled by a stop of their target
  kNormal,      // a client's call
  kStop,        // a stop's checkpoint (the plan at a stop): the background on its target yields
};

struct Progress {
  Stage stage = Stage::kUnspecified;
  // Bytes done and expected in this stage (expected 0 when unknown).
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  uint64_t elapsed_ms = 0;  // since the operation started
  std::string message;
};

class Operation {
 public:
  Operation(std::string id, std::string kind, std::string target,
            Priority priority = Priority::kNormal)
      : id_(std::move(id)),
        kind_(std::move(kind)),
        target_(std::move(target)),
        priority_(priority),
        start_(absl::Now()) {}

  const std::string& id() const { return id_; }
  const std::string& kind() const { return kind_; }
  const std::string& target() const { return target_; }
  Priority priority() const { return priority_; }
  absl::Time start() const { return start_; }

  void Report(Stage stage, uint64_t done, uint64_t total, std::string message = "");
  void Finish(absl::Status status, OperationResult result);

  // Asks the operation to stop: it rolls back at its next safe point (before its commit).
  void Cancel(std::string why);
  bool cancelled() const { return cancelled_.load(); }
  std::string cancel_reason() const;

  // Blocks until there is news after `seen` (a sequence number), the operation ended, or the
  // deadline passed. Returns the new sequence number.
  uint64_t WaitForChange(uint64_t seen, absl::Time deadline);
  Progress progress() const;
  // The last progress of every stage that ended since `*cursor` (advanced), then the current
  // one: a watcher that wakes late still sees where each stage ended.
  std::vector<Progress> ProgressSince(size_t* cursor) const;
  Stage stage() const;
  bool done() const;
  absl::Status status() const;
  OperationResult result() const;

 private:
  const std::string id_, kind_, target_;
  const Priority priority_;
  const absl::Time start_;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  Progress progress_ ABSL_GUARDED_BY(mu_);
  std::vector<Progress> ended_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  OperationResult result_ ABSL_GUARDED_BY(mu_);
};

class OperationRegistry {
 public:
  // ALREADY_EXISTS if an operation with this id is known.
  absl::StatusOr<std::shared_ptr<Operation>> Start(const std::string& id, const std::string& kind,
                                                   const std::string& target,
                                                   Priority priority = Priority::kNormal);
  std::shared_ptr<Operation> Find(const std::string& id);
  // Ended operations stay findable for a while so late watchers get the result.
  void Retire(const std::string& id);
  std::vector<std::shared_ptr<Operation>> Running();
  size_t running_count();

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Operation>> ops_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<absl::Time, std::string>> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cryo::engine
