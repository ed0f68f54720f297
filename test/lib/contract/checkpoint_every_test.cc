#include "lib/contract/checkpoint_every.h"

#include "gtest/gtest.h"

namespace cryo::contract {
namespace {

TEST(CheckpointEveryTest, PeriodsAreGoDurationsInWholeSeconds) {
  EXPECT_EQ(*ParseCheckpointEvery("20m"), absl::Minutes(20));
  EXPECT_EQ(*ParseCheckpointEvery("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseCheckpointEvery(" 90s "), absl::Seconds(90));
  EXPECT_EQ(*ParseCheckpointEvery("2.5s"), absl::Seconds(2));
}

TEST(CheckpointEveryTest, OffMeansNeverWhateverTheNodeSays) {
  for (const char* v : {"0", "off", "OFF", "never"}) {
    auto d = ParseCheckpointEvery(v);
    ASSERT_TRUE(d.ok()) << v;
    EXPECT_EQ(*d, absl::ZeroDuration()) << v;
  }
}

TEST(CheckpointEveryTest, AnythingElseIsRefusedSayingWhatIsAccepted) {
  for (const char* v : {"", "20", "twenty minutes", "-5m", "500ms", "inf", "1h-"}) {
    auto d = ParseCheckpointEvery(v);
    ASSERT_FALSE(d.ok()) << v;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_NE(d.status().message().find("\"20m\""), std::string::npos) << d.status();
  }
}

}  // namespace
}  // namespace cryo::contract
