#include "daemon/engine/stage_clock.h"

#include "absl/time/clock.h"

namespace cryo::engine {

StageClock::~StageClock() {
  if (cur_ != Stage::kUnspecified && m_) m_->CountFailedStage(op_, StageName(cur_));
}

void StageClock::Begin(Stage s, uint64_t total, std::string msg) {
  End();
  cur_ = s;
  t0_ = absl::Now();
  o_.Report(s, 0, total, std::move(msg));
}

void StageClock::End() {
  if (cur_ == Stage::kUnspecified) return;
  absl::Duration d = absl::Now() - t0_;
  ms_[StageName(cur_)] += absl::ToInt64Milliseconds(d);
  if (m_) m_->ObserveStage(op_, StageName(cur_), absl::ToDoubleSeconds(d));
  cur_ = Stage::kUnspecified;
}

ProgressTicker::ProgressTicker(Operation& op, Stage stage, std::function<uint64_t()> done,
                               uint64_t total)
    : op_(op), stage_(stage), done_(std::move(done)), total_(total) {
  thread_ = std::thread([this] {
    absl::MutexLock l(&mu_);
    while (!stop_) {
      op_.Report(stage_, done_(), total_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(100));
    }
  });
}

ProgressTicker::~ProgressTicker() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
  op_.Report(stage_, done_(), total_);  // where the stage ended, not its last tick
}

}  // namespace cryo::engine
