#pragma once

#include <stdlib.h>

#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "lib/base/fs.h"
#include "lib/base/poll.h"

namespace cryo {

// A temporary directory removed when the test ends.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/cryo-unit-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() { (void)fs::RemoveTree(path); }
};

// Polls pred until it holds or the timeout passes (no fixed sleeps in tests).
inline bool WaitUntil(const std::function<bool()>& pred,
                      absl::Duration timeout = absl::Seconds(10)) {
  return PollUntil(pred, timeout, absl::Milliseconds(5));
}

}  // namespace cryo
