// The runner of operations on its own (daemon/engine/operation_runner.h): each body on a thread
// of its own, its result recorded and counted, nothing escaping a thread, and a shutdown that
// refuses new work, cancels what outlives the grace and joins every thread.
#include "daemon/engine/operation_runner.h"

#include <atomic>
#include <stdexcept>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace cryo::engine {
namespace {

// Waits (bounded) for the operation's end.
bool Ended(Operation& op) {
  uint64_t seen = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!op.done() && absl::Now() < deadline) seen = op.WaitForChange(seen, deadline);
  return op.done();
}

std::string Metrics(const metrics::Metrics& m) {
  return prometheus::TextSerializer().Serialize(m.registry()->Collect());
}

TEST(OperationRunnerTest, RunsEachBodyOnAThreadOfItsOwnAndRecordsItsResult) {
  OperationRegistry ops;
  metrics::Metrics m;
  OperationRunner runner(&ops, &m);
  auto op = runner.Start("op-ok", "restore", "ckpt-1", [](Operation&) {
    RestoreResult r;
    r.checkpoint_id = "ckpt-1";
    r.root_pid = 42;
    return absl::StatusOr<OperationResult>(r);
  });
  ASSERT_TRUE(op.ok()) << op.status();
  ASSERT_TRUE(Ended(**op));
  EXPECT_TRUE((*op)->status().ok());
  const OperationResult result = (*op)->result();
  ASSERT_TRUE(std::holds_alternative<RestoreResult>(result));
  EXPECT_EQ(std::get<RestoreResult>(result).root_pid, 42);
  EXPECT_NE(ops.Find("op-ok"), nullptr) << "an ended operation stays findable for late watchers";
  EXPECT_TRUE(
      absl::StrContains(Metrics(m), "cryo_operations_total{op=\"restore\",result=\"ok\"} 1"))
      << Metrics(m);
  // Ids are unique while known; one of cryod's own making has the kind's first letters.
  auto again = runner.Start("op-ok", "restore", "ckpt-1",
                            [](Operation&) { return absl::StatusOr<OperationResult>(); });
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  auto made = runner.Start("", "checkpoint", "pid 1",
                           [](Operation&) { return absl::StatusOr<OperationResult>(); });
  ASSERT_TRUE(made.ok());
  EXPECT_TRUE(absl::StartsWith((*made)->id(), "ch-")) << (*made)->id();
  EXPECT_EQ(runner
                .Start("../x", "checkpoint", "pid 1",
                       [](Operation&) { return absl::StatusOr<OperationResult>(); })
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A body that holds until cancelled (then rolls back), as a checkpoint before its publish does.
OperationRunner::Body HoldUntilCancelled() {
  return [](Operation& op) -> absl::StatusOr<OperationResult> {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!op.cancelled() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    return absl::CancelledError(op.cancel_reason());
  };
}

// The priority decides who gives way, not the id: a stop's operation cancels the background
// ones on its target (whatever their ids) and starts once they ended; a client's call and the
// background on other targets are left alone.
TEST(OperationRunnerTest, AStopsOperationStartsOnceTheBackgroundOnItsTargetGaveWay) {
  OperationRegistry ops;
  OperationRunner runner(&ops, nullptr);
  using Opt = OperationRunner::StartOptions;
  auto background = runner.Start("bg-1", "checkpoint", "container a", HoldUntilCancelled(),
                                 Opt{Priority::kBackground, {}});
  auto other = runner.Start("periodic-other", "checkpoint", "container b", HoldUntilCancelled(),
                            Opt{Priority::kBackground, {}});
  auto client = runner.Start("periodic-looking", "checkpoint", "container a", HoldUntilCancelled());
  ASSERT_TRUE(background.ok() && other.ok() && client.ok());
  std::atomic<bool> background_done_at_stop{false};
  auto stop = runner.Start(
      "stop-1", "checkpoint", "container a",
      [&](Operation&) -> absl::StatusOr<OperationResult> {
        background_done_at_stop = (*background)->done();
        return CheckpointResult();
      },
      Opt{Priority::kStop, absl::Now() + absl::Seconds(30)});
  ASSERT_TRUE(stop.ok()) << stop.status();
  ASSERT_TRUE(Ended(**stop));
  EXPECT_TRUE((*stop)->status().ok());
  EXPECT_EQ((*stop)->priority(), Priority::kStop);
  EXPECT_TRUE(background_done_at_stop) << "the stop ran while the background one still held";
  EXPECT_EQ((*background)->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ((*background)->cancel_reason(), "the container is being stopped");
  EXPECT_FALSE((*other)->cancelled()) << "another target's background operation";
  EXPECT_FALSE((*client)->cancelled()) << "a client's operation, whatever its id";
  (*other)->Cancel("test over");
  (*client)->Cancel("test over");
  EXPECT_TRUE(Ended(**other) && Ended(**client));
}

TEST(OperationRunnerTest, AFailureOrAnExceptionEndsTheOperationNotCryod) {
  OperationRegistry ops;
  metrics::Metrics m;
  OperationRunner runner(&ops, &m);
  auto failed = runner.Start("op-failed", "checkpoint", "pid 1", [](Operation&) {
    return absl::StatusOr<OperationResult>(absl::ResourceExhaustedError("store full"));
  });
  auto threw = runner.Start(
      "op-threw", "checkpoint", "pid 2",
      [](Operation&) -> absl::StatusOr<OperationResult> { throw std::runtime_error("boom"); });
  ASSERT_TRUE(failed.ok() && threw.ok());
  ASSERT_TRUE(Ended(**failed) && Ended(**threw));
  EXPECT_EQ((*failed)->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*threw)->status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains((*threw)->status().message(), "op-threw threw: boom"))
      << (*threw)->status();
  const std::string text = Metrics(m);
  EXPECT_TRUE(absl::StrContains(
      text, "cryo_operations_total{op=\"checkpoint\",result=\"resource_exhausted\"} 1"));
  EXPECT_TRUE(
      absl::StrContains(text, "cryo_operations_total{op=\"checkpoint\",result=\"internal\"} 1"));
}

TEST(OperationRunnerTest, ShutdownRefusesNewWorkCancelsWhatOutlivesTheGraceAndJoinsIt) {
  OperationRegistry ops;
  metrics::Metrics m;
  OperationRunner runner(&ops, &m);
  std::atomic<bool> started{false};
  // An operation that ends only when cancelled (as one at a step before its commit does).
  auto op = runner.Start("op-long", "checkpoint", "pid 1",
                         [&](Operation& self) -> absl::StatusOr<OperationResult> {
                           started = true;
                           while (!self.cancelled()) absl::SleepFor(absl::Milliseconds(5));
                           return absl::CancelledError(self.cancel_reason());
                         });
  ASSERT_TRUE(op.ok());
  while (!started) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(runner.running(), 1);
  runner.Shutdown(absl::Milliseconds(50));
  // Returned: the thread is joined, the operation ended, cancelled with the reason.
  EXPECT_TRUE((*op)->done());
  EXPECT_EQ((*op)->status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(absl::StrContains((*op)->status().message(), "shutting down")) << (*op)->status();
  EXPECT_EQ(runner.running(), 0);
  EXPECT_TRUE(runner.shutting_down());
  auto late = runner.Start("op-late", "checkpoint", "pid 2",
                           [](Operation&) { return absl::StatusOr<OperationResult>(); });
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
}

TEST(OperationRunnerTest, AnOperationThatEndsWithinTheGraceIsNotCancelled) {
  OperationRegistry ops;
  OperationRunner runner(&ops, nullptr);
  auto op = runner.Start("op-short", "checkpoint", "pid 1",
                         [](Operation&) -> absl::StatusOr<OperationResult> {
                           absl::SleepFor(absl::Milliseconds(100));
                           return CheckpointResult();
                         });
  ASSERT_TRUE(op.ok());
  runner.Shutdown(absl::Seconds(30));
  EXPECT_TRUE((*op)->status().ok()) << (*op)->status();
  EXPECT_FALSE((*op)->cancelled());
}

}  // namespace
}  // namespace cryo::engine
