#pragma once

// Waiting for a condition that nothing signals (a pid to go away, a file to appear, a child to
// become ready): the one sleep-and-poll loop of the project.

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace cryo {

// Calls `done` until it returns true (-> true) or `timeout` has passed (-> false, after one
// last call). `interval` is the pause between calls.
bool PollUntil(absl::FunctionRef<bool()> done, absl::Duration timeout,
               absl::Duration interval = absl::Milliseconds(10));

// The same until an absolute deadline.
bool PollUntilDeadline(absl::FunctionRef<bool()> done, absl::Time deadline,
                       absl::Duration interval = absl::Milliseconds(10));

}  // namespace cryo
