// The shim's registry scraped over HTTP as Prometheus does: the shim's own series exist at 0
// from the start, with the build and process metrics, served as Prometheus' text format.
#include "cri-shim/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/metrics/registry.h"
#include "prometheus/exposer.h"

namespace cryo::shim {
namespace {

std::string Get(int port, const std::string& path) {
  std::string out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\n\r\n");
    (void)!::write(fd, req.data(), req.size());
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  }
  ::close(fd);
  return out;
}

TEST(ShimMetricsTest, ScrapedAtStartEveryOwnSeriesIsThereAtZero) {
  auto registry = metrics::NewRegistry("cryo-cri-shim");
  auto m = ShimMetrics::Create(registry);
  ASSERT_TRUE(m.ok()) << m.status();
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(registry);
  const std::string text = Get(exposer.GetListeningPorts().at(0), "/metrics");
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
      Get(port, "/metrics"),
      "cryo_shim_container_operations_total{op=\"checkpoint_on_stop\",result=\"failed\"} 0"));
  (*m)->ContainerOperation("checkpoint_on_stop", "failed").Increment();
  EXPECT_TRUE(absl::StrContains(
      Get(port, "/metrics"),
      "cryo_shim_container_operations_total{op=\"checkpoint_on_stop\",result=\"failed\"} 1"));
}

}  // namespace
}  // namespace cryo::shim
