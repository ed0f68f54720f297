#include "lib/base/poll.h"

#include "gtest/gtest.h"

namespace cryo {
namespace {

TEST(PollTest, ReturnsWhenTheConditionHoldsOrTheTimeIsUp) {
  int calls = 0;
  EXPECT_TRUE(PollUntil([&] { return ++calls == 3; }, absl::Seconds(5), absl::Milliseconds(1)));
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_FALSE(PollUntil([&] { return ++calls < 0; }, absl::Milliseconds(20)));
  EXPECT_GE(calls, 2) << "one call at the start, one after the time is up";
  EXPECT_TRUE(PollUntil([] { return true; }, absl::ZeroDuration()));
}

}  // namespace
}  // namespace cryo
