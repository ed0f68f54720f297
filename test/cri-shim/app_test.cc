// Flags, method classification, startup steps and the socket path rules.
#include "cri-shim/app.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "cri-shim/cri_methods.h"
#include "cri-shim/flags.h"
#include "cri-shim/metadata.h"
#include "cri-shim/shim_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/cri-shim/shim_test_support.h"

namespace cryo::shim::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(FlagsTest, DefaultsPointAtContainerd) {
  absl::StatusOr<Options> o = ParseFlags({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->listen, "/run/cryo/cri-shim.sock");
  EXPECT_EQ(o->runtime_endpoint, "unix:///run/containerd/containerd.sock");
  EXPECT_FALSE(o->show_help);
}

TEST(FlagsTest, AcceptsBothSpellingsAndForms) {
  absl::StatusOr<Options> o =
      ParseFlags({"--listen=/tmp/a.sock", "--runtime-endpoint", "/var/run/crio/crio.sock",
                  "--cryod_socket=/tmp/cryod.sock", "--metrics-address=", "--log-level", "debug"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->listen, "/tmp/a.sock");
  EXPECT_EQ(o->runtime_endpoint, "unix:///var/run/crio/crio.sock");
  EXPECT_EQ(o->cryod_socket, "/tmp/cryod.sock");
  EXPECT_EQ(o->metrics_address, "");
  EXPECT_EQ(o->log_level, LogLevel::kDebug);
}

TEST(FlagsTest, RejectsWhatItCannotServe) {
  EXPECT_THAT(ParseFlags({"--bogus=1"}).status().message(), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(ParseFlags({"--listen"}).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(ParseFlags({"--runtime-endpoint=tcp://1.2.3.4:1"}).status().message(),
              HasSubstr("not a unix socket"));
  EXPECT_THAT(ParseFlags({"--log-level=loud"}).status().message(), HasSubstr("unknown log level"));
  EXPECT_THAT(ParseFlags({"stray"}).status().message(), HasSubstr("unexpected argument"));
  EXPECT_TRUE(ParseFlags({"--help"})->show_help);
}

TEST(FlagsTest, NormalizesUnixEndpoints) {
  EXPECT_EQ(*NormalizeUnixEndpoint("/a/b.sock"), "unix:///a/b.sock");
  EXPECT_EQ(*NormalizeUnixEndpoint("unix:/a/b.sock"), "unix:///a/b.sock");
  EXPECT_EQ(*NormalizeUnixEndpoint("unix:///a/b.sock"), "unix:///a/b.sock");
  EXPECT_FALSE(NormalizeUnixEndpoint("unix://relative").ok());
}

TEST(CriMethodsTest, ClassifiesKnownUnknownAndStreamingMethods) {
  MethodInfo v = ClassifyMethod("/runtime.v1.RuntimeService/Version");
  EXPECT_TRUE(v.known);
  EXPECT_TRUE(v.unary);
  EXPECT_EQ(v.label, "RuntimeService/Version");
  MethodInfo ev = ClassifyMethod("/runtime.v1.RuntimeService/GetContainerEvents");
  EXPECT_TRUE(ev.known);
  EXPECT_FALSE(ev.unary);
  EXPECT_EQ(ClassifyMethod("/runtime.v1.ImageService/PullImage").label, "ImageService/PullImage");
  for (const char* unknown : {"/runtime.v1alpha2.RuntimeService/Version",
                              "/runtime.v1.RuntimeService/FutureMethod", "/x.Y/Z", ""}) {
    MethodInfo m = ClassifyMethod(unknown);
    EXPECT_FALSE(m.known) << unknown;
    EXPECT_FALSE(m.unary) << unknown;  // unknown methods take the streaming relay: any shape
    EXPECT_EQ(m.label, "other") << unknown;
  }
}

TEST(MetadataTest, PassesApplicationMetadataOnly) {
  EXPECT_TRUE(IsForwardableMetadata("x-request-id"));
  EXPECT_TRUE(IsForwardableMetadata("traceparent"));
  EXPECT_TRUE(IsForwardableMetadata("x-trace-bin"));
  for (const char* k : {":authority", "grpc-timeout", "grpc-encoding", "content-type", "te",
                        "user-agent", "host", ""}) {
    EXPECT_FALSE(IsForwardableMetadata(k)) << k;
  }
}

int g_calls = 0;
std::vector<std::string>* g_trace = nullptr;
StepOutcome TraceOk(AppState&) {
  g_trace->push_back("ok");
  return StepOutcome::Ok();
}
StepOutcome TraceFatal(AppState&) {
  g_trace->push_back("fatal");
  return StepOutcome::Fatal("boom");
}
StepOutcome TraceStop(AppState&) {
  g_trace->push_back("stop");
  return StepOutcome::Stop("done early");
}
StepOutcome TraceTeardown(AppState&) {
  g_trace->push_back("teardown");
  ++g_calls;
  return StepOutcome::Ok();
}

TEST(RunStepsTest, StopsAtTheFirstFatalStepAndAlwaysTearsDown) {
  std::vector<std::string> trace;
  g_trace = &trace;
  AppState state;
  const Step startup[] = {{"a", TraceOk}, {"b", TraceFatal}, {"c", TraceOk}};
  const Step teardown[] = {{"t1", TraceTeardown}, {"t2", TraceTeardown}};
  EXPECT_EQ(RunSteps(state, startup, teardown), 1);
  EXPECT_THAT(trace, ElementsAre("ok", "fatal", "teardown", "teardown"));
}

TEST(RunStepsTest, StopIsACleanExit) {
  std::vector<std::string> trace;
  g_trace = &trace;
  AppState state;
  const Step startup[] = {{"a", TraceStop}, {"b", TraceOk}};
  const Step teardown[] = {{"t", TraceTeardown}};
  EXPECT_EQ(RunSteps(state, startup, teardown), 0);
  EXPECT_THAT(trace, ElementsAre("stop", "teardown"));
}

TEST(RunShimTest, HelpAndBadFlagsExitWithoutServing) {
  EXPECT_EQ(RunShim({"--help"}), 0);
  EXPECT_EQ(RunShim({"--no-such-flag"}), 1);
}

TEST(SocketPathTest, ReplacesAStaleSocketAndCreatesDirectories) {
  TempDir dir;
  std::string path = dir / "sub/dir/shim.sock";
  ASSERT_TRUE(PrepareSocketPath(path).ok());  // creates sub/dir
  // A socket file nobody listens on (a shim that crashed).
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(PrepareSocketPath(path).ok());
  EXPECT_NE(lstat(path.c_str(), &st), 0) << "stale socket was not removed";
}

TEST(SocketPathTest, RefusesALiveSocketAndOrdinaryFiles) {
  TempDir dir;
  std::string path = dir / "live.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  EXPECT_EQ(PrepareSocketPath(path).code(), absl::StatusCode::kAlreadyExists);
  close(fd);

  std::string file = dir / "file";
  std::ofstream(file) << "x";
  EXPECT_EQ(PrepareSocketPath(file).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cryo::shim::testing
