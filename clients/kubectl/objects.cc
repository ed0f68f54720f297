#include "clients/kubectl/objects.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/human.h"
#include "lib/contract/labels.h"

namespace cryo::kubectl {
namespace {

// Labels by which controllers own pods: a copy carrying them would be adopted (and then
// deleted as surplus) by the ReplicaSet or Job that made the original.
const std::set<std::string>& ControllerLabels() {
  static const std::set<std::string> s = {"pod-template-hash",
                                          "controller-revision-hash",
                                          "statefulset.kubernetes.io/pod-name",
                                          "apps.kubernetes.io/pod-index",
                                          contract::k8s::kControllerUidLegacy,
                                          contract::k8s::kControllerUid};
  return s;
}

// Annotations written by kubectl apply and kubelet, not by the pod's author.
const std::set<std::string>& ServerAnnotations() {
  static const std::set<std::string> s = {
      "kubectl.kubernetes.io/last-applied-configuration", "kubernetes.io/config.seen",
      "kubernetes.io/config.source", "kubernetes.io/config.hash", "kubernetes.io/config.mirror"};
  return s;
}

std::vector<std::string> ContainerNames(const json& pod) {
  std::vector<std::string> names;
  const json* cs = pod.contains("spec") ? &pod["spec"] : nullptr;
  if (cs && cs->contains("containers") && (*cs)["containers"].is_array()) {
    for (const auto& c : (*cs)["containers"]) names.push_back(Str(c, "/name"));
  }
  return names;
}

std::string PodName(const json& pod) {
  return absl::StrCat(Str(pod, "/metadata/namespace"), "/", Str(pod, "/metadata/name"));
}

json StringMap(const json& j) {
  json out = json::object();
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value();
  }
  return out;
}

}  // namespace

std::string Str(const json& j, const std::string& pointer) {
  const json::json_pointer p(pointer);
  if (!j.contains(p)) return "";
  const json& v = j.at(p);
  return v.is_string() ? v.get<std::string>() : "";
}

uint64_t U64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return v.get<int64_t>() < 0 ? 0 : v.get<int64_t>();
  uint64_t n = 0;
  if (v.is_string() && absl::SimpleAtoi(v.get<std::string>(), &n)) return n;
  return 0;
}

absl::StatusOr<std::string> PickContainer(const json& pod, const std::string& wanted) {
  std::vector<std::string> names = ContainerNames(pod);
  const std::string list = names.empty() ? "none" : absl::StrJoin(names, ", ");
  if (!wanted.empty()) {
    if (std::find(names.begin(), names.end(), wanted) != names.end()) return wanted;
    return absl::NotFoundError(absl::StrCat("pod ", PodName(pod), " has no container '", wanted,
                                            "' (its containers: ", list, ")"));
  }
  if (names.size() == 1) return names[0];
  std::string def = Str(pod, "/metadata/annotations/kubectl.kubernetes.io~1default-container");
  if (!def.empty() && std::find(names.begin(), names.end(), def) != names.end()) return def;
  return absl::NotFoundError(absl::StrCat("pod ", PodName(pod), " has ", names.size(),
                                          " containers: choose one with -c (", list, ")"));
}

std::string NotRunningReason(const json& pod, const std::string& container) {
  const json::json_pointer p("/status/containerStatuses");
  if (pod.contains(p) && pod.at(p).is_array()) {
    for (const auto& cs : pod.at(p)) {
      if (Str(cs, "/name") != container) continue;
      const json state = cs.value("state", json::object());
      if (state.contains("running")) return "";
      if (state.contains("waiting")) {
        std::string why = Str(state, "/waiting/reason");
        return absl::StrCat("waiting", why.empty() ? "" : ": " + why);
      }
      if (state.contains("terminated")) {
        std::string why = Str(state, "/terminated/reason");
        int code = state["terminated"].value("exitCode", 0);
        return absl::StrCat("terminated", why.empty() ? "" : ": " + why, ", exit code ", code);
      }
      return "no state reported";
    }
  }
  std::string phase = Str(pod, "/status/phase");
  return absl::StrCat("no status yet", phase.empty() ? "" : " (pod phase " + phase + ")");
}

std::vector<CryoPod> CryoPodsFromList(const json& pod_list) {
  std::vector<CryoPod> out;
  if (!pod_list.contains("items") || !pod_list["items"].is_array()) return out;
  for (const auto& p : pod_list["items"]) {
    CryoPod c;
    c.name = Str(p, "/metadata/name");
    c.node = Str(p, "/spec/nodeName");
    c.phase = Str(p, "/status/phase");
    c.running = c.phase == "Running";
    c.token_secret = Str(p, (json::json_pointer("/metadata/annotations") /
                             std::string(contract::k8s::kCryodApiTokenSecret))
                                .to_string());
    // The "cryod" container's port first: a sidecar may also name a port "http".
    int fallback = 0;
    const json::json_pointer containers("/spec/containers");
    if (p.contains(containers) && p.at(containers).is_array()) {
      for (const auto& ct : p.at(containers)) {
        if (!ct.contains("ports") || !ct["ports"].is_array()) continue;
        for (const auto& port : ct["ports"]) {
          if (Str(port, "/name") != kCryodPortName || !port.contains("containerPort")) continue;
          int n = port["containerPort"].is_number_integer() ? port["containerPort"].get<int>() : 0;
          if (n <= 0) continue;
          if (Str(ct, "/name") == "cryod") {
            c.port = n;
            fallback = -1;
          } else if (fallback == 0) {
            fallback = n;
          }
        }
      }
    }
    if (fallback > 0 && c.port == 0) c.port = fallback;
    if (!c.name.empty()) out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](const CryoPod& a, const CryoPod& b) {
    return std::tie(a.node, a.name) < std::tie(b.node, b.name);
  });
  return out;
}

std::vector<std::string> ReadyNodes(const json& node_list) {
  std::vector<std::string> out;
  if (!node_list.contains("items") || !node_list["items"].is_array()) return out;
  for (const auto& n : node_list["items"]) {
    const std::string name = Str(n, "/metadata/name");
    const json::json_pointer conditions("/status/conditions");
    if (name.empty() || !n.contains(conditions) || !n.at(conditions).is_array()) continue;
    for (const auto& c : n.at(conditions)) {
      if (Str(c, "/type") == "Ready" && Str(c, "/status") == "True") out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string CryodEndpoint::ToString() const {
  return kind == kPods ? "pods" : absl::StrCat("nodes:", port);
}

absl::StatusOr<CryodEndpoint> ParseCryodEndpoint(const std::string& s) {
  CryodEndpoint e;
  if (s.empty() || s == "pods") return e;
  if (s == "nodes" || absl::StartsWith(s, "nodes:")) {
    e.kind = CryodEndpoint::kNodes;
    if (s != "nodes" && (!absl::SimpleAtoi(s.substr(6), &e.port) || e.port < 1 || e.port > 65535)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cryod endpoint '", s, "': the port after nodes: is a number, 1 to 65535"));
    }
    return e;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cryod endpoint '", s,
      "' is neither \"pods\" (the cryo DaemonSet's pods) nor \"nodes:PORT\" (cryod as a host "
      "service on every node, its HTTP API on PORT)"));
}

std::string PodRef::ToString() const {
  if (pod.empty()) return "-";
  return absl::StrCat(namespace_name.empty() ? "?" : namespace_name, "/", pod, "/",
                      container.empty() ? "?" : container);
}

PodRef SourceOf(const json& checkpoint) {
  PodRef r;
  const json labels = checkpoint.value("labels", json::object());
  if (!labels.is_object()) return r;
  r.namespace_name = labels.value(contract::k8s::kPodNamespace, "");
  r.pod = labels.value(contract::k8s::kPodName, "");
  r.container = labels.value(contract::k8s::kContainerName, "");
  return r;
}

std::vector<json> CheckpointsOf(const json& list, const PodRef& ref, const std::string& uid) {
  std::vector<json> out;
  if (!list.is_array()) return out;
  for (const auto& c : list) {
    if (!c.is_object()) continue;
    const PodRef r = SourceOf(c);
    if (r.namespace_name != ref.namespace_name || r.pod != ref.pod ||
        r.container != ref.container) {
      continue;
    }
    const std::string label_uid = Str(c, absl::StrCat("/labels/", contract::k8s::kPodUid));
    if (!uid.empty() && !label_uid.empty() && label_uid != uid) continue;
    out.push_back(c);
  }
  return out;
}

std::string QualifiedKind(const std::string& resource) {
  if (resource == "job") return "job.batch";
  if (resource == "deployment" || resource == "statefulset") return resource + ".apps";
  return resource;
}

json KubeList(const json& items) {
  return {{"apiVersion", "v1"},
          {"kind", "List"},
          {"items", items.is_array() ? items : json::array()},
          {"metadata", {{"resourceVersion", ""}}}};
}

namespace {

// Whether `s` reads back as the same string when written plain. Conservative: ASCII letters,
// digits and a few punctuation marks; never a first character that starts a number, a date, an
// indicator or a tag; never a word YAML 1.1 readers take for a boolean or null.
bool PlainSafe(const std::string& s) {
  if (s.empty() || (!absl::ascii_isalpha(s[0]) && s[0] != '/' && s[0] != '_')) return false;
  if (s.back() == ' ' || s.back() == ':') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (absl::ascii_isalnum(c) || std::strchr("._/-@=+~#", c) != nullptr) continue;
    if (c == ':' && s[i + 1] != ' ') continue;  // s.back() != ':', so s[i + 1] exists
    if (c == ' ' && s[i + 1] != '#') continue;
    return false;
  }
  static const std::set<std::string> kWords = {"y",   "n",    "yes",   "no",  "on",
                                               "off", "true", "false", "null"};
  return !kWords.count(absl::AsciiStrToLower(s));
}

std::string YamlString(const std::string& s) {
  if (PlainSafe(s)) return s;
  // A JSON string is a YAML double-quoted scalar, except that YAML allows neither DEL nor the
  // C1 controls raw (JSON does): those get escapes of their own.
  const std::string q = json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  for (size_t i = 0; i < q.size(); ++i) {
    const unsigned char c = q[i];
    if (c == 0x7f) {
      out += "\\x7f";
    } else if (c == 0xc2 && i + 1 < q.size() && static_cast<unsigned char>(q[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(q[i + 1]) <= 0x9f) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(q[++i]));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

bool IsBlock(const json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

std::string YamlScalar(const json& v) {
  if (v.is_string()) return YamlString(v.get<std::string>());
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  return v.dump();  // numbers, true, false, null
}

// A non-empty object or array, each line indented by `indent`.
void EmitYaml(const json& v, size_t indent, std::string* out) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      absl::StrAppend(out, pad, YamlString(it.key()), ":");
      if (IsBlock(it.value())) {
        out->push_back('\n');
        EmitYaml(it.value(), it.value().is_array() ? indent : indent + 2, out);
      } else {
        absl::StrAppend(out, " ", YamlScalar(it.value()), "\n");
      }
    }
    return;
  }
  for (const auto& e : v) {
    if (IsBlock(e)) {
      // The element's first line goes on the dash's line.
      std::string sub;
      EmitYaml(e, indent + 2, &sub);
      absl::StrAppend(out, pad, "- ", sub.substr(indent + 2));
    } else {
      absl::StrAppend(out, pad, "- ", YamlScalar(e), "\n");
    }
  }
}

}  // namespace

std::string ToYaml(const json& j) {
  if (!IsBlock(j)) return YamlScalar(j) + "\n";
  std::string out;
  EmitYaml(j, 0, &out);
  return out;
}

json MergeCheckpoints(const std::vector<json>& lists) {
  std::vector<json> all;
  std::set<std::string> seen;
  for (const auto& list : lists) {
    if (!list.is_array()) continue;
    for (const auto& c : list) {
      std::string id = Str(c, "/checkpoint_id");
      if (id.empty() || !seen.insert(id).second) continue;
      all.push_back(c);
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const json& a, const json& b) {
    absl::Time ta = human::ParseRfc3339(Str(a, "/created_at")),
               tb = human::ParseRfc3339(Str(b, "/created_at"));
    if (ta != tb) return ta > tb;
    return Str(a, "/checkpoint_id") < Str(b, "/checkpoint_id");
  });
  json out = json::array();
  for (auto& c : all) out.push_back(std::move(c));
  return out;
}

json ResumeAnnotations(const std::string& prefix, const std::string& id,
                       const std::string& container) {
  json a = {{contract::Key(prefix, contract::pod::kResume), id}};
  // Only the checkpointed container resumes; without this the shim would try every container
  // of the pod (init containers and sidecars too) from the same checkpoint.
  if (!container.empty()) a[contract::Key(prefix, contract::pod::kContainers)] = container;
  return a;
}

std::string RandomSuffix(int n) {
  // Kubernetes' generateName alphabet: no vowels (no words), no look-alikes.
  static const char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::random_device rd;
  std::uniform_int_distribution<int> d(0, sizeof(kAlphabet) - 2);
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(kAlphabet[d(rd)]);
  return s;
}

absl::StatusOr<json> BuildResumePod(const json& source, const ResumePodOptions& o) {
  if (!source.is_object()) return absl::InvalidArgumentError("the source is not a JSON object");
  json meta, spec;
  std::string source_name, source_ns;
  const std::string kind = source.value("kind", "Pod");
  if (kind == "Pod") {
    meta = source.value("metadata", json::object());
    spec = source.value("spec", json::object());
    source_name = Str(meta, "/name");
    source_ns = Str(meta, "/namespace");
  } else if (source.contains(json::json_pointer("/spec/template/spec"))) {
    // A Job, Deployment, StatefulSet...: its pod template stands for the pod.
    meta = source["spec"]["template"].value("metadata", json::object());
    spec = source["spec"]["template"]["spec"];
    source_name = Str(source, "/metadata/name");
    source_ns = Str(source, "/metadata/namespace");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", kind, " is neither a Pod nor a workload with a pod template"));
  }
  if (!spec.is_object() || !spec.contains("containers") || !spec["containers"].is_array() ||
      spec["containers"].empty()) {
    return absl::InvalidArgumentError("the source pod has no containers");
  }
  if (!o.container.empty()) {
    bool found = false;
    for (const auto& c : spec["containers"]) found = found || Str(c, "/name") == o.container;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("the source pod has no container '",
                                                     o.container, "', which the checkpoint is of"));
    }
  }

  std::string name = o.name;
  if (name.empty()) {
    // Pod names are DNS subdomains; the hostname derived from them is cut at 63 characters.
    std::string base = source_name.empty() ? "restore" : source_name.substr(0, 53);
    while (!base.empty() && (base.back() == '-' || base.back() == '.')) base.pop_back();
    name = absl::StrCat(base, "-r-", RandomSuffix(5));
  }

  json labels = StringMap(meta.value("labels", json::object()));
  for (const auto& k : ControllerLabels()) labels.erase(k);
  json annotations = StringMap(meta.value("annotations", json::object()));
  for (const auto& k : ServerAnnotations()) annotations.erase(k);
  annotations.erase(kNoopAnnotation);
  annotations.erase(contract::Key(o.prefix, contract::pod::kContainers));
  const json resume = ResumeAnnotations(o.prefix, o.checkpoint_id, o.container);
  for (auto it = resume.begin(); it != resume.end(); ++it) annotations[it.key()] = it.value();

  // Set by the scheduler, by a subresource, or by admission from priorityClassName (which
  // refuses a copied value that no longer matches the class).
  for (const char* k : {"nodeName", "ephemeralContainers", "priority", "preemptionPolicy"}) {
    spec.erase(k);
  }
  if (!o.node.empty()) spec["nodeName"] = o.node;

  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}}}};
  const std::string ns = o.namespace_name.empty() ? source_ns : o.namespace_name;
  if (!ns.empty()) pod["metadata"]["namespace"] = ns;
  if (!labels.empty()) pod["metadata"]["labels"] = labels;
  pod["metadata"]["annotations"] = annotations;
  pod["spec"] = spec;
  return pod;
}

absl::StatusOr<WorkloadRef> ParseWorkload(const std::string& s) {
  std::vector<std::string> parts = absl::StrSplit(s, absl::MaxSplits('/', 1));
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workload wants KIND/NAME (job/NAME, deployment/NAME, statefulset/NAME), "
                     "not '",
                     s, "'"));
  }
  std::string kind = absl::AsciiStrToLower(parts[0]);
  static const std::map<std::string, std::string> kKinds = {{"job", "job"},
                                                            {"jobs", "job"},
                                                            {"job.batch", "job"},
                                                            {"jobs.batch", "job"},
                                                            {"deployment", "deployment"},
                                                            {"deployments", "deployment"},
                                                            {"deploy", "deployment"},
                                                            {"deployment.apps", "deployment"},
                                                            {"deployments.apps", "deployment"},
                                                            {"statefulset", "statefulset"},
                                                            {"statefulsets", "statefulset"},
                                                            {"sts", "statefulset"},
                                                            {"statefulset.apps", "statefulset"},
                                                            {"statefulsets.apps", "statefulset"}};
  auto it = kKinds.find(kind);
  if (it == kKinds.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workload: '", parts[0], "' is not a Job, Deployment or StatefulSet"));
  }
  return WorkloadRef{it->second, parts[1]};
}

json WorkloadResumePatch(const std::string& prefix, const std::string& id,
                         const std::string& container) {
  return {{"spec",
           {{"template",
             {{"metadata", {{"annotations", ResumeAnnotations(prefix, id, container)}}}}}}}};
}

}  // namespace cryo::kubectl
