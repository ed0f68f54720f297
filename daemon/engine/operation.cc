#include "daemon/engine/operation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cryo::engine {

std::string StageName(Stage s) { return contract::NameOf(s); }

void Operation::Report(Stage stage, uint64_t done, uint64_t total, std::string message) {
  absl::MutexLock l(&mu_);
  if (progress_.stage != Stage::kUnspecified && progress_.stage != stage) {
    ended_.push_back(progress_);
  }
  progress_.stage = stage;
  progress_.bytes_done = done;
  progress_.bytes_total = total;
  progress_.elapsed_ms = absl::ToInt64Milliseconds(absl::Now() - start_);
  progress_.message = std::move(message);
  ++seq_;
}

void Operation::Finish(absl::Status status, OperationResult result) {
  absl::MutexLock l(&mu_);
  done_ = true;
  status_ = std::move(status);
  result_ = std::move(result);
  ++seq_;
}

void Operation::Cancel(std::string why) {
  {
    absl::MutexLock l(&mu_);
    if (cancel_reason_.empty()) cancel_reason_ = std::move(why);
    ++seq_;
  }
  cancelled_ = true;
}

std::string Operation::cancel_reason() const {
  absl::MutexLock l(&mu_);
  return cancel_reason_;
}

uint64_t Operation::WaitForChange(uint64_t seen, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return seq_ != seen || done_; };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  return seq_;
}

Progress Operation::progress() const {
  absl::MutexLock l(&mu_);
  return progress_;
}

std::vector<Progress> Operation::ProgressSince(size_t* cursor) const {
  absl::MutexLock l(&mu_);
  std::vector<Progress> out;
  for (size_t i = *cursor; i < ended_.size(); ++i) out.push_back(ended_[i]);
  *cursor = ended_.size();
  if (progress_.stage != Stage::kUnspecified) out.push_back(progress_);
  return out;
}

Stage Operation::stage() const {
  absl::MutexLock l(&mu_);
  return progress_.stage;
}

bool Operation::done() const {
  absl::MutexLock l(&mu_);
  return done_;
}

absl::Status Operation::status() const {
  absl::MutexLock l(&mu_);
  return status_;
}

OperationResult Operation::result() const {
  absl::MutexLock l(&mu_);
  return result_;
}

absl::StatusOr<std::shared_ptr<Operation>> OperationRegistry::Start(const std::string& id,
                                                                    const std::string& kind,
                                                                    const std::string& target,
                                                                    Priority priority) {
  absl::MutexLock l(&mu_);
  // Drop retired operations older than five minutes.
  const absl::Time cutoff = absl::Now() - absl::Minutes(5);
  while (!retired_.empty() && retired_.front().first < cutoff) {
    auto it = ops_.find(retired_.front().second);
    if (it != ops_.end() && it->second->done()) ops_.erase(it);
    retired_.pop_front();
  }
  if (ops_.count(id)) {
    return absl::AlreadyExistsError(absl::StrCat("operation '", id, "' already exists"));
  }
  auto op = std::make_shared<Operation>(id, kind, target, priority);
  ops_[id] = op;
  return op;
}

std::shared_ptr<Operation> OperationRegistry::Find(const std::string& id) {
  absl::MutexLock l(&mu_);
  auto it = ops_.find(id);
  return it == ops_.end() ? nullptr : it->second;
}

void OperationRegistry::Retire(const std::string& id) {
  absl::MutexLock l(&mu_);
  retired_.emplace_back(absl::Now(), id);
}

std::vector<std::shared_ptr<Operation>> OperationRegistry::Running() {
  absl::MutexLock l(&mu_);
  std::vector<std::shared_ptr<Operation>> out;
  for (const auto& [id, op] : ops_) {
    if (!op->done()) out.push_back(op);
  }
  return out;
}

size_t OperationRegistry::running_count() { return Running().size(); }

}  // namespace cryo::engine
