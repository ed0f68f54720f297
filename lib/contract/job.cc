#include "lib/contract/job.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"

namespace cryo::contract {
namespace {

std::string Get(const StringMap& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "" : std::string(absl::StripAsciiWhitespace(it->second));
}

// The completion index: the label where the controller sets it, else the annotation.
std::string CompletionIndex(const StringMap& ann, const StringMap& labels) {
  std::string i = Get(labels, k8s::kJobCompletionIndex);
  return i.empty() ? Get(ann, k8s::kJobCompletionIndex) : i;
}

absl::Status BadName(const std::string& what, const std::string& value) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, " '", value,
      "' is not a Kubernetes name (lower-case letters, digits, '-' and '.', at most 253)"));
}

}  // namespace

const char* JobSourceName(JobSource s) {
  switch (s) {
    case JobSource::kAnnotation:
      return "annotation";
    case JobSource::kJobSet:
      return "JobSet";
    case JobSource::kPyTorchJob:
      return "PyTorchJob";
    case JobSource::kIndexedJob:
      return "Job";
  }
  return "unknown";
}

bool IsKubernetesName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) return false;
  }
  // Starts and ends with an alphanumeric; no ".." (so never "." or ".." as a path component).
  auto alnum = [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c); };
  return alnum(s.front()) && alnum(s.back()) && s.find("..") == std::string::npos;
}

absl::StatusOr<std::optional<JobMembership>> JobOf(const std::string& prefix, const StringMap& ann,
                                                   const StringMap& labels,
                                                   const std::string& pod_name) {
  JobMembership j;
  const std::string job_key = Key(prefix, pod::kJob);
  const std::string size_key = Key(prefix, pod::kJobSize);
  const std::string index = CompletionIndex(ann, labels);
  if (std::string name = Get(ann, job_key); !name.empty()) {
    j.name = name;
    j.source = JobSource::kAnnotation;
    const std::string size = Get(ann, size_key);
    if (size.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "annotation ", job_key, " names job '", name, "' but ", size_key,
          " is missing: say how many pods the job has, so that a checkpoint of it is whole"));
    }
    if (!absl::SimpleAtoi(size, &j.size) || j.size < 1 || j.size > kMaxJobMembers) {
      return absl::InvalidArgumentError(absl::StrCat("annotation ", size_key, " '", size,
                                                     "' is not a number of pods from 1 to ",
                                                     kMaxJobMembers));
    }
    j.member = index;
  } else if (std::string js = Get(labels, k8s::kJobSetName); !js.empty()) {
    j.name = js;
    j.source = JobSource::kJobSet;
    const std::string global = Get(labels, k8s::kJobSetGlobalIndex);
    if (!global.empty() && !index.empty()) j.member = absl::StrCat(global, "-", index);
  } else if (std::string kf = Get(labels, k8s::kKubeflowJobName); !kf.empty()) {
    j.name = kf;
    j.source = JobSource::kPyTorchJob;
    const std::string type = absl::AsciiStrToLower(Get(labels, k8s::kKubeflowReplicaType));
    const std::string i = Get(labels, k8s::kKubeflowReplicaIndex);
    if (!type.empty() && !i.empty()) j.member = absl::StrCat(type, "-", i);
  } else if (std::string job = Get(labels, k8s::kJobName); !job.empty() && !index.empty()) {
    j.name = job;
    j.source = JobSource::kIndexedJob;
    j.member = index;
  } else {
    return std::nullopt;
  }
  if (std::string m = Get(ann, Key(prefix, pod::kJobMember)); !m.empty()) j.member = m;
  if (j.member.empty()) j.member = Get(labels, k8s::kStatefulSetPodName);
  if (j.member.empty()) j.member = pod_name;
  if (!IsKubernetesName(j.name))
    return BadName(absl::StrCat("job name (", JobSourceName(j.source), ")"), j.name);
  if (!IsKubernetesName(j.member)) return BadName("job member", j.member);
  return j;
}

}  // namespace cryo::contract
