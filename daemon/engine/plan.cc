// The plan at a stop (the `plan` step): a checkpoint that cannot finish before the stop's
// deadline would only waste the grace period and lose the job's newest state anyway. When this
// node's recent checkpoints say it will not fit and the workload has a good checkpoint (a
// periodic one), no checkpoint is taken: the job ends now and its replacement resumes from that
// one. docs/operations.md, "The plan at a stop".

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/container/container_checkpoint.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/states.h"
#include "lib/base/human.h"
#include "lib/base/log.h"

namespace cryo::engine {
namespace {

std::string Seconds(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d) / 100 / 10.0, " s");
}

}  // namespace

std::optional<store::Manifest> Engine::NewestGood(const std::string& workload) {
  auto all = d_.store->List();
  if (!all.ok()) {
    CRYO_LOG(Warning) << "listing the store for " << workload << ": " << all.status();
    return std::nullopt;
  }
  for (auto& m : *all) {  // newest first
    // A job checkpoint's part counts once its job checkpoint is committed.
    if (m.workload == workload && m.damaged.empty() && JobUncommitted(m).empty()) {
      return std::move(m);
    }
  }
  return std::nullopt;
}

absl::Status Engine::PlanCheckpoint(CheckpointState& s) {
  const absl::Time now = absl::Now();
  const absl::Duration left = s.req.deadline - now;
  std::optional<store::Manifest> newest = NewestGood(s.workload);
  // The job's size: its newest checkpoint's (GPU memory included, measured as the pace is),
  // else what its processes hold now.
  const uint64_t bytes = newest ? newest->TotalBytes() : s.procs.expected();
  const std::optional<absl::Duration> predicted = pace_.Predict(s.workload, bytes);
  auto count = [this](const char* decision) {
    if (d_.metrics) d_.metrics->CountPlan(decision);
  };
  const std::string what = absl::StrCat("checkpoint of ", s.workload, " at its stop");
  if (!predicted) {
    count("no_estimate");
    CRYO_LOG(Info) << what << ": no checkpoint measured on this node yet; taking it";
    return absl::OkStatus();
  }
  const std::string estimate = absl::StrCat(
      human::Bytes(bytes), " would take about ", Seconds(*predicted), " at the ",
      human::Bytes(static_cast<uint64_t>(*pace_.BytesPerSecond(s.workload))),
      "/s of this job's (or this node's) recent checkpoints, and ", Seconds(left), " are left");
  if (*predicted <= left) {
    count("checkpoint");
    CRYO_LOG(Info) << what << ": " << estimate << "; taking it";
    return absl::OkStatus();
  }
  if (!newest) {
    count("no_fallback");
    CRYO_LOG(Warning) << what << ": " << estimate
                      << ", but there is no earlier checkpoint to resume from; trying anyway";
    return absl::OkStatus();
  }
  absl::Time taken = human::ParseRfc3339(newest->created_at);
  if (taken == absl::InfinitePast()) taken = now;
  const absl::Duration lost =
      std::max(absl::ZeroDuration(), absl::Trunc(now - taken, absl::Seconds(1)));
  CheckpointState::Fallback f;
  f.why = absl::StrCat("not checkpointed at this stop: ", estimate,
                       "; the replacement resumes from ", newest->id, ", taken ",
                       absl::FormatDuration(lost), " before the stop (that work is lost)");
  f.lost = lost;
  f.newest = *std::move(newest);
  count("fall_back");
  if (d_.metrics) d_.metrics->ObserveWorkLost(absl::ToDoubleSeconds(lost));
  CRYO_LOG(Warning) << what << ": " << f.why;
  s.fallback = std::move(f);
  return absl::OkStatus();
}

absl::Status Engine::FallBack(CheckpointState& s) {
  // The job ends now, as after a checkpoint: its cryo-init first hears that the replacement
  // resumes from an earlier checkpoint (its exit code and termination message say so).
  if (s.ctr && d_.proc->Alive(s.ctr->init_pid)) {
    container::TellInitResumesEarlier(*d_.proc, s.ctr->init_pid, s.fallback->lost, s.fallback->why);
  }
  jobs_.Kill(s.procs.tasks());
  return absl::OkStatus();
}

}  // namespace cryo::engine
