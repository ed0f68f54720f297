// The periodic schedule on its own (daemon/periodic/scheduler.h), over fake containers, store
// and operations and a clock of the test's own: when a checkpoint is due, the skips and their
// reasons, the node default, the grace warning, and what a failed one leaves.
#include "daemon/periodic/scheduler.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace cryo::periodic {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_sec, t, absl::UTCTimeZone());
}

store::Manifest Checkpoint(const std::string& id, const std::string& workload, absl::Time at,
                           uint64_t bytes) {
  store::Manifest m;
  m.id = id;
  m.workload = workload;
  m.created_at = Rfc3339(at);
  store::ManifestFile f;
  f.path = "images/pages-1.img";
  f.size = bytes;
  m.files.push_back(f);
  m.stage_ms = {{"validate", 5}, {"dump", 700}, {"rootfs", 50}, {"publish", 300}};
  return m;
}

class SchedulerTest : public ::testing::Test {
 protected:
  container::OptedIn Container(const std::string& id, const std::string& workload,
                               std::optional<absl::Duration> every, bool on_stop = true) {
    container::OptedIn c;
    c.container_id = id;
    c.workload = workload;
    c.checkpoint_on_stop = on_stop;
    c.every = every;
    c.created = kT0;
    return c;
  }

  std::unique_ptr<Scheduler> Make(absl::Duration node_every = absl::ZeroDuration(),
                                  SchedulerLimits limits = {}) {
    SchedulerDeps d;
    d.containers = [this]() -> absl::StatusOr<std::vector<container::OptedIn>> {
      if (!containers_error_.ok()) return containers_error_;
      return containers_;
    };
    d.newest_good = [this](const std::string& w) -> std::optional<store::Manifest> {
      auto it = newest_.find(w);
      if (it == newest_.end()) return std::nullopt;
      return it->second;
    };
    d.store_free_bytes = [this]() -> absl::StatusOr<uint64_t> { return free_; };
    d.predict = [this](const std::string&, uint64_t bytes) -> std::optional<absl::Duration> {
      if (bytes_per_s_ == 0) return std::nullopt;
      return absl::Seconds(static_cast<double>(bytes) / bytes_per_s_);
    };
    d.start =
        [this](const container::OptedIn& c) -> absl::StatusOr<std::shared_ptr<engine::Operation>> {
      if (!refuse_.ok()) return refuse_;
      auto op = std::make_shared<engine::Operation>(absl::StrCat("periodic-", ops_.size()),
                                                    "checkpoint", c.container_id);
      ops_.push_back(op);
      return op;
    };
    d.drives_job = [this](const container::OptedIn& c) -> absl::StatusOr<bool> {
      ++drive_lookups_;
      if (!drives_.ok()) return drives_.status();
      return *drives_ && c.job_member == "m0";
    };
    d.metrics = &metrics_;
    return std::make_unique<Scheduler>(std::move(d), node_every, absl::Seconds(10), limits);
  }

  static std::vector<std::string> Actions(const std::vector<Decision>& ds) {
    std::vector<std::string> out;
    for (const auto& d : ds) out.push_back(d.workload + " " + d.action);
    return out;
  }

  std::string Metric(const std::string& series) {
    const std::string text = prometheus::TextSerializer().Serialize(metrics_.registry()->Collect());
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, series + " ")) return std::string(line.substr(series.size() + 1));
    }
    return "";
  }

  std::vector<container::OptedIn> containers_;
  absl::Status containers_error_;  // what the runtime answers instead of its containers
  std::map<std::string, store::Manifest> newest_;
  uint64_t free_ = 1ull << 40;
  double bytes_per_s_ = 0;
  absl::Status refuse_;
  absl::StatusOr<bool> drives_ = true;  // this node drives jobs whose member here is "m0"
  int drive_lookups_ = 0;
  std::vector<std::shared_ptr<engine::Operation>> ops_;
  metrics::Metrics metrics_;
};

using ::testing::ElementsAre;

TEST_F(SchedulerTest, ADueJobIsCheckpointedNeverTwiceAtOnceAndAgainAPeriodAfterTheLastEnded) {
  containers_ = {Container("c1", "w", absl::Minutes(20))};
  auto s = Make();
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(10))), ElementsAre("w not_due"));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(20))), ElementsAre("w started"));
  ASSERT_EQ(ops_.size(), 1u);
  // Still being written a period later: skipped, counted once however often it is seen.
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(41))), ElementsAre("w skipped_busy"));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(42))), ElementsAre("w skipped_busy"));
  EXPECT_EQ(Metric("cryo_periodic_checkpoints_total{result=\"skipped_busy\"}"), "1");
  EXPECT_EQ(ops_.size(), 1u) << "never two checkpoints of one job at once";

  // It ends (seen at 43m): the job gets a whole period to itself before the next one.
  engine::CheckpointResult r;
  r.manifest = Checkpoint("w-1", "w", kT0 + absl::Minutes(20), 8 << 20);
  ops_[0]->Finish(absl::OkStatus(), r);
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(43))), ElementsAre("w not_due"));
  EXPECT_EQ(Metric("cryo_periodic_checkpoints_total{result=\"ok\"}"), "1");
  // The job stalled for its dump and writable layer (750 ms), not for the publish.
  EXPECT_EQ(Metric("cryo_periodic_stall_seconds_sum"), "0.75");
  EXPECT_EQ(Metric("cryo_newest_checkpoint_age_seconds{workload=\"w\"}"), "1380");
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(62))), ElementsAre("w not_due"));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(63))), ElementsAre("w started"));
  EXPECT_EQ(Metric("cryo_periodic_checkpoints_total{result=\"started\"}"), "2");
}

// A runtime that does not answer (containerd's ListContainers timing out) is asked again a tick
// later, not at once: the schedule's thread asked again every millisecond (1000 calls a second
// into a runtime already too slow to answer, two cryods' logs full of it, a CI rehearsal's
// restores timed out beside it).
TEST_F(SchedulerTest, ARuntimeThatDoesNotAnswerIsAskedAgainATickLaterNotAtOnce) {
  containers_ = {Container("c1", "w", absl::Seconds(10))};
  auto s = Make();  // a tick of 10 s
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Seconds(3))), ElementsAre("w not_due"));
  containers_error_ = absl::DeadlineExceededError("ListContainers: Deadline Exceeded");
  EXPECT_TRUE(s->Tick(kT0 + absl::Seconds(20)).empty());
  EXPECT_EQ(s->NextPass(), kT0 + absl::Seconds(30)) << "a tick after the failed call";
  containers_error_ = absl::OkStatus();
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Seconds(30))), ElementsAre("w started"));
}

// Issue 42: with a period of 10 s and cryod's default tick of 10 s, checkpoints started every
// 20 s: the end of one was counted from the tick that saw it, and the next waited for a tick.
// The period now runs from the publish, and the schedule wakes when a job falls due and, while
// a checkpoint runs, polls for its end.
TEST_F(SchedulerTest, TheNextPeriodRunsFromThePublishAndStartsWhenDueNotATickLater) {
  containers_ = {Container("c1", "w", absl::Seconds(10))};
  auto s = Make();  // a tick of 10 s
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Seconds(3))), ElementsAre("w not_due"));
  EXPECT_EQ(s->NextPass(), kT0 + absl::Seconds(10)) << "when it falls due, before the tick";
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Seconds(10))), ElementsAre("w started"));
  ASSERT_EQ(ops_.size(), 1u);
  EXPECT_EQ(s->NextPass(), kT0 + absl::Seconds(10) + Scheduler::kBusyPoll);
  // Running, not yet a period old: not busy, only polled for.
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Milliseconds(10250))), ElementsAre("w not_due"));
  EXPECT_EQ(s->NextPass(), kT0 + absl::Milliseconds(10500));
  engine::CheckpointResult r;
  r.manifest = Checkpoint("w-1", "w", kT0 + absl::Seconds(10), 1 << 20);
  r.published_at = kT0 + absl::Milliseconds(10400);
  ops_[0]->Finish(absl::OkStatus(), r);
  // Seen 100 ms after its publish; the next falls due a period after the publish.
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Milliseconds(10500))), ElementsAre("w not_due"));
  EXPECT_EQ(s->NextPass(), kT0 + absl::Milliseconds(20400));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Milliseconds(20399))), ElementsAre("w not_due"));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Milliseconds(20400))), ElementsAre("w started"));
}

// What the node allows all pods together (issue 34): a pod asking for a period below the node's
// minimum gets the minimum, and no more periodic checkpoints run at once than the node's cap;
// the others are checkpointed as soon as one ends.
TEST_F(SchedulerTest, APeriodBelowTheNodesMinimumIsRaisedAndTheNodeCapsHowManyRunAtOnce) {
  containers_ = {Container("c1", "w1", absl::Seconds(1)), Container("c2", "w2", absl::Seconds(1)),
                 Container("c3", "w3", absl::Seconds(1))};
  SchedulerLimits limits;
  limits.min_every = absl::Minutes(1);
  limits.max_running = 2;
  auto s = Make(absl::ZeroDuration(), limits);
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Seconds(30))),
              ElementsAre("w1 not_due", "w2 not_due", "w3 not_due"))
      << "asked for 1 s, got the node's minute";
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(1))),
              ElementsAre("w1 started", "w2 started", "w3 skipped_node_cap"));
  EXPECT_EQ(Metric("cryo_periodic_checkpoints_total{result=\"skipped_node_cap\"}"), "1");
  ASSERT_EQ(ops_.size(), 2u);
  engine::CheckpointResult r;
  r.manifest = Checkpoint("w1-1", "w1", kT0 + absl::Minutes(1), 1 << 20);
  ops_[0]->Finish(absl::OkStatus(), r);
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(1) + absl::Seconds(1))),
              ElementsAre("w1 not_due", "w2 not_due", "w3 started"))
      << "the third goes as soon as one ends";
  EXPECT_EQ(ops_.size(), 3u);
}

TEST_F(SchedulerTest, AFailedOneLeavesNothingAndTheNextComesAPeriodLater) {
  containers_ = {Container("c1", "w", absl::Minutes(5))};
  auto s = Make();
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(5))), ElementsAre("w started"));
  ops_[0]->Finish(absl::ResourceExhaustedError("checkpoint store is full"), {});
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(6))), ElementsAre("w not_due"));
  EXPECT_EQ(Metric("cryo_periodic_checkpoints_total{result=\"failed\"}"), "1");
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(11))), ElementsAre("w started"));
}

TEST_F(SchedulerTest, TheStoreRemembersTheNewestAcrossARestart) {
  containers_ = {Container("c1", "w", absl::Minutes(20))};
  newest_["w"] = Checkpoint("w-9", "w", kT0 + absl::Hours(2), 1 << 20);
  auto s = Make();
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Hours(2) + absl::Minutes(19))), ElementsAre("w not_due"));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Hours(2) + absl::Minutes(20))), ElementsAre("w started"));
}

TEST_F(SchedulerTest, AStoreShortOfSpaceSkipsWithTheReason) {
  containers_ = {Container("c1", "w", absl::Minutes(1))};
  newest_["w"] = Checkpoint("w-1", "w", kT0, 10ull << 30);
  free_ = 10ull << 30;  // the size of the last one, without the tenth more
  auto s = Make();
  auto d = s->Tick(kT0 + absl::Minutes(2));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "skipped_space");
  EXPECT_THAT(d[0].why, ::testing::HasSubstr("10 GiB free"));
  EXPECT_TRUE(ops_.empty());
  EXPECT_EQ(Metric("cryo_periodic_checkpoints_total{result=\"skipped_space\"}"), "1");
  free_ = 20ull << 30;
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(3))), ElementsAre("w started"));
}

TEST_F(SchedulerTest, TheNodeDefaultAppliesToCheckpointOnStopJobsAndOffOverridesIt) {
  containers_ = {Container("c1", "default", std::nullopt),
                 Container("c2", "off", absl::ZeroDuration()),
                 Container("c3", "not-on-stop", std::nullopt, /*on_stop=*/false),
                 Container("c4", "own", absl::Minutes(30), /*on_stop=*/false)};
  auto s = Make(absl::Minutes(10));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(10))),
              ElementsAre("default started", "own not_due"));
  auto none = Make(absl::ZeroDuration());
  EXPECT_THAT(Actions(none->Tick(kT0 + absl::Minutes(30))), ElementsAre("own started"));
}

TEST_F(SchedulerTest, AJobWhoseCheckpointOutlastsItsGracePeriodIsWarnedAboutOnce) {
  auto c = Container("c1", "w", absl::Minutes(20));
  c.grace_s = 30;
  containers_ = {c};
  newest_["w"] = Checkpoint("w-1", "w", kT0, 60ull << 30);
  bytes_per_s_ = 1.0 * (1ull << 30);  // 60 s for its 60 GiB
  auto s = Make();
  s->Tick(kT0 + absl::Minutes(1));
  s->Tick(kT0 + absl::Minutes(2));
  EXPECT_EQ(Metric("cryo_periodic_grace_warnings_total"), "1");
  // Enough grace: no warning.
  containers_[0].container_id = "c2";
  containers_[0].grace_s = 90;
  s->Tick(kT0 + absl::Minutes(3));
  EXPECT_EQ(Metric("cryo_periodic_grace_warnings_total"), "1");
  // A checkpoint-on-stop job without a period is warned about too (it is what a stop saves).
  auto plain = Container("c3", "plain", std::nullopt);
  plain.grace_s = 30;
  containers_ = {plain};
  newest_["plain"] = Checkpoint("plain-1", "plain", kT0, 60ull << 30);
  s->Tick(kT0 + absl::Minutes(4));
  EXPECT_EQ(Metric("cryo_periodic_grace_warnings_total"), "2");
  EXPECT_TRUE(ops_.empty()) << "no period: no periodic checkpoint";
}

TEST_F(SchedulerTest, AStartThatIsRefusedIsTriedAgainAPeriodLater) {
  containers_ = {Container("c1", "w", absl::Minutes(5))};
  refuse_ = absl::AbortedError("pid 42 is already being checkpointed");
  auto s = Make();
  auto d = s->Tick(kT0 + absl::Minutes(5));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "failed");
  EXPECT_THAT(d[0].why, ::testing::HasSubstr("already being checkpointed"));
  refuse_ = absl::OkStatus();
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(6))), ElementsAre("w not_due"));
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(10))), ElementsAre("w started"));
}

TEST_F(SchedulerTest, AJobThatLeftTheNodeIsForgotten) {
  containers_ = {Container("c1", "w", absl::Minutes(5))};
  newest_["w"] = Checkpoint("w-1", "w", kT0, 1 << 20);
  auto s = Make();
  s->Tick(kT0 + absl::Minutes(1));
  EXPECT_EQ(Metric("cryo_newest_checkpoint_age_seconds{workload=\"w\"}"), "60");
  containers_.clear();
  s->Tick(kT0 + absl::Minutes(2));
  EXPECT_EQ(Metric("cryo_newest_checkpoint_age_seconds{workload=\"w\"}"), "");
}

// Issue 37: a job of several pods is checkpointed as a job, once per period, by the node that
// runs its first member. Its members on one node are one entry (one job checkpoint takes them
// all); a node that does not drive lets the period pass without a lookup each tick.
TEST_F(SchedulerTest, AJobsMembersAreOneEntryCheckpointedByTheNodeThatDrivesTheJob) {
  auto member = [&](const std::string& id, const std::string& name) {
    container::OptedIn c = Container(id, "ns.trainer.counter", absl::Minutes(10));
    c.job = "trainer";
    c.job_namespace = "ns";
    c.job_member = name;
    c.job_size = 3;
    return c;
  };
  containers_ = {member("c0", "m0"), member("c1", "m1")};
  auto s = Make();
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(10))), ElementsAre("job ns/trainer started"));
  ASSERT_EQ(ops_.size(), 1u) << "one job checkpoint for both members here";
  // It ends: the job stalled as long as its member held longest.
  engine::JobCheckpointResult r;
  r.record.id = "trainer-1";
  r.record.created_at = Rfc3339(kT0 + absl::Minutes(10));
  for (const char* m : {"m0", "m1", "m2"}) {
    engine::CheckpointResult p;
    p.manifest = Checkpoint(absl::StrCat("trainer-1.", m), "ns.trainer.counter",
                            kT0 + absl::Minutes(10), 1 << 20);
    p.manifest.stage_ms["dump"] = m == std::string("m2") ? 900 : 400;
    r.parts.push_back(p);
  }
  ops_[0]->Finish(absl::OkStatus(), r);
  EXPECT_THAT(Actions(s->Tick(kT0 + absl::Minutes(15))), ElementsAre("job ns/trainer not_due"));
  EXPECT_EQ(Metric("cryo_periodic_stall_seconds_sum"), "0.95");

  // Another node drives: this one lets each period pass, asking once per period.
  containers_ = {member("c1", "m1")};
  auto other = Make();
  drive_lookups_ = 0;
  EXPECT_THAT(Actions(other->Tick(kT0 + absl::Minutes(10))),
              ElementsAre("job ns/trainer not_driver"));
  EXPECT_THAT(Actions(other->Tick(kT0 + absl::Minutes(15))), ElementsAre("job ns/trainer not_due"));
  EXPECT_EQ(drive_lookups_, 1);
  EXPECT_THAT(Actions(other->Tick(kT0 + absl::Minutes(20))),
              ElementsAre("job ns/trainer not_driver"));
  EXPECT_EQ(ops_.size(), 1u);
  // A lookup that fails (a node's cryod unreachable) is a failure, counted, tried a period on.
  drives_ = absl::UnavailableError("node-b's cryod: connection refused");
  EXPECT_THAT(Actions(other->Tick(kT0 + absl::Minutes(30))), ElementsAre("job ns/trainer failed"));
  EXPECT_EQ(ops_.size(), 1u);
}

}  // namespace
}  // namespace cryo::periodic
