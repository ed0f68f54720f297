// The shim's registry scraped over HTTP as Prometheus does: the shim's own series exist at 0
// from the start, with the build and process metrics, served as Prometheus' text format.
#include "cri-shim/metrics.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cri-shim/metrics_file.h"
#include "gtest/gtest.h"
#include "lib/metrics/registry.h"
#include "prometheus/exposer.h"
#include "test/http_get_local.h"

namespace cryo::shim {
namespace {

TEST(ShimMetricsTest, ScrapedAtStartEveryOwnSeriesIsThereAtZero) {
  auto registry = metrics::NewRegistry("cryo-cri-shim");
  auto m = ShimMetrics::Create(registry);
  ASSERT_TRUE(m.ok()) << m.status();
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(registry);
  const std::string text = HttpGetLocal(exposer.GetListeningPorts().at(0), "/metrics");
  // prometheus-cpp's exposer (civetweb) declares the charset; the version is the default one.
  EXPECT_TRUE(absl::StrContains(text, "Content-Type: text/plain; charset=utf-8"))
      << text.substr(0, 300);
  for (const auto& o : ContainerOps()) {
    for (const char* r : o.results) {
      const std::string want = absl::StrCat("cryo_shim_container_operations_total{op=\"", o.op,
                                            "\",result=\"", r, "\"} 0");
      EXPECT_TRUE(absl::StrContains(text, want)) << want;
    }
  }
  for (const char* method : kOwnedMethodLabels) {
    for (const char* d : kOwnedDecisions) {
      const std::string want = absl::StrCat("cryo_shim_owned_decisions_total{decision=\"", d,
                                            "\",method=\"", method, "\"} 0");
      EXPECT_TRUE(absl::StrContains(text, want)) << want;
    }
    EXPECT_TRUE(
        absl::StrContains(text, absl::StrCat("cryo_shim_request_duration_seconds_bucket{method=\"",
                                             method, "\",le=\"3600\"} 0")));
  }
  EXPECT_TRUE(absl::StrContains(text, "cryo_shim_runtime_unavailable_total 0"));
  EXPECT_TRUE(absl::StrContains(text, absl::StrCat("cryo_build_info{component=\"cryo-cri-shim\","
                                                   "version=\"",
                                                   CRYO_VERSION, "\"} 1")));
  for (const char* p : {"process_cpu_seconds_total ", "process_resident_memory_bytes ",
                        "process_open_fds ", "process_start_time_seconds "}) {
    EXPECT_TRUE(absl::StrContains(text, p)) << p;
  }
}

// The alert on failed checkpoints before a stop reads these two series: the first failure is
// an increase from 0, not a series appearing at 1.
TEST(ShimMetricsTest, TheFirstFailureIsAnIncreaseOfAnExistingSeries) {
  auto registry = metrics::NewRegistry("cryo-cri-shim");
  auto m = ShimMetrics::Create(registry);
  ASSERT_TRUE(m.ok());
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(registry);
  const int port = exposer.GetListeningPorts().at(0);
  EXPECT_TRUE(absl::StrContains(
      HttpGetLocal(port, "/metrics"),
      "cryo_shim_container_operations_total{op=\"checkpoint_on_stop\",result=\"failed\"} 0"));
  (*m)->ContainerOperation("checkpoint_on_stop", "failed").Increment();
  EXPECT_TRUE(absl::StrContains(
      HttpGetLocal(port, "/metrics"),
      "cryo_shim_container_operations_total{op=\"checkpoint_on_stop\",result=\"failed\"} 1"));
}

// --metrics-file: the same series in a file, rewritten as they move, gone when the shim stops.
TEST(MetricsFileTest, WrittenAtStartRewrittenAsTheSeriesMoveAndRemovedAtTheStop) {
  auto registry = metrics::NewRegistry("cryo-cri-shim");
  auto m = ShimMetrics::Create(registry);
  ASSERT_TRUE(m.ok()) << m.status();
  char tmpl[] = "/tmp/cryo-metrics-file-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/cri-shim.prom";
  auto slurp = [&] {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string series =
      "cryo_shim_container_operations_total{op=\"checkpoint_on_stop\",result=\"ok\"} ";
  {
    auto w = MetricsFileWriter::Start(registry, path, absl::Milliseconds(50));
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(absl::StrContains(slurp(), series + "0")) << slurp();
    (*m)->ContainerOperation("checkpoint_on_stop", "ok").Increment();
    bool moved = false;
    for (int i = 0; i < 200 && !moved; ++i) {
      moved = absl::StrContains(slurp(), series + "1");
      if (!moved) ::usleep(20000);
    }
    EXPECT_TRUE(moved) << slurp();
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "the file outlived its writer";
  // A directory that does not exist: refused at the start, naming the path.
  auto bad = MetricsFileWriter::Start(registry, dir + "/no/such/dir/x.prom", absl::Seconds(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), dir + "/no/such/dir")) << bad.status();
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace cryo::shim
