#include "daemon/engine/operation_runner.h"

#include <exception>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"

namespace cryo::engine {

std::string CodeName(absl::StatusCode code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

OperationRunner::~OperationRunner() { Shutdown(absl::ZeroDuration()); }

void OperationRunner::JoinFinished() {
  std::vector<std::thread> done;
  {
    absl::MutexLock l(&mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->finished) {
        done.push_back(std::move(it->thread));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& t : done) t.join();
}

absl::StatusOr<std::shared_ptr<Operation>> OperationRunner::Start(const std::string& requested_id,
                                                                  const std::string& kind,
                                                                  const std::string& target,
                                                                  Body body, StartOptions opt) {
  JoinFinished();
  if (opt.priority == Priority::kStop) YieldBackground(target, opt.yield_by);
  const std::string id =
      requested_id.empty() ? absl::StrCat(kind.substr(0, 2), "-", RandomHex(8)) : requested_id;
  if (absl::Status s = ValidateCheckpointId(id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("operation id: ", s.message()));
  }
  absl::MutexLock l(&mu_);
  if (shutting_down_) {
    return absl::UnavailableError("cryod is shutting down; it takes no new operations");
  }
  auto op = ops_->Start(id, kind, target, opt.priority);
  if (!op.ok()) return op.status();
  std::shared_ptr<Operation> shared = *op;
  ++running_;
  if (metrics_) metrics_->SetInFlight(running_);
  workers_.push_back(Worker{shared, std::thread(), false});
  Worker* w = &workers_.back();
  w->thread = std::thread([this, w, shared, body = std::move(body), kind] {
    absl::StatusOr<OperationResult> r = absl::InternalError("operation did not run");
    try {
      r = body(*shared);
    } catch (const std::exception& e) {
      r = absl::InternalError(absl::StrCat(kind, " ", shared->id(), " threw: ", e.what()));
    } catch (...) {
      r = absl::InternalError(absl::StrCat(kind, " ", shared->id(), " threw"));
    }
    absl::Status st = r.ok() ? absl::OkStatus() : r.status();
    if (!st.ok()) CRYO_LOG(Warning) << kind << " " << shared->id() << " failed: " << st;
    if (metrics_) metrics_->CountOperation(kind, st.ok() ? "ok" : CodeName(st.code()));
    shared->Finish(st, r.ok() ? *std::move(r) : OperationResult());
    ops_->Retire(shared->id());
    absl::MutexLock l(&mu_);
    --running_;
    if (metrics_) metrics_->SetInFlight(running_);
    w->finished = true;
  });
  return shared;
}

void OperationRunner::YieldBackground(const std::string& target, absl::Time deadline) {
  for (const auto& op : ops_->Running()) {
    if (op->target() != target || op->priority() != Priority::kBackground) continue;
    op->Cancel("the container is being stopped");
    uint64_t seen = 0;
    while (!op->done() && absl::Now() < deadline) {
      seen = op->WaitForChange(seen, std::min(deadline, absl::Now() + absl::Seconds(1)));
    }
    CRYO_LOG(Info) << op->kind() << " " << op->id() << " of " << target
                   << " gave way to its stop: " << op->status();
  }
}

void OperationRunner::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock l(&mu_);
    shutting_down_ = true;
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return running_ == 0; };
    if (running_ > 0 && grace > absl::ZeroDuration()) {
      CRYO_LOG(Info) << "waiting up to " << absl::FormatDuration(grace) << " for " << running_
                     << " running operations";
      mu_.AwaitWithTimeout(absl::Condition(&idle), grace);
    }
    if (running_ > 0) {
      CRYO_LOG(Warning) << running_
                        << " operations still running: cancelling them (each rolls back at its "
                           "next safe point, or finishes if already published)";
      for (auto& w : workers_) {
        if (!w.finished) w.op->Cancel("cryod is shutting down");
      }
    }
  }
  // Joined outside the lock: the threads take it to say they finished.
  std::list<Worker> all;
  {
    absl::MutexLock l(&mu_);
    all.splice(all.end(), workers_);
  }
  for (auto& w : all) {
    if (w.thread.joinable()) w.thread.join();
  }
}

int OperationRunner::running() const {
  absl::MutexLock l(&mu_);
  return running_;
}

bool OperationRunner::shutting_down() const {
  absl::MutexLock l(&mu_);
  return shutting_down_;
}

}  // namespace cryo::engine
