#include "lib/base/log.h"

#include "gtest/gtest.h"

namespace cryo {
namespace {

TEST(LogTest, LevelsParseAndAFollowingElseBindsToItsOwnIf) {
  EXPECT_EQ(*ParseLogLevel("WARNING"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
  SetLogLevel(LogLevel::kError);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  // The macro is one expression: this else belongs to the if, and nothing is formatted for a
  // level that is off.
  bool took_else = false;
  if (evaluated > 0)
    CRYO_LOG(Info) << count();
  else
    took_else = true;
  EXPECT_TRUE(took_else);
  CRYO_LOG(Debug) << count();
  EXPECT_EQ(evaluated, 0);
  SetLogLevel(LogLevel::kInfo);
}

}  // namespace
}  // namespace cryo
