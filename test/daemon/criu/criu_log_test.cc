#include "daemon/criu/criu.h"
#include "gtest/gtest.h"

namespace cryo::criu {
namespace {

TEST(CriuLog, MapsKnownFailuresToActionableCodes) {
  struct Case {
    const char* log;
    absl::StatusCode code;
  } cases[] = {
      {"(00.1) Error (criu/image.c:1): Can't write: No space left on device\n",
       absl::StatusCode::kResourceExhausted},
      {"(00.1) Error (criu/util.c:2): Can't open: Read-only file system\n",
       absl::StatusCode::kFailedPrecondition},
      {"(00.0) Error (compel/src/lib/infect.c:3): Can't seize 123: No such process\n",
       absl::StatusCode::kAborted},
      {"(00.2) Error (criu/cr-restore.c:4): Can't fork for 4242: File exists\n",
       absl::StatusCode::kFailedPrecondition},
      {"(00.3) Error (criu/x.c:5): something else\n", absl::StatusCode::kInternal},
  };
  for (const auto& c : cases) {
    absl::Status s =
        StatusFromLog("criu dump", c.log, "/var/lib/cryo/ops/x/dump.log", "exit code 1");
    EXPECT_EQ(s.code(), c.code) << c.log;
    EXPECT_NE(s.message().find("/var/lib/cryo/ops/x/dump.log"), std::string::npos)
        << "the message names the log";
  }
  absl::Status s = StatusFromLog("criu dump", "(00.3) Error (criu/x.c:5): bad thing\n", "l", "e");
  EXPECT_NE(s.message().find("bad thing"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("criu/x.c"), std::string::npos) << "source prefix dropped: " << s;
}

TEST(CompareVersionsTest, OrdersDottedNumbers) {
  EXPECT_EQ(CompareVersions("4.1.1", "4.1.1"), 0);
  EXPECT_EQ(CompareVersions("4.1", "4.1.0"), 0) << "a missing part counts as 0";
  EXPECT_LT(*CompareVersions("4.1", "4.1.1"), 0);
  EXPECT_LT(*CompareVersions("4.1.1", "4.2"), 0);
  EXPECT_GT(*CompareVersions("4.10", "4.9"), 0) << "numbers, not strings";
  EXPECT_GT(*CompareVersions("5.0", "4.99.99"), 0);
  EXPECT_FALSE(CompareVersions("4.1-rc1", "4.1").has_value());
  EXPECT_FALSE(CompareVersions("", "4.1").has_value()) << "an unknown version is not older";
}

}  // namespace
}  // namespace cryo::criu
