#pragma once

// Stopping the processes of one job at one moment. Processes may wait on each other (ranks
// inside an NCCL collective): one stopped while a peer's kernel waits for it never lets that
// kernel end, and the peer never stops. So they are stopped together with a short bound; when
// some could not stop because their work still ran, all are let go, a pause lets the collective
// end, and the next attempt has twice the bound, until the caller's bound is spent. They stop
// at a moment when none waits on another (between steps), or a kernel that is merely long gets
// the long bound it needs. The GPU lock (plugin_gpu_manager.cc) and the fast path's cut
// (fastpath_cut.h) both work this way.

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cryo::gpu {

struct Attempt {
  absl::Status status;
  // On failure: every process that failed did so because its work still ran (nothing worse),
  // and all were let go again, so another attempt may succeed.
  bool retry = false;
};

struct AttemptPolicy {
  absl::Duration first = absl::Milliseconds(250);
  absl::Duration pause = absl::Milliseconds(20);
};

// Runs `attempt(bound)` until it succeeds, fails in a way another attempt cannot mend, or
// `timeout` is spent. `what` names the act in the final error ("lock the job's 2 GPU
// processes"). *attempts (may be null) is how many were made.
absl::Status InAttempts(absl::Duration timeout, absl::string_view what,
                        const std::function<Attempt(absl::Duration bound)>& attempt,
                        int* attempts = nullptr, AttemptPolicy policy = {});

}  // namespace cryo::gpu
