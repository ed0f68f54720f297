#pragma once

#include <stdlib.h>

#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "lib/base/fs.h"
#include "lib/base/poll.h"
#include "test/temp_dir.h"

namespace cryo {

// Polls pred until it holds or the timeout passes (no fixed sleeps in tests).
inline bool WaitUntil(const std::function<bool()>& pred,
                      absl::Duration timeout = absl::Seconds(10)) {
  return PollUntil(pred, timeout, absl::Milliseconds(5));
}

}  // namespace cryo
