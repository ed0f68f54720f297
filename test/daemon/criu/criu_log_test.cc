#include "absl/strings/str_cat.h"
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

TEST(CriuOptionsTest, CriusAdviceBecomesCrysOptionInThreeForms) {
  const std::pair<const char*, const char*> cases[] = {
      {"Error (criu/files-reg.c:1031): Can't dump ghost file /tmp/x of 8392704 size, increase "
       "limit",
       "ghost-limit"},
      {"Error (criu/files-reg.c:1122): Can't create link remap for /d/a. Use link-remap option.",
       "link-remap"},
      {"Error (criu/sk-unix.c:874): External socket is used. Consider using --ext-unix-sk option.",
       "ext-unix-sk"},
      {"Error (criu/sk-inet.c:178): In-flight connections can be ignored with the "
       "--skip-in-flight option.",
       "skip-in-flight"},
      {"Error (criu/sk-inet.c:191): Connected TCP socket, consider using --tcp-established "
       "option.",
       "tcp-established"},
      // Found in review: a log asking for --tcp-close also mentions connected sockets, and the
      // error named only --tcp-established.
      {"Error (criu/sk-inet.c:191): Connected TCP socket, consider using --tcp-established "
       "option.\nError (criu/image.c:94): Need to set the --tcp-close options.",
       "tcp-close"},
  };
  for (const auto& [log, option] : cases) {
    absl::Status s = StatusFromLog("criu dump", log, "/ops/x/dump.log", "exit code 1");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    const std::string key = [o = std::string(option)]() mutable {
      for (char& c : o) c = c == '-' ? '_' : c;
      return o;
    }();
    EXPECT_NE(s.message().find(absl::StrCat("cryo checkpoint --", option)), std::string::npos) << s;
    EXPECT_NE(s.message().find(absl::StrCat("criu_", key)), std::string::npos) << s;
    EXPECT_NE(s.message().find(absl::StrCat("cryo.dev/criu-", option)), std::string::npos) << s;
    EXPECT_NE(s.message().find("/ops/x/dump.log"), std::string::npos) << "the log is still named";
  }
}

TEST(CriuOptionsTest, RequestsOverrideTheNodeAndTcpFollowsTheNetworkNamespace) {
  NodeDefaults node;
  JobOptions o;
  ASSERT_TRUE(Resolve(node, {}, /*own_netns=*/false, &o).ok());
  EXPECT_TRUE(o.link_remap);
  EXPECT_EQ(o.ghost_limit, 64ull << 20);
  EXPECT_FALSE(o.tcp_established) << "auto: off for a job sharing the host's network";
  ASSERT_TRUE(Resolve(node, {}, /*own_netns=*/true, &o).ok());
  EXPECT_TRUE(o.tcp_established) << "auto: on in a network namespace of its own";
  OptionOverrides asked;
  asked.link_remap = false;
  asked.ghost_limit = 1 << 20;
  asked.tcp_close = true;
  ASSERT_TRUE(Resolve(node, asked, true, &o).ok());
  EXPECT_FALSE(o.link_remap);
  EXPECT_EQ(o.ghost_limit, 1u << 20);
  EXPECT_TRUE(o.tcp_close);
  EXPECT_FALSE(o.tcp_established) << "tcp-close dumps without the network lock";
  EXPECT_EQ(o.DumpArgs(), (std::vector<std::string>{"--tcp-close", "--ghost-limit", "1048576"}));
  EXPECT_EQ(o.RestoreArgs(), (std::vector<std::string>{"--tcp-close"}));
  JobOptions tcp;
  tcp.tcp_established = true;
  EXPECT_EQ(tcp.RestoreArgs(),
            (std::vector<std::string>{"--tcp-established", "--network-lock", "nftables"}));
  EXPECT_EQ(tcp.RestoreArgs(/*network_lock_held=*/true),
            (std::vector<std::string>{"--tcp-established", "--network-lock", "skip"}))
      << "a job's members restored together under cryod's own lock";
  asked.ghost_limit = kMaxGhostLimit + 1;
  EXPECT_EQ(Resolve(node, asked, true, &o).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cryo::criu
