// The GPU cut's rounds across a job's members (JobGpuCut): who is waited for, what the job's word
// is, and how a node driven by another takes the driver's word.

#include "daemon/engine/job_cut.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cryo::engine {
namespace {

using ::testing::HasSubstr;

gpu::CutWord Word(uint64_t collectives, gpu::CutWord::Outcome o = gpu::CutWord::kOk,
                  std::string why = "") {
  gpu::CutWord w;
  w.collectives = collectives;
  w.outcome = o;
  w.why = std::move(why);
  return w;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

TEST(JobGpuCutTest, EveryPartyGetsTheJobsMostCollectivesAndWorstOutcome) {
  JobGpuCut cut({"member a", "member b", "member c"});
  std::vector<absl::StatusOr<gpu::CutWord>> got(3, absl::UnknownError("not met"));
  std::vector<std::thread> t;
  t.emplace_back([&] { got[0] = cut.Meet("member a", 0, Word(7), Soon()); });
  t.emplace_back([&] { got[1] = cut.Meet("member b", 0, Word(9), Soon()); });
  t.emplace_back(
      [&] { got[2] = cut.Meet("member c", 0, Word(3, gpu::CutWord::kBusy, "still ran"), Soon()); });
  for (auto& th : t) th.join();
  for (const auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->collectives, 9u);
    EXPECT_EQ(g->outcome, gpu::CutWord::kBusy);
    EXPECT_EQ(g->why, "still ran");
  }
  // The next round is a round of its own.
  std::thread b([&] { got[1] = cut.Meet("member b", 1, Word(0), Soon()); });
  std::thread c([&] { got[2] = cut.Meet("member c", 1, Word(0), Soon()); });
  got[0] = cut.Meet("member a", 1, Word(0), Soon());
  b.join();
  c.join();
  for (const auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->outcome, gpu::CutWord::kOk);
  }
}

TEST(JobGpuCutTest, AMemberWithoutGpuMemoryLeavesAndIsNotWaitedFor) {
  JobGpuCut cut({"member a", "member cpu"});
  absl::StatusOr<gpu::CutWord> got = absl::UnknownError("not met");
  std::thread a([&] { got = cut.Meet("member a", 0, Word(4), Soon()); });
  absl::SleepFor(absl::Milliseconds(50));
  cut.Leave("member cpu");
  a.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->collectives, 4u);
  cut.Leave("member cpu");  // again: nothing
}

TEST(JobGpuCutTest, AFailedMemberEndsTheOthersWaitsNamingIt) {
  JobGpuCut cut({"member a", "member b"});
  absl::StatusOr<gpu::CutWord> got = absl::UnknownError("not met");
  std::thread a([&] { got = cut.Meet("member a", 0, Word(1), Soon()); });
  absl::SleepFor(absl::Milliseconds(50));
  cut.Fail("member b", absl::NotFoundError("pid 42 is gone"));
  a.join();
  EXPECT_TRUE(absl::IsAborted(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("member b failed: pid 42 is gone"));
}

TEST(JobGpuCutTest, AWaitEndsAtItsDeadlineAndEndsTheOthersToo) {
  JobGpuCut cut({"member a", "member b", "member c"});
  auto got = cut.Meet("member a", 0, Word(1), absl::Now() + absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  auto late = cut.Meet("member b", 0, Word(1), Soon());
  EXPECT_TRUE(absl::IsAborted(late.status())) << late.status();
  EXPECT_THAT(late.status().message(), HasSubstr("member a waited past its deadline"));
}

TEST(JobGpuCutTest, ANodeDrivenByAnotherTakesTheDriversWordForItsMembers) {
  // The driver: its member and node b. Node b: its two members, each round passed up once with
  // their combined word (as the Peer stream carries it).
  JobGpuCut driver({"member a", "node b"});
  std::vector<int> rounds_up;
  JobGpuCut node({"member b1", "member b2"},
                 [&](int round, const gpu::CutWord& w) -> absl::StatusOr<gpu::CutWord> {
                   rounds_up.push_back(round);
                   EXPECT_EQ(w.collectives, 6u);
                   return driver.Meet("node b", round, w, Soon());
                 });
  std::vector<absl::StatusOr<gpu::CutWord>> got(3, absl::UnknownError("not met"));
  std::thread b1([&] { got[1] = node.Meet("member b1", 0, Word(6), Soon()); });
  std::thread b2([&] { got[2] = node.Meet("member b2", 0, Word(2), Soon()); });
  got[0] = driver.Meet("member a", 0, Word(11), Soon());
  b1.join();
  b2.join();
  for (const auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->collectives, 11u);
  }
  EXPECT_EQ(rounds_up, std::vector<int>{0});
}

TEST(JobGpuCutTest, ANodeWhoseMembersAllLeaveTellsTheDriverOnce) {
  int told = 0;
  JobGpuCut node({"member b1", "member b2"}, nullptr, [&] { ++told; });
  node.Leave("member b1");
  EXPECT_EQ(told, 0);
  node.Leave("member b2");
  node.Leave("member b2");
  EXPECT_EQ(told, 1);
}

TEST(JobGpuCutTest, TheDriversAbortEndsTheNodesMembersWaits) {
  JobGpuCut node({"member b1"}, [](int, const gpu::CutWord&) -> absl::StatusOr<gpu::CutWord> {
    return absl::AbortedError("the driving node aborted: member a failed: no space left");
  });
  auto got = node.Meet("member b1", 0, Word(1), Soon());
  EXPECT_TRUE(absl::IsAborted(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("no space left"));
}

TEST(JobGpuCutTest, AFailureOfTheJobCutFailsTheGpuCut) {
  auto gpu = std::make_shared<JobGpuCut>(std::vector<std::string>{"member a", "member b"});
  JobCut cut(2, gpu);
  cut.Fail("b", absl::InternalError("dump failed"));
  auto got = gpu->Meet("member a", 0, Word(1), Soon());
  EXPECT_TRUE(absl::IsAborted(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("member b failed: dump failed"));
}

}  // namespace
}  // namespace cryo::engine
