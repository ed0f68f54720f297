#include "cri-shim/handler_runner.h"

#include <thread>

namespace cryo::shim {

HandlerRunner::~HandlerRunner() { Drain(absl::InfiniteDuration()); }

void HandlerRunner::Run(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    ++active_;
  }
  std::thread([this, fn = std::move(fn)] {
    fn();
    absl::MutexLock lock(&mu_);
    --active_;
  }).detach();
}

bool HandlerRunner::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return active_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

}  // namespace cryo::shim
