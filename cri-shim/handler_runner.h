// Runs owned handlers off gRPC's callback threads: a checkpoint blocks for seconds and must not
// stall the forwarding of every other call.
#pragma once

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cryo::shim {

class HandlerRunner {
 public:
  HandlerRunner() = default;
  HandlerRunner(const HandlerRunner&) = delete;
  HandlerRunner& operator=(const HandlerRunner&) = delete;
  ~HandlerRunner();

  // Runs fn on a thread of its own. Owned calls are rare (stops, creates, checkpoints), so a
  // thread each is cheap and one long checkpoint never queues another call behind it.
  void Run(std::function<void()> fn);

  // Waits until every fn started so far has returned; false on timeout.
  bool Drain(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cryo::shim
