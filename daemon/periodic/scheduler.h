#pragma once

// Periodic checkpoints: cryod checkpoints opted-in containers in the background, leave-running,
// so that a job larger than its grace period can still be resumed after a preemption from a
// recent state (docs/operations.md, "Periodic checkpoints"). One thread looks every tick at the
// managed containers:
//   - a container whose period (its pod's checkpoint-every, else the node's periodic_every_s for
//     checkpoint-on-stop ones) has passed since the latest of: its workload's newest good
//     checkpoint, the end of its last periodic attempt (its publish, or the failure), its
//     creation, is due (so the job runs a whole period between the end of one checkpoint and
//     the start of the next);
//   - the thread looks again at the earliest of: a tick, the next due time, and (while a
//     periodic checkpoint runs) a short poll, so a period starts on time, not a tick late;
//   - a period below the node's minimum is raised to it (logged once per container);
//   - a due one is checkpointed unless its previous periodic checkpoint is still being written
//     (never two of one job at once), the node runs its cap of periodic checkpoints already, or
//     the store has less free space than its last checkpoint took; a skip is logged and counted
//     with its reason;
//   - once per opted-in container, periodic or not, when its predicted checkpoint (its newest
//     checkpoint's size at this node's pace) exceeds its pod's terminationGracePeriodSeconds, a
//     warning says what to set.
// Retention (retention_keep) then keeps the newest good checkpoints of each workload, periodic
// or not, after each checkpoint. Everything outside is a function, so the schedule is tested
// with fakes and a clock of the test's own.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/container/container_checkpoint.h"
#include "daemon/engine/operation.h"
#include "daemon/metrics/metrics.h"
#include "daemon/store/manifest.h"

namespace cryo::periodic {

struct SchedulerDeps {
  // The managed containers running now (container::OptedInContainers).
  std::function<absl::StatusOr<std::vector<container::OptedIn>>()> containers;
  // The workload's newest checkpoint that no restore found damaged.
  std::function<std::optional<store::Manifest>(const std::string& workload)> newest_good;
  std::function<absl::StatusOr<uint64_t>()> store_free_bytes;
  // The time a checkpoint of this many bytes of the workload takes on this node (nullopt:
  // nothing measured).
  std::function<std::optional<absl::Duration>(const std::string& workload, uint64_t bytes)> predict;
  // Starts a leave-running checkpoint of the container as an operation of its own.
  std::function<absl::StatusOr<std::shared_ptr<engine::Operation>>(const container::OptedIn&)>
      start;
  // Whether this node drives the periodic job checkpoints of the job `c` is a member of (it
  // runs the job's first member by name). Unset: every node drives its members' jobs.
  std::function<absl::StatusOr<bool>(const container::OptedIn&)> drives_job;
  metrics::Metrics* metrics = nullptr;  // may be null
};

// What the node allows all pods together (cryod's periodic_min_every_s, periodic_max_running).
struct SchedulerLimits {
  absl::Duration min_every = absl::ZeroDuration();  // a shorter period is raised to this
  int max_running = 0;                              // periodic checkpoints at once; 0: no cap
};

// What one pass did with one workload (the tests read it; the log says the same).
struct Decision {
  std::string workload;
  // "started", "skipped_busy", "skipped_space", "skipped_node_cap", "not_due", "not_driver"
  // (another node checkpoints the job this member belongs to), "failed" (the start was
  // refused). `workload` is "job NS/NAME" for a job's members.
  std::string action;
  std::string why;
};

class Scheduler {
 public:
  // `node_every`: the period of checkpoint-on-stop containers whose pod does not say (zero:
  // none).
  Scheduler(SchedulerDeps deps, absl::Duration node_every, absl::Duration tick,
            SchedulerLimits limits = {});
  ~Scheduler();  // Stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void Start();
  // Prompt; waits for a pass that is running. The operations it started run on (the runner
  // owns them).
  void Stop();

  // One pass at `now`. The thread calls it every tick; tests call it directly.
  std::vector<Decision> Tick(absl::Time now);
  // When the last pass wants the next: a tick after it at most, earlier when a job falls due
  // before that or a periodic checkpoint runs (its end is polled for).
  absl::Time NextPass();

  // How often a running periodic checkpoint is looked at for its end.
  static constexpr absl::Duration kBusyPoll = absl::Milliseconds(250);

 private:
  struct Job {
    std::shared_ptr<engine::Operation> op;       // the periodic checkpoint in flight
    bool busy_reported = false;                  // its overrun was logged once
    absl::Time newest = absl::InfinitePast();    // the newest good checkpoint was taken
    uint64_t bytes = 0;                          // ... and its size (0: none yet)
    absl::Time last_end = absl::InfinitePast();  // the last attempt ended
    absl::Time started = absl::InfinitePast();   // the last attempt started
    bool space_reported = false;
    bool cap_reported = false;
  };
  // The period that applies to `c` (nullopt: no period), at least the node's minimum.
  std::optional<absl::Duration> PeriodOf(const container::OptedIn& c);
  void Collect(const std::string& workload, Job& j, absl::Time now);
  std::optional<Decision> Decide(const container::OptedIn& c, const std::string& key, Job& j,
                                 absl::Time now, int& running);
  void WarnAboutGrace(const container::OptedIn& c, const Job& j,
                      std::optional<absl::Duration> every);

  SchedulerDeps d_;
  const absl::Duration node_every_;
  const absl::Duration tick_;
  const SchedulerLimits limits_;
  absl::Mutex pass_mu_;                                        // one pass at a time
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(pass_mu_);  // by workload, or job
  std::set<std::string> warned_ ABSL_GUARDED_BY(pass_mu_);     // container ids
  std::set<std::string> raised_ ABSL_GUARDED_BY(pass_mu_);     // ... whose period was raised
  absl::Time next_pass_ ABSL_GUARDED_BY(pass_mu_) = absl::InfinitePast();
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cryo::periodic
