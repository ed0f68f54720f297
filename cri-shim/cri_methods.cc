#include "cri-shim/cri_methods.h"

#include <array>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cryo::shim {
namespace {

struct Known {
  const char* name;
  bool unary;
};

constexpr std::array<Known, 35> kRuntimeMethods = {{
    {"Version", true},
    {"RunPodSandbox", true},
    {"StopPodSandbox", true},
    {"RemovePodSandbox", true},
    {"PodSandboxStatus", true},
    {"ListPodSandbox", true},
    {"StreamPodSandboxes", false},
    {"CreateContainer", true},
    {"StartContainer", true},
    {"StopContainer", true},
    {"RemoveContainer", true},
    {"ListContainers", true},
    {"StreamContainers", false},
    {"ContainerStatus", true},
    {"UpdateContainerResources", true},
    {"ReopenContainerLog", true},
    {"ExecSync", true},
    {"Exec", true},
    {"Attach", true},
    {"PortForward", true},
    {"ContainerStats", true},
    {"ListContainerStats", true},
    {"StreamContainerStats", false},
    {"PodSandboxStats", true},
    {"ListPodSandboxStats", true},
    {"StreamPodSandboxStats", false},
    {"UpdateRuntimeConfig", true},
    {"Status", true},
    {"CheckpointContainer", true},
    {"GetContainerEvents", false},
    {"ListMetricDescriptors", true},
    {"ListPodSandboxMetrics", true},
    {"StreamPodSandboxMetrics", false},
    {"RuntimeConfig", true},
    {"UpdatePodSandboxResources", true},
}};

constexpr std::array<Known, 6> kImageMethods = {{
    {"ListImages", true},
    {"StreamImages", false},
    {"ImageStatus", true},
    {"PullImage", true},
    {"RemoveImage", true},
    {"ImageFsInfo", true},
}};

template <size_t N>
MethodInfo Lookup(const std::array<Known, N>& table, absl::string_view service,
                  absl::string_view method) {
  MethodInfo info;
  for (const Known& k : table) {
    if (method == k.name) {
      info.known = true;
      info.unary = k.unary;
      info.label = absl::StrCat(service, "/", method);
      break;
    }
  }
  return info;
}

}  // namespace

MethodInfo ClassifyMethod(absl::string_view full_method) {
  absl::string_view m = full_method;
  if (absl::ConsumePrefix(&m, "/runtime.v1.RuntimeService/")) {
    return Lookup(kRuntimeMethods, "RuntimeService", m);
  }
  if (absl::ConsumePrefix(&m, "/runtime.v1.ImageService/")) {
    return Lookup(kImageMethods, "ImageService", m);
  }
  return MethodInfo();
}

}  // namespace cryo::shim
