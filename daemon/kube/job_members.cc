#include "daemon/kube/job_members.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/job.h"

namespace cryo::kube {
namespace {

std::map<std::string, std::string> StringsOf(const nlohmann::json& meta, const char* key) {
  std::map<std::string, std::string> out;
  auto it = meta.find(key);
  if (it == meta.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

std::string Str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// "containerd://0123..." -> "0123..."; the runtime's own id.
std::string RuntimeId(const std::string& id) {
  const size_t sep = id.find("://");
  return sep == std::string::npos ? id : id.substr(sep + 3);
}

absl::StatusOr<nlohmann::json> RunningPods(const ApiClient& api, const std::string& ns,
                                           const std::string& selector) {
  std::string path = absl::StrCat("/api/v1/namespaces/", ns,
                                  "/pods?fieldSelector=", QueryEscape("status.phase=Running"));
  if (!selector.empty()) absl::StrAppend(&path, "&labelSelector=", QueryEscape(selector));
  CRYO_ASSIGN_OR_RETURN(nlohmann::json list, api.Get(path));
  auto items = list.find("items");
  if (items == list.end() || !items->is_array()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the API's list of pods in ", ns, " has no items"));
  }
  return *items;
}

// A replica count as the API writes it (an integer), else `def` when absent.
int CountOf(const nlohmann::json& obj, const char* key, int def) {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  return it->is_number_integer() ? it->get<int>() : -1;
}

}  // namespace

absl::StatusOr<int> JobSizeFromOwner(const ApiClient& api, const std::string& ns,
                                     contract::JobSource source, const std::string& name) {
  std::string path;
  switch (source) {
    case contract::JobSource::kJobSet:
      path = absl::StrCat("/apis/jobset.x-k8s.io/v1alpha2/namespaces/", ns, "/jobsets/", name);
      break;
    case contract::JobSource::kPyTorchJob:
      path = absl::StrCat("/apis/kubeflow.org/v1/namespaces/", ns, "/pytorchjobs/", name);
      break;
    case contract::JobSource::kIndexedJob:
      path = absl::StrCat("/apis/batch/v1/namespaces/", ns, "/jobs/", name);
      break;
    case contract::JobSource::kAnnotation:
      return absl::InvalidArgumentError("a job named by annotation says its own size");
  }
  const std::string what = absl::StrCat(contract::JobSourceName(source), " ", ns, "/", name);
  auto obj = api.Get(path);
  if (!obj.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the size of job ", ns, "/", name, " comes from its ", what, ", which cannot be read (",
        obj.status().message(),
        "); the chart's jobs.enabled grants the get it needs, or set cryo.dev/job-size"));
  }
  // Fields looked up, not defaulted into temporaries (GCC 12 warns on iterating those).
  static const nlohmann::json kNone = nlohmann::json::object();
  auto field = [](const nlohmann::json& o, const char* key) -> const nlohmann::json& {
    if (!o.is_object()) return kNone;
    auto it = o.find(key);
    return it == o.end() ? kNone : *it;
  };
  const nlohmann::json& spec = field(*obj, "spec");
  int size = 0;
  bool bad = false;
  if (source == contract::JobSource::kJobSet) {
    // Every replicated Job's pods: its replicas times the pods each runs at once.
    const nlohmann::json& rjs = field(spec, "replicatedJobs");
    for (size_t i = 0; rjs.is_array() && i < rjs.size(); ++i) {
      const nlohmann::json& rj = rjs[i];
      if (!rj.is_object()) continue;
      const nlohmann::json& js = field(field(rj, "template"), "spec");
      const int replicas = CountOf(rj, "replicas", 1);
      const int pods = std::min(CountOf(js, "parallelism", 1), CountOf(js, "completions", 1));
      bad |= replicas < 0 || pods < 0;
      size += replicas * pods;
    }
  } else if (source == contract::JobSource::kPyTorchJob) {
    // Master and workers.
    const nlohmann::json& specs = field(spec, "pytorchReplicaSpecs");
    for (auto it = specs.begin(); specs.is_object() && it != specs.end(); ++it) {
      if (!it->is_object()) continue;
      const int replicas = CountOf(*it, "replicas", 1);
      bad |= replicas < 0;
      size += replicas;
    }
  } else {
    // An indexed Job: the pods that run at once.
    const int completions = CountOf(spec, "completions", 1);
    const int parallelism = CountOf(spec, "parallelism", 1);
    bad |= completions < 0 || parallelism < 0;
    size = std::min(completions, parallelism);
  }
  if (bad || size < 1 || size > contract::kMaxJobMembers) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " says no usable number of pods (", size, "): set cryo.dev/job-size on its pods"));
  }
  return size;
}

absl::StatusOr<std::vector<JobMemberPod>> ListJobMembers(const ApiClient& api,
                                                         const std::string& prefix,
                                                         const std::string& ns,
                                                         const std::string& job) {
  CRYO_ASSIGN_OR_RETURN(nlohmann::json pods, RunningPods(api, ns, ""));
  std::vector<JobMemberPod> out;
  std::map<std::string, std::string> by_member;  // member -> pod
  int size = 0;
  std::optional<contract::JobSource> source;
  for (const auto& p : pods) {
    const nlohmann::json meta = p.value("metadata", nlohmann::json::object());
    const std::string name = Str(meta, "name");
    const auto ann = StringsOf(meta, "annotations");
    auto j = contract::JobOf(prefix, ann, StringsOf(meta, "labels"), name);
    if (!j.ok() || !j->has_value() || (*j)->name != job) continue;
    JobMemberPod m;
    m.member = (*j)->member;
    m.pod = name;
    m.size = (*j)->size;
    size = std::max(size, m.size);
    source = (*j)->source;
    const nlohmann::json spec = p.value("spec", nlohmann::json::object());
    m.node = Str(spec, "nodeName");
    // The member's container: the first the pod opted in.
    std::set<std::string> only;
    for (absl::string_view c :
         absl::StrSplit(ann.count(contract::Key(prefix, contract::pod::kContainers))
                            ? ann.at(contract::Key(prefix, contract::pod::kContainers))
                            : "",
                        ',', absl::SkipWhitespace())) {
      only.insert(std::string(absl::StripAsciiWhitespace(c)));
    }
    const nlohmann::json status = p.value("status", nlohmann::json::object());
    for (const auto& cs : status.value("containerStatuses", nlohmann::json::array())) {
      if (!cs.is_object()) continue;
      if (!only.empty() && !only.count(Str(cs, "name"))) continue;
      m.container_id = RuntimeId(Str(cs, "containerID"));
      if (!m.container_id.empty()) break;
    }
    if (m.node.empty() || m.container_id.empty()) {
      return absl::UnavailableError(absl::StrCat("member ", m.member, " (pod ", name,
                                                 ") has no node or no running container yet"));
    }
    if (auto [it, fresh] = by_member.emplace(m.member, name); !fresh) {
      return absl::FailedPreconditionError(absl::StrCat("pods ", it->second, " and ", name,
                                                        " both say they are member ", m.member,
                                                        " of job ", ns, "/", job));
    }
    out.push_back(std::move(m));
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat("no running pod of job ", ns, "/", job));
  }
  if (size == 0 && source && *source != contract::JobSource::kAnnotation) {
    // The pods do not say; their owner does.
    CRYO_ASSIGN_OR_RETURN(size, JobSizeFromOwner(api, ns, *source, job));
    for (auto& m : out) m.size = size;
  }
  if (size > static_cast<int>(out.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", ns, "/", job, " has ", size, " members and ", out.size(),
                     " run: ", size - static_cast<int>(out.size()),
                     " missing; a checkpoint of part of a job would not resume"));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ListPeerAddresses(const ApiClient& api,
                                                                     const std::string& cryo_ns,
                                                                     const std::string& selector,
                                                                     int port) {
  CRYO_ASSIGN_OR_RETURN(nlohmann::json pods, RunningPods(api, cryo_ns, selector));
  std::map<std::string, std::string> out;
  for (const auto& p : pods) {
    const std::string node = Str(p.value("spec", nlohmann::json::object()), "nodeName");
    const std::string ip = Str(p.value("status", nlohmann::json::object()), "podIP");
    if (node.empty() || ip.empty()) continue;
    out[node] = absl::StrContains(ip, ':') ? absl::StrCat("[", ip, "]:", port)
                                           : absl::StrCat(ip, ":", port);
  }
  return out;
}

}  // namespace cryo::kube
