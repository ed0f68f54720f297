#include "daemon/periodic/scheduler.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/human.h"
#include "lib/base/log.h"
#include "lib/contract/stages.h"

namespace cryo::periodic {
namespace {

// Room for a new checkpoint beside the ones kept: its last size and a tenth more.
uint64_t RoomFor(uint64_t bytes) { return bytes + bytes / 10; }

absl::Time CreatedAt(const store::Manifest& m) { return human::ParseRfc3339(m.created_at); }

std::string Short(const std::string& id) { return id.substr(0, 13); }

}  // namespace

Scheduler::Scheduler(SchedulerDeps deps, absl::Duration node_every, absl::Duration tick,
                     SchedulerLimits limits)
    : d_(std::move(deps)), node_every_(node_every), tick_(tick), limits_(limits) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Start() {
  thread_ = std::thread([this] {
    for (;;) {
      (void)Tick(absl::Now());  // its decisions are for tests; each is logged and counted
      const absl::Duration wait = std::max(NextPass() - absl::Now(), absl::Milliseconds(1));
      absl::MutexLock l(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), wait)) return;
    }
  });
}

void Scheduler::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::optional<absl::Duration> Scheduler::PeriodOf(const container::OptedIn& c) {
  std::optional<absl::Duration> every;
  if (c.every) {
    if (*c.every <= absl::ZeroDuration()) return std::nullopt;  // the pod said "never"
    every = *c.every;
  } else if (c.checkpoint_on_stop && node_every_ > absl::ZeroDuration()) {
    every = node_every_;
  }
  if (every && *every < limits_.min_every) {
    if (raised_.insert(c.container_id).second) {
      CRYO_LOG(Warning) << "container " << Short(c.container_id) << " (" << c.workload
                        << ") asks for a checkpoint every " << absl::FormatDuration(*every)
                        << "; this node's minimum is " << absl::FormatDuration(limits_.min_every)
                        << " (periodic_min_every_s): checkpointed that often";
    }
    every = limits_.min_every;
  }
  return every;
}

absl::Time Scheduler::NextPass() {
  absl::MutexLock pass(&pass_mu_);
  return next_pass_;
}

void Scheduler::Collect(const std::string& workload, Job& j, absl::Time now) {
  if (!j.op || !j.op->done()) return;
  const absl::Status st = j.op->status();
  // A failure ended when it was seen (within kBusyPoll); a checkpoint when it was published.
  j.last_end = now;
  if (st.ok()) {
    const auto result = j.op->result();
    if (const auto* r = std::get_if<engine::CheckpointResult>(&result)) {
      if (r->published_at != absl::InfinitePast()) j.last_end = r->published_at;
      j.newest = CreatedAt(r->manifest);
      j.bytes = r->manifest.TotalBytes();
      // The stages that hold the job: the freeze to the job running again with its memory back.
      uint64_t stall_ms = 0;
      for (const auto& [stage, ms] : r->manifest.stage_ms) {
        if (contract::HoldsJob(stage)) stall_ms += ms;
      }
      if (d_.metrics) d_.metrics->ObservePeriodicStall(stall_ms / 1000.0);
      CRYO_LOG(Info) << "periodic checkpoint " << r->manifest.id << " of " << workload << ": "
                     << human::Bytes(j.bytes) << ", the job stalled " << stall_ms << " ms";
    }
    if (const auto* r = std::get_if<engine::JobCheckpointResult>(&result)) {
      // A job checkpoint of every member (this node drove it): the job stalled as long as its
      // member held longest.
      j.newest = human::ParseRfc3339(r->record.created_at);
      j.bytes = 0;
      uint64_t stall_ms = 0;
      for (const auto& p : r->parts) {
        j.bytes += p.manifest.TotalBytes();
        uint64_t held = 0;
        for (const auto& [stage, ms] : p.manifest.stage_ms) {
          if (contract::HoldsJob(stage)) held += ms;
        }
        stall_ms = std::max(stall_ms, held);
        if (p.published_at != absl::InfinitePast())
          j.last_end = std::max(j.last_end, p.published_at);
      }
      if (d_.metrics) d_.metrics->ObservePeriodicStall(stall_ms / 1000.0);
      CRYO_LOG(Info) << "periodic job checkpoint " << r->record.id << " of " << workload << ": "
                     << r->parts.size() << " members, " << human::Bytes(j.bytes)
                     << ", the job stalled " << stall_ms << " ms";
    }
    if (d_.metrics) d_.metrics->CountPeriodic("ok");
  } else {
    // The job ran on (a failed checkpoint rolls back) and nothing was published.
    CRYO_LOG(Warning) << "periodic checkpoint of " << workload << " failed: " << st
                      << "; the job runs on, the next one is due after its period";
    if (d_.metrics) d_.metrics->CountPeriodic("failed");
  }
  j.op.reset();
  j.busy_reported = false;
}

void Scheduler::WarnAboutGrace(const container::OptedIn& c, const Job& j,
                               std::optional<absl::Duration> every) {
  if (c.grace_s < 0 || j.bytes == 0 || warned_.count(c.container_id) || !d_.predict) return;
  auto predicted = d_.predict(c.workload, j.bytes);
  if (!predicted || *predicted <= absl::Seconds(c.grace_s)) return;
  warned_.insert(c.container_id);
  if (d_.metrics) d_.metrics->CountGraceWarning();
  // The stop keeps a second for itself (the shim's margin).
  const int64_t need = static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(*predicted))) + 2;
  const std::string then =
      every ? absl::StrCat(
                  "a stop will resume it from its newest periodic checkpoint, losing up "
                  "to ",
                  absl::FormatDuration(*every), " of work")
            : std::string(
                  "a stop will resume it from its newest checkpoint, if it has one "
                  "(set cryo.dev/checkpoint-every to take them in the background)");
  CRYO_LOG(Warning) << "container " << Short(c.container_id) << " (" << c.workload
                    << "): a checkpoint at its stop would take about "
                    << absl::FormatDuration(absl::Trunc(*predicted, absl::Milliseconds(100)))
                    << " (" << human::Bytes(j.bytes)
                    << " at this node's pace), more than its pod's terminationGracePeriodSeconds"
                    << " of " << c.grace_s << " s: " << then
                    << ". Set terminationGracePeriodSeconds to at least " << need
                    << " to checkpoint at the stop";
}

// What this pass does about one job (`key`, its entry `j`): nothing to report when it has no
// period; otherwise whether it is due and, if so, started or why not. `running` counts the
// node's periodic checkpoints in flight.
std::optional<Decision> Scheduler::Decide(const container::OptedIn& c, const std::string& key,
                                          Job& j, absl::Time now, int& running) {
  const std::optional<absl::Duration> every = PeriodOf(c);
  // Every opted-in job is warned about, with a period or not.
  WarnAboutGrace(c, j, every);
  if (!every) return std::nullopt;
  if (d_.metrics && j.newest != absl::InfinitePast()) {
    d_.metrics->SetNewestAge(key, absl::ToDoubleSeconds(now - j.newest));
  }
  // A checkpoint still running counts from its start: busy only once a period has passed.
  const absl::Time since = std::max({j.newest, j.last_end, c.created, j.started});
  Decision d{key, "not_due", ""};
  if (since != absl::InfinitePast() && now - since < *every) {
    next_pass_ = std::min(next_pass_, since + *every);
    if (j.op) next_pass_ = std::min(next_pass_, now + kBusyPoll);
    return d;
  }
  // A skip is logged and counted once per stretch of skips (`reported`), seen every pass.
  auto skip = [&](const char* action, std::string why, bool* reported) {
    d.action = action;
    d.why = std::move(why);
    if (!*reported) {
      *reported = true;
      CRYO_LOG(Warning) << "periodic checkpoint of " << key << " skipped: " << d.why;
      if (d_.metrics) d_.metrics->CountPeriodic(action);
    }
  };
  if (j.op) {
    next_pass_ = std::min(next_pass_, now + kBusyPoll);
    skip("skipped_busy",
         absl::StrCat("the previous periodic checkpoint (operation ", j.op->id(),
                      ") is still being written"),
         &j.busy_reported);
    return d;
  }
  if (limits_.max_running > 0 && running >= limits_.max_running) {
    next_pass_ = std::min(next_pass_, now + kBusyPoll);
    skip("skipped_node_cap",
         absl::StrCat(running,
                      " periodic checkpoints run on this node already, its cap "
                      "(periodic_max_running)"),
         &j.cap_reported);
    return d;
  }
  j.cap_reported = false;
  if (j.bytes > 0) {
    auto free = d_.store_free_bytes();
    if (free.ok() && *free < RoomFor(j.bytes)) {
      skip("skipped_space",
           absl::StrCat("the store has ", human::Bytes(*free), " free and the last one took ",
                        human::Bytes(j.bytes)),
           &j.space_reported);
      return d;
    }
  }
  j.space_reported = false;
  if (!c.job.empty() && d_.drives_job) {
    // One node drives a job's periodic checkpoint (the one that runs its first member by
    // name); the others let it be and look again after a period.
    auto drives = d_.drives_job(c);
    if (!drives.ok() || !*drives) {
      d.action = drives.ok() ? "not_driver" : "failed";
      d.why = drives.ok() ? "another node drives the job's periodic checkpoints"
                          : std::string(drives.status().message());
      j.last_end = now;
      if (!drives.ok()) {
        CRYO_LOG(Warning) << "periodic checkpoint of " << key << ": " << drives.status();
        if (d_.metrics) d_.metrics->CountPeriodic("failed");
      }
      return d;
    }
  }
  auto op = d_.start(c);
  if (!op.ok()) {
    // Another operation holds the job (a stop's checkpoint, a manual one): try after a period.
    d.action = "failed";
    d.why = std::string(op.status().message());
    j.last_end = now;
    CRYO_LOG(Warning) << "periodic checkpoint of " << key << " not started: " << op.status();
    if (d_.metrics) d_.metrics->CountPeriodic("failed");
    return d;
  }
  j.op = *op;
  j.started = now;
  ++running;
  next_pass_ = std::min(next_pass_, now + kBusyPoll);
  d.action = "started";
  d.why = (*op)->id();
  CRYO_LOG(Info) << "periodic checkpoint of " << key << " (container " << Short(c.container_id)
                 << ") started: operation " << (*op)->id();
  if (d_.metrics) d_.metrics->CountPeriodic("started");
  return d;
}

std::vector<Decision> Scheduler::Tick(absl::Time now) {
  absl::MutexLock pass(&pass_mu_);
  std::vector<Decision> out;
  // Set first: a runtime that fails to answer is asked again a tick later, not at once.
  next_pass_ = now + tick_;
  auto containers = d_.containers();
  if (!containers.ok()) {
    CRYO_LOG(Warning) << "periodic checkpoints: " << containers.status();
    return out;
  }
  std::set<std::string> seen;
  // Periodic checkpoints in flight on the node (ended ones are collected below, per job).
  int running = 0;
  for (auto& [w, j] : jobs_) {
    Collect(w, j, now);
    if (j.op) ++running;
  }
  // A job of several pods is checkpointed once, all its members at one cut, by one node: its
  // members on this node are one entry, keyed by the job.
  std::set<std::string> job_seen;
  for (const container::OptedIn& c : *containers) {
    if (c.workload.empty()) continue;
    const std::string key =
        c.job.empty() ? c.workload : absl::StrCat("job ", c.job_namespace, "/", c.job);
    if (!c.job.empty() && !job_seen.insert(key).second) continue;
    seen.insert(key);
    auto [it, first] = jobs_.try_emplace(key);
    Job& j = it->second;
    if (first) {
      // The store remembers across cryod's restarts (and other nodes' checkpoints of the job).
      if (auto m = d_.newest_good(c.workload)) {
        j.newest = CreatedAt(*m);
        j.bytes = m->TotalBytes();
      }
    }
    if (auto d = Decide(c, key, j, now, running)) out.push_back(*std::move(d));
  }
  // Jobs that ended (or left the node): forget them once nothing of theirs runs.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (seen.count(it->first) || (it->second.op && !it->second.op->done())) {
      ++it;
      continue;
    }
    if (d_.metrics) d_.metrics->ForgetWorkload(it->first);
    it = jobs_.erase(it);
  }
  return out;
}

}  // namespace cryo::periodic
