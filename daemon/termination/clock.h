#pragma once

// The clock the termination providers read (token expiry, "event started now"), behind an
// interface so tests can move time by hand.

#include "absl/time/time.h"

namespace cryo::termination {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

// The wall clock; process-wide, never null.
Clock* RealClock();

}  // namespace cryo::termination
