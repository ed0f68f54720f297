// cryod's /metrics/shim: the shim's file served as it is, and a 503 naming why when there is
// none to serve (missing, stale).
#include "daemon/metrics/shim_metrics.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace cryo::metrics {
namespace {

class ShimMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cryo-shim-metrics-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/cri-shim.prom";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(ShimMetricsTest, TheFileIsServedAsTheShimWroteIt) {
  const std::string text =
      "# TYPE cryo_shim_container_operations_total counter\n"
      "cryo_shim_container_operations_total{op=\"checkpoint_on_stop\",result=\"ok\"} 3\n";
  std::ofstream(path_) << text;
  HttpResponse r = ShimMetricsResponse(path_, absl::Now());
  EXPECT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.body, text);
  EXPECT_TRUE(absl::StartsWith(r.content_type, "text/plain; version=0.0.4")) << r.content_type;
}

TEST_F(ShimMetricsTest, NoFileIsA503NamingThePathAndTheFlag) {
  HttpResponse r = ShimMetricsResponse(path_, absl::Now());
  EXPECT_EQ(r.code, 503);
  EXPECT_TRUE(absl::StrContains(r.body, path_)) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "--metrics-file")) << r.body;
}

TEST_F(ShimMetricsTest, AFileTheShimStoppedWritingIsA503SayingHowOld) {
  std::ofstream(path_) << "cryo_shim_requests_in_flight 0\n";
  // Written 61 s before "now": one second past what is served.
  HttpResponse r = ShimMetricsResponse(path_, absl::Now() + kShimMetricsMaxAge + absl::Seconds(1));
  EXPECT_EQ(r.code, 503);
  EXPECT_TRUE(absl::StrContains(r.body, "stale")) << r.body;
  EXPECT_EQ(ShimMetricsResponse(path_, absl::Now()).code, 200);
}

}  // namespace
}  // namespace cryo::metrics
