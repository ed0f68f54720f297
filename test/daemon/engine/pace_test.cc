// The pace of a node's checkpoints (daemon/engine/pace.h): what the plan at a stop and the
// periodic schedule predict from.
#include "daemon/engine/pace.h"

#include "gtest/gtest.h"

namespace cryo::engine {
namespace {

TEST(CheckpointPaceTest, NothingMeasuredPredictsNothing) {
  CheckpointPace p;
  EXPECT_FALSE(p.Predict("w", 1 << 30).has_value());
  p.Add("w", 0, absl::Seconds(1));
  p.Add("w", 1 << 20, absl::ZeroDuration());
  EXPECT_FALSE(p.Predict("w", 1 << 30).has_value()) << "empty samples are not samples";
}

TEST(CheckpointPaceTest, AJobIsPredictedFromItsOwnCheckpointsElseFromTheNodes) {
  CheckpointPace p;
  p.Add("fast", 10 << 20, absl::Seconds(1));  // 10 MiB/s
  p.Add("slow", 1 << 20, absl::Seconds(1));   // 1 MiB/s
  EXPECT_EQ(*p.Predict("slow", 4 << 20), absl::Seconds(4));
  EXPECT_EQ(*p.Predict("fast", 20 << 20), absl::Seconds(2));
  // A new job: the node's median of 1 and 10 MiB/s, 5.5 MiB/s.
  EXPECT_EQ(*p.Predict("new", 11 << 20), absl::Seconds(2));
}

TEST(CheckpointPaceTest, TheMedianOfTheRecentOnesNeitherHidesNorFollowsOneOutlier) {
  CheckpointPace p;
  for (int i = 0; i < 4; ++i) p.Add("w", 100 << 20, absl::Seconds(1));
  p.Add("w", 100 << 20, absl::Seconds(100));  // one checkpoint through a busy store
  EXPECT_EQ(*p.Predict("w", 100 << 20), absl::Seconds(1));
  // Only the newest kSamples count: a store that became slow is followed.
  for (size_t i = 0; i < CheckpointPace::kSamples; ++i) p.Add("w", 100 << 20, absl::Seconds(10));
  EXPECT_EQ(*p.Predict("w", 100 << 20), absl::Seconds(10));
}

}  // namespace
}  // namespace cryo::engine
