// cryod's registry rendered as Prometheus scrapes it: every series exists at 0 from the start,
// the build and the process are there, and the label values are the engine's.
#include "daemon/metrics/metrics.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/engine/types.h"
#include "gtest/gtest.h"
#include "lib/metrics/registry.h"
#include "prometheus/text_serializer.h"

namespace cryo::metrics {
namespace {

std::string Render(const Metrics& m) {
  return prometheus::TextSerializer().Serialize(m.registry()->Collect());
}

TEST(Metrics, EveryKnownSeriesExistsAtZeroFromTheStart) {
  Metrics m;
  const std::string text = Render(m);
  for (const char* op : kOps) {
    for (const std::string& r : Results()) {
      const std::string want =
          absl::StrCat("cryo_operations_total{op=\"", op, "\",result=\"", r, "\"} 0");
      EXPECT_TRUE(absl::StrContains(text, want)) << want;
    }
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("cryo_operation_duration_seconds_bucket{op=\"",
                                                     op, "\",le=\"3600\"} 0")));
  }
  for (const contract::StageInfo& i : contract::kStages) {
    EXPECT_EQ(
        absl::StrContains(text, absl::StrCat("cryo_failed_stage_total{op=\"checkpoint\",stage=\"",
                                             i.name, "\"} 0")),
        i.checkpoint)
        << i.name;
    EXPECT_EQ(
        absl::StrContains(text, absl::StrCat("cryo_stage_duration_seconds_count{op=\"restore\","
                                             "stage=\"",
                                             i.name, "\"} 0")),
        i.restore)
        << i.name;
  }
  for (const char* a : kRecoveryActions) {
    EXPECT_TRUE(absl::StrContains(
        text, absl::StrCat("cryo_recovered_operations_total{action=\"", a, "\"} 0")));
  }
  EXPECT_TRUE(absl::StrContains(
      text, "cryo_operations_total{op=\"checkpoint\",result=\"resource_exhausted\"} 0"));
}

TEST(Metrics, AnEventMovesItsSeriesOnly) {
  Metrics m;
  m.CountOperation("checkpoint", "internal");
  m.ObserveOperation("checkpoint", 2000);  // a 33-minute checkpoint lands below 3600 s
  const std::string text = Render(m);
  EXPECT_TRUE(
      absl::StrContains(text, "cryo_operations_total{op=\"checkpoint\",result=\"internal\"} 1"));
  EXPECT_TRUE(absl::StrContains(text, "cryo_operations_total{op=\"checkpoint\",result=\"ok\"} 0"));
  EXPECT_TRUE(absl::StrContains(
      text, "cryo_operation_duration_seconds_bucket{op=\"checkpoint\",le=\"1800\"} 0"));
  EXPECT_TRUE(absl::StrContains(
      text, "cryo_operation_duration_seconds_bucket{op=\"checkpoint\",le=\"3600\"} 1"));
}

TEST(Metrics, BuildInfoAndProcessMetrics) {
  Metrics m;
  const std::string text = Render(m);
  EXPECT_TRUE(absl::StrContains(
      text, absl::StrCat("cryo_build_info{component=\"cryod\",version=\"", CRYO_VERSION, "\"} 1")));
  for (const char* name :
       {"# TYPE process_cpu_seconds_total counter", "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_start_time_seconds gauge",
        "# TYPE process_max_fds gauge"}) {
    EXPECT_TRUE(absl::StrContains(text, name)) << name;
  }
  ProcessStats s = ReadProcessStats();
  EXPECT_GT(s.resident_bytes, 1 << 20);
  EXPECT_GT(s.open_fds, 2);  // stdin, stdout, stderr at least
  EXPECT_GE(s.max_fds, s.open_fds);
  EXPECT_GT(s.start_time_seconds, 1.7e9);  // after 2023: btime + the start tick, in Unix s
}

// Every stage the engine can report is in the one table, once, under a name of its own and
// with an operation that reports it (else its series would be born at its first failure).
TEST(Metrics, EveryStageIsInTheTableOnce) {
  std::set<std::string> names;
  std::set<int> numbers;
  for (const contract::StageInfo& i : contract::kStages) {
    EXPECT_TRUE(names.insert(i.name).second) << i.name;
    EXPECT_TRUE(numbers.insert(static_cast<int>(i.stage)).second) << i.name;
    EXPECT_TRUE(i.checkpoint || i.restore) << i.name;
  }
  for (int i = 1; i <= static_cast<int>(contract::Stage::kDumpWrite); ++i) {
    EXPECT_TRUE(numbers.count(i)) << "stage " << i << " has no row";
    EXPECT_NE(engine::StageName(static_cast<engine::Stage>(i)), "unknown") << i;
  }
}

}  // namespace
}  // namespace cryo::metrics
