#include "daemon/gpu/attempts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cryo::gpu {

absl::Status InAttempts(absl::Duration timeout, absl::string_view what,
                        const std::function<Attempt(absl::Duration bound)>& attempt, int* attempts,
                        AttemptPolicy policy) {
  const absl::Time end = absl::Now() + timeout;
  absl::Duration slice = std::min(timeout, policy.first);
  for (int n = 1;; ++n) {
    if (attempts != nullptr) *attempts = n;
    const absl::Duration left = end - absl::Now();
    Attempt a = attempt(std::max(absl::Milliseconds(1), std::min(slice, left)));
    if (a.status.ok() || !a.retry) return a.status;
    if (absl::Now() + policy.pause >= end) {
      return absl::Status(
          a.status.code(),
          absl::StrCat(a.status.message(), " (", n, " attempts to ", what, " together within ",
                       absl::FormatDuration(timeout), ": their work never stopped at once)"));
    }
    absl::SleepFor(policy.pause);
    slice = std::min(slice * 2, std::max(end - absl::Now(), absl::Milliseconds(1)));
  }
}

}  // namespace cryo::gpu
