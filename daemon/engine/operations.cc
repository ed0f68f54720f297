#include "daemon/engine/operations.h"

#include "absl/strings/str_cat.h"

namespace cryo::service {

void Operation::Report(v1::Stage stage, uint64_t done, uint64_t total, std::string message) {
  absl::MutexLock l(&mu_);
  if (progress_.stage() != v1::STAGE_UNSPECIFIED && progress_.stage() != stage) {
    ended_.push_back(progress_);
  }
  progress_.set_stage(stage);
  progress_.set_bytes_done(done);
  progress_.set_bytes_total(total);
  progress_.set_elapsed_ms(absl::ToInt64Milliseconds(absl::Now() - start_));
  progress_.set_message(std::move(message));
  ++seq_;
}

void Operation::Finish(absl::Status status, v1::OperationEvent final_event) {
  absl::MutexLock l(&mu_);
  done_ = true;
  status_ = std::move(status);
  final_ = std::move(final_event);
  final_.set_operation_id(id_);
  ++seq_;
}

uint64_t Operation::WaitForChange(uint64_t seen, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return seq_ != seen || done_; };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  return seq_;
}

v1::Progress Operation::progress() const {
  absl::MutexLock l(&mu_);
  return progress_;
}
std::vector<v1::Progress> Operation::ProgressSince(size_t* cursor) const {
  absl::MutexLock l(&mu_);
  std::vector<v1::Progress> out;
  for (size_t i = *cursor; i < ended_.size(); ++i) out.push_back(ended_[i]);
  *cursor = ended_.size();
  if (progress_.stage() != v1::STAGE_UNSPECIFIED) out.push_back(progress_);
  return out;
}
v1::Stage Operation::stage() const {
  absl::MutexLock l(&mu_);
  return progress_.stage();
}
bool Operation::done() const {
  absl::MutexLock l(&mu_);
  return done_;
}
absl::Status Operation::status() const {
  absl::MutexLock l(&mu_);
  return status_;
}
v1::OperationEvent Operation::final_event() const {
  absl::MutexLock l(&mu_);
  return final_;
}

absl::StatusOr<std::shared_ptr<Operation>> OperationRegistry::Start(const std::string& id,
                                                                    const std::string& kind,
                                                                    const std::string& target) {
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
  auto op = std::make_shared<Operation>(id, kind, target);
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

}  // namespace cryo::service
