#include "lib/base/poll.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace cryo {

bool PollUntilDeadline(absl::FunctionRef<bool()> done, absl::Time deadline,
                       absl::Duration interval) {
  for (;;) {
    if (done()) return true;
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    absl::SleepFor(std::min(interval, deadline - now));
  }
}

bool PollUntil(absl::FunctionRef<bool()> done, absl::Duration timeout, absl::Duration interval) {
  return PollUntilDeadline(done, absl::Now() + timeout, interval);
}

}  // namespace cryo
