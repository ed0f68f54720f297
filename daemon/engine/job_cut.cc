#include "daemon/engine/job_cut.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cryo::engine {

absl::Status JobCut::Arrive(const std::string& member, absl::Time deadline,
                            const std::function<bool()>& cancelled) {
  absl::MutexLock l(&mu_);
  arrivals_.push_back(absl::Now());
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failed_.empty() || static_cast<int>(arrivals_.size()) >= members_;
  };
  for (;;) {
    // Woken by every arrival or failure; cancellation is polled.
    mu_.AwaitWithDeadline(absl::Condition(&settled),
                          std::min(deadline, absl::Now() + absl::Milliseconds(100)));
    if (!failed_.empty()) {
      return absl::AbortedError(
          absl::StrCat("the job checkpoint's cut was not reached: ", failed_));
    }
    if (static_cast<int>(arrivals_.size()) >= members_) return absl::OkStatus();
    const int waiting_for = members_ - static_cast<int>(arrivals_.size());
    if (absl::Now() >= deadline) {
      failed_ = absl::StrCat("member ", member, " waited past its deadline for ", waiting_for,
                             " other member(s) to be dumped");
      return absl::DeadlineExceededError(failed_);
    }
    if (cancelled && cancelled()) {
      failed_ = absl::StrCat("member ", member, "'s checkpoint was cancelled at the cut");
      return absl::CancelledError(failed_);
    }
  }
}

void JobCut::Mark(const std::string& party) {
  absl::MutexLock l(&mu_);
  arrivals_.push_back(absl::Now());
}

absl::Status JobCut::WaitFor(int count, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failed_.empty() || static_cast<int>(arrivals_.size()) >= count;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (!failed_.empty()) {
    return absl::AbortedError(absl::StrCat("the job checkpoint's cut was not reached: ", failed_));
  }
  if (static_cast<int>(arrivals_.size()) >= count) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(count - static_cast<int>(arrivals_.size()),
                                                  " member(s) were not dumped in time"));
}

void JobCut::Fail(const std::string& member, const absl::Status& why) {
  absl::MutexLock l(&mu_);
  if (failed_.empty()) failed_ = absl::StrCat("member ", member, " failed: ", why.message());
}

absl::Duration JobCut::Skew() const {
  absl::MutexLock l(&mu_);
  if (static_cast<int>(arrivals_.size()) < members_ || arrivals_.empty()) {
    return absl::ZeroDuration();
  }
  auto [lo, hi] = std::minmax_element(arrivals_.begin(), arrivals_.end());
  return *hi - *lo;
}

}  // namespace cryo::engine
