// Latency of unary CRI calls forwarded by cryo-cri-shim against calling containerd directly,
// measured in the same run on the same private containerd node (needs root).
//
//   cri_shim_bench [--iterations N]
//
// Calls alternate between the two paths so that both see the same machine noise.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "e2e/containerd/cri_client.h"
#include "e2e/containerd/e2e_world.h"

namespace cryo::e2e {
namespace {

using Clock = std::chrono::steady_clock;

std::string LoadAverage() {
  FILE* f = fopen("/proc/loadavg", "r");
  char buf[128] = {};
  if (f != nullptr) {
    if (fgets(buf, sizeof(buf), f) == nullptr) buf[0] = 0;
    fclose(f);
  }
  std::string s(buf);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// User+system CPU time of a process, in microseconds.
double CpuMicros(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  if (fields.size() < 13) return 0;
  double ticks = std::stod(fields[11]) + std::stod(fields[12]);  // utime, stime
  return ticks * 1e6 / sysconf(_SC_CLK_TCK);
}

pid_t ReadPid(const std::string& path) {
  std::ifstream f(path);
  pid_t pid = 0;
  f >> pid;
  return pid;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

// One call; returns its latency in microseconds, or a negative value on error.
using Probe = std::function<bool(CriClient&)>;

int Run(int iterations) {
  absl::StatusOr<std::unique_ptr<E2eWorld>> world = E2eWorld::Create({"node-a"});
  if (!world.ok()) {
    fprintf(stderr, "setup failed: %s\n", world.status().ToString().c_str());
    return 1;
  }
  CriClient direct((*world)->NodeSocket("node-a"));
  CriClient shim((*world)->ShimSocket("node-a"));

  cri::PodSandboxConfig pod =
      MakePodConfig("bench", "uid-bench", (*world)->PodLogDir("node-a", "bench"),
                    (*world)->CgroupParent("node-a"));
  absl::StatusOr<std::string> pod_id = direct.RunPodSandbox(pod);
  if (!pod_id.ok()) {
    fprintf(stderr, "RunPodSandbox: %s\n", pod_id.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::string> ctr_id =
      direct.CreateContainer(*pod_id, MakeContainerConfig("bench", {"sleep", "3600"}), pod);
  if (!ctr_id.ok() || !direct.StartContainer(*ctr_id).ok()) {
    fprintf(stderr, "container setup failed\n");
    return 1;
  }

  struct Case {
    const char* name;
    Probe probe;
  };
  std::string id = *ctr_id;
  std::vector<Case> cases = {
      {"Version",
       [](CriClient& c) {
         cri::VersionRequest req;
         cri::VersionResponse resp;
         return c.Call(c.runtime(), &cri::RuntimeService::Stub::Version, req, &resp).ok();
       }},
      {"ListContainers",
       [](CriClient& c) {
         cri::ListContainersRequest req;
         cri::ListContainersResponse resp;
         return c.Call(c.runtime(), &cri::RuntimeService::Stub::ListContainers, req, &resp).ok();
       }},
      {"ContainerStatus",
       [id](CriClient& c) {
         cri::ContainerStatusRequest req;
         req.set_container_id(id);
         cri::ContainerStatusResponse resp;
         return c.Call(c.runtime(), &cri::RuntimeService::Stub::ContainerStatus, req, &resp).ok();
       }},
  };

  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  printf(
      "cri_shim_bench: %d calls per method and path, alternating, sequential; host %s, %ld CPUs\n",
      iterations, host, sysconf(_SC_NPROCESSORS_ONLN));
  printf("load average before: %s\n", LoadAverage().c_str());
  printf("%-16s %-8s %9s %9s %9s %9s\n", "method", "path", "p50 us", "p90 us", "p99 us", "max us");
  pid_t shim_pid = (*world)->shim("node-a").pid();
  pid_t containerd_pid = ReadPid(absl::StrCat((*world)->dir(), "/node-a/containerd.pid"));
  int failures = 0;
  double shim_cpu = 0, containerd_cpu = 0;
  int64_t shim_calls = 0;
  for (const Case& c : cases) {
    for (int i = 0; i < 200; ++i) {  // warm up both paths (connections, caches)
      c.probe(direct);
      c.probe(shim);
    }
    double shim_cpu0 = CpuMicros(shim_pid), containerd_cpu0 = CpuMicros(containerd_pid);
    std::vector<double> d, s;
    d.reserve(iterations);
    s.reserve(iterations);
    for (int i = 0; i < iterations; ++i) {
      for (int which = 0; which < 2; ++which) {
        bool via_shim = (which == 0) == (i % 2 == 0);
        auto t0 = Clock::now();
        bool ok = c.probe(via_shim ? shim : direct);
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!ok) ++failures;
        (via_shim ? s : d).push_back(us);
      }
    }
    shim_cpu += CpuMicros(shim_pid) - shim_cpu0;
    containerd_cpu += CpuMicros(containerd_pid) - containerd_cpu0;
    shim_calls += iterations;
    printf("%-16s %-8s %9.0f %9.0f %9.0f %9.0f\n", c.name, "direct", Percentile(d, 50),
           Percentile(d, 90), Percentile(d, 99), Percentile(d, 100));
    printf("%-16s %-8s %9.0f %9.0f %9.0f %9.0f\n", c.name, "shim", Percentile(s, 50),
           Percentile(s, 90), Percentile(s, 99), Percentile(s, 100));
    printf("%-16s %-8s %+9.0f %9s %+9.0f\n", c.name, "added", Percentile(s, 50) - Percentile(d, 50),
           "", Percentile(s, 99) - Percentile(d, 99));
  }
  printf("CPU per call: shim %.0f us; containerd %.0f us (both paths)\n", shim_cpu / shim_calls,
         containerd_cpu / (2.0 * shim_calls));
  printf("load average after: %s\n", LoadAverage().c_str());
  (void)direct.StopContainer(id, 0);
  (void)direct.RemoveContainer(id);
  (void)direct.StopPodSandbox(*pod_id);
  (void)direct.RemovePodSandbox(*pod_id);
  if (failures > 0) {
    fprintf(stderr, "%d calls failed\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace cryo::e2e

int main(int argc, char** argv) {
  int iterations = 2000;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: cri_shim_bench [--iterations N]\n");
      return 2;
    }
  }
  if (geteuid() != 0) {
    fprintf(stderr, "cri_shim_bench needs root (it runs a private containerd)\n");
    return 2;
  }
  return cryo::e2e::Run(std::max(iterations, 10));
}
