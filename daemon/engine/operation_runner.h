#pragma once

// Runs operations on threads of their own and owns those threads: every one is joined, none is
// detached, and nothing escapes a thread's boundary (an exception becomes an INTERNAL status).
// Used by the gRPC service and by node-wide triggers (termination notices) alike.
//
// Shutdown: new operations are refused at once; running ones get `grace` to finish, are then
// cancelled (they roll back at their next safe point, or finish if past their commit), and are
// waited for. The runner never returns from Shutdown with an operation thread alive, so the
// engine they use can be destroyed afterwards.

#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/engine/operation.h"
#include "daemon/metrics/metrics.h"

namespace cryo::engine {

class OperationRunner {
 public:
  using Body = std::function<absl::StatusOr<OperationResult>(Operation&)>;

  OperationRunner(OperationRegistry* ops, metrics::Metrics* metrics)
      : ops_(ops), metrics_(metrics) {}
  ~OperationRunner();  // Shutdown(absl::ZeroDuration())
  OperationRunner(const OperationRunner&) = delete;
  OperationRunner& operator=(const OperationRunner&) = delete;

  struct StartOptions {
    Priority priority = Priority::kNormal;
    // How long a kStop start waits for the background operations of its target to give way.
    absl::Time yield_by = absl::InfinitePast();
  };

  // Registers the operation (id: `requested_id`, or made from `kind`) and runs `body` on a
  // thread of its own. UNAVAILABLE once shutting down; ALREADY_EXISTS for a known id. A kStop
  // operation first cancels the kBackground ones on its target and waits (until `yield_by`) for
  // each to roll back or, past its publish, finish: the job is not left stopped by them.
  absl::StatusOr<std::shared_ptr<Operation>> Start(const std::string& requested_id,
                                                   const std::string& kind,
                                                   const std::string& target, Body body,
                                                   StartOptions opt);
  absl::StatusOr<std::shared_ptr<Operation>> Start(const std::string& requested_id,
                                                   const std::string& kind,
                                                   const std::string& target, Body body) {
    return Start(requested_id, kind, target, std::move(body), StartOptions{});
  }

  void Shutdown(absl::Duration grace);
  int running() const;
  bool shutting_down() const;

 private:
  struct Worker {
    std::shared_ptr<Operation> op;
    std::thread thread;
    bool finished = false;
  };
  void JoinFinished();
  void YieldBackground(const std::string& target, absl::Time deadline);

  OperationRegistry* ops_;
  metrics::Metrics* metrics_;
  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Worker> workers_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

// Lower-case status code name for metrics and logs ("resource_exhausted").
std::string CodeName(absl::StatusCode code);

}  // namespace cryo::engine
