#include "cri-shim/opt_in.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/contract/annotations.h"
#include "lib/contract/checkpoint_every.h"
#include "lib/contract/labels.h"

namespace cryo::shim {
namespace {

std::string Get(const StringMap& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "" : std::string(absl::StripAsciiWhitespace(it->second));
}

}  // namespace

std::string DefaultWorkloadKey(const StringMap& pod_labels, const PodIdentity& pod,
                               const std::string& container_name) {
  auto with_uid = [&](const std::string& owner, const std::string& uid) {
    if (uid.empty()) return absl::StrCat(pod.namespace_, ".", owner, ".", container_name);
    return absl::StrCat(pod.namespace_, ".", owner, ".", uid.substr(0, 8), ".", container_name);
  };
  std::string job = Get(pod_labels, contract::k8s::kJobName);
  if (job.empty()) job = Get(pod_labels, contract::k8s::kJobNameLegacy);
  if (!job.empty()) {
    // The Job's uid: its replacement pods share it, a new Job of the same name does not (and
    // starts fresh instead of resuming a deleted Job's state).
    std::string uid = Get(pod_labels, contract::k8s::kControllerUid);
    if (uid.empty()) uid = Get(pod_labels, contract::k8s::kControllerUidLegacy);
    return with_uid(job, uid);
  }
  // A StatefulSet's replacement pod is the same member under a new uid: it resumes.
  if (!Get(pod_labels, contract::k8s::kStatefulSetPodName).empty()) {
    return absl::StrCat(pod.namespace_, ".", pod.name, ".", container_name);
  }
  // Anything else is itself: a pod re-created under the same name is a new one.
  return with_uid(pod.name, std::string(absl::StripAsciiWhitespace(pod.uid)));
}

OptIn DecideOptIn(const std::string& prefix, const StringMap& pod_annotations,
                  const StringMap& pod_labels, const PodIdentity& pod,
                  const std::string& container_name) {
  OptIn o;
  const std::string stop = absl::AsciiStrToLower(
      Get(pod_annotations, contract::Key(prefix, contract::pod::kCheckpointOnStop)));
  o.checkpoint_on_stop = stop == "true" || stop == "1" || stop == "yes";
  o.resume = Get(pod_annotations, contract::Key(prefix, contract::pod::kResume));
  // Periodic checkpoints need the job under cryo-init too ("off" is no opt-in; a bad value
  // opts in, so that the container's creation refuses it with the reason).
  const std::string every =
      Get(pod_annotations, contract::Key(prefix, contract::pod::kCheckpointEvery));
  auto period = contract::ParseCheckpointEvery(every);
  const bool periodic = !every.empty() && (!period.ok() || *period > absl::ZeroDuration());
  // A job checkpointed in the background is also checkpointed at its stop (through the plan:
  // when that would not fit, it resumes from the newest periodic one), unless the pod says
  // checkpoint-on-stop "false": a stop's checkpoint loses nothing, a periodic one up to a period.
  if (periodic && stop.empty()) o.checkpoint_on_stop = true;
  if (!o.checkpoint_on_stop && o.resume.empty() && !periodic) return o;
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
  // A key is its namespace's: one that does not start with the pod's namespace gets it in front
  // (namespaces have no dots), so a pod of another namespace naming it names its own.
  if (!key.empty() && !absl::StartsWith(key, absl::StrCat(pod.namespace_, "."))) {
    key = absl::StrCat(pod.namespace_, ".", key);
  }
  o.workload = key.empty() ? DefaultWorkloadKey(pod_labels, pod, container_name)
                           : absl::StrCat(key, ".", container_name);
  return o;
}

}  // namespace cryo::shim
