#include "cri-shim/opt_in.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"

namespace cryo::shim {
namespace {

std::string Get(const StringMap& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "" : std::string(absl::StripAsciiWhitespace(it->second));
}

}  // namespace

std::string DefaultWorkloadKey(const StringMap& pod_labels, const std::string& pod_namespace,
                               const std::string& pod_name, const std::string& container_name) {
  std::string owner = Get(pod_labels, contract::k8s::kJobName);
  if (owner.empty()) owner = Get(pod_labels, contract::k8s::kJobNameLegacy);
  if (owner.empty()) return absl::StrCat(pod_namespace, ".", pod_name, ".", container_name);
  // The Job's uid too: its replacement pods share it, a new Job of the same name does not (and
  // starts fresh instead of resuming a deleted Job's state).
  std::string uid = Get(pod_labels, contract::k8s::kControllerUid);
  if (uid.empty()) uid = Get(pod_labels, contract::k8s::kControllerUidLegacy);
  if (uid.empty()) return absl::StrCat(pod_namespace, ".", owner, ".", container_name);
  return absl::StrCat(pod_namespace, ".", owner, ".", uid.substr(0, 8), ".", container_name);
}

OptIn DecideOptIn(const std::string& prefix, const StringMap& pod_annotations,
                  const StringMap& pod_labels, const std::string& pod_namespace,
                  const std::string& pod_name, const std::string& container_name) {
  OptIn o;
  const std::string stop = absl::AsciiStrToLower(
      Get(pod_annotations, contract::Key(prefix, contract::pod::kCheckpointOnStop)));
  o.checkpoint_on_stop = stop == "true" || stop == "1" || stop == "yes";
  o.resume = Get(pod_annotations, contract::Key(prefix, contract::pod::kResume));
  if (!o.checkpoint_on_stop && o.resume.empty()) return o;
  const std::string only = Get(pod_annotations, contract::Key(prefix, contract::pod::kContainers));
  if (!only.empty()) {
    bool listed = false;
    for (absl::string_view c : absl::StrSplit(only, ',', absl::SkipWhitespace())) {
      if (absl::StripAsciiWhitespace(c) == container_name) listed = true;
    }
    if (!listed) return OptIn{};
  }
  o.managed = true;
  std::string key = Get(pod_annotations, contract::Key(prefix, contract::pod::kWorkload));
  o.workload = key.empty() ? DefaultWorkloadKey(pod_labels, pod_namespace, pod_name, container_name)
                           : absl::StrCat(key, ".", container_name);
  return o;
}

}  // namespace cryo::shim
