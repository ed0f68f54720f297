#pragma once

// Operations in flight and their progress, so any number of clients can watch one. The
// operation runs to its end even if the client that started it goes away: a half-done
// checkpoint is worse than an unwatched one.

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
#include "cryo/v1/cryo.pb.h"

namespace cryo::service {

class Operation {
 public:
  Operation(std::string id, std::string kind, std::string target)
      : id_(std::move(id)), kind_(std::move(kind)), target_(std::move(target)),
        start_(absl::Now()) {}

  const std::string& id() const { return id_; }
  const std::string& kind() const { return kind_; }
  const std::string& target() const { return target_; }
  absl::Time start() const { return start_; }

  void Report(v1::Stage stage, uint64_t done, uint64_t total, std::string message = "");
  void Finish(absl::Status status, v1::OperationEvent final_event);

  // Blocks until there is news after `seen` (a sequence number), the operation ended, or the
  // deadline passed. Returns the new sequence number.
  uint64_t WaitForChange(uint64_t seen, absl::Time deadline);
  v1::Progress progress() const;
  // The last progress of every stage that ended since `*cursor` (advanced), then the current
  // one: a watcher that wakes late still sees where each stage ended.
  std::vector<v1::Progress> ProgressSince(size_t* cursor) const;
  v1::Stage stage() const;
  bool done() const;
  absl::Status status() const;
  v1::OperationEvent final_event() const;

 private:
  const std::string id_, kind_, target_;
  const absl::Time start_;
  mutable absl::Mutex mu_;
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  v1::Progress progress_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Progress> ended_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  v1::OperationEvent final_ ABSL_GUARDED_BY(mu_);
};

class OperationRegistry {
 public:
  // ALREADY_EXISTS if an operation with this id is known.
  absl::StatusOr<std::shared_ptr<Operation>> Start(const std::string& id, const std::string& kind,
                                                   const std::string& target);
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

}  // namespace cryo::service
