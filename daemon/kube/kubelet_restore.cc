#include "daemon/kube/kubelet_restore.h"

#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status.h"

namespace cryo::kube {
namespace {

int64_t Int(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

struct Rollout {
  int64_t desired = 0, updated = 0, available = 0;
  bool observed = false;  // the controller has seen the latest template
  bool done() const { return observed && updated == desired && available == desired; }
};

Rollout RolloutOf(const nlohmann::json& ds) {
  const nlohmann::json& st = ds.contains("status") ? ds["status"] : nlohmann::json::object();
  Rollout r;
  r.desired = Int(st, "desiredNumberScheduled");
  r.updated = Int(st, "updatedNumberScheduled");
  r.available = Int(st, "numberAvailable");
  r.observed = Int(st, "observedGeneration") >=
               Int(ds.value("metadata", nlohmann::json::object()), "generation");
  return r;
}

std::string Mode(const nlohmann::json& obj_with_metadata) {
  const nlohmann::json* a = nullptr;
  if (auto m = obj_with_metadata.find("metadata"); m != obj_with_metadata.end()) {
    if (auto an = m->find("annotations"); an != m->end() && an->is_object()) a = &*an;
  }
  if (a == nullptr) return "";
  auto it = a->find(kKubeletEndpointAnnotation);
  return it != a->end() && it->is_string() ? it->get<std::string>() : "";
}

// "app=cryo,component=cryod" from the DaemonSet's matchLabels.
std::string Selector(const nlohmann::json& ds) {
  std::vector<std::string> parts;
  const auto& ml = ds["spec"]["selector"]["matchLabels"];
  if (ml.is_object()) {
    for (const auto& [k, v] : ml.items()) {
      if (v.is_string()) parts.push_back(k + "=" + v.get<std::string>());
    }
  }
  return absl::StrJoin(parts, ",");
}

// Percent-encodes a label selector for a query string.
std::string QueryEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// What a node's pod says about its kubelet: "" when it restored (or had nothing to restore),
// else the reason its kubelet was left alone or why it is not done yet.
struct NodeState {
  std::string node, pod;
  bool restoring = false;  // runs the restoring template
  bool done = false;       // configure-kubelet finished with exit 0
  std::string note;        // the init container's termination message or waiting reason
};

NodeState StateOf(const nlohmann::json& pod) {
  NodeState s;
  s.node = pod["spec"].value("nodeName", "");
  s.pod = pod["metadata"].value("name", "");
  s.restoring = Mode(pod) == "restore";
  const auto& st = pod.value("status", nlohmann::json::object());
  for (const auto& c : st.value("initContainerStatuses", nlohmann::json::array())) {
    if (c.value("name", "") != kConfigureKubeletContainer) continue;
    const auto& state = c.value("state", nlohmann::json::object());
    if (state.contains("terminated")) {
      const auto& t = state["terminated"];
      s.done = Int(t, "exitCode") == 0;
      s.note = t.value("message", "");
      if (!s.done && s.note.empty()) s.note = absl::StrCat("exit ", Int(t, "exitCode"));
    } else if (state.contains("waiting")) {
      s.note = state["waiting"].value("reason", "waiting");
    } else if (state.contains("running")) {
      s.note = "running";
    }
  }
  if (!s.done && s.note.empty()) s.note = st.value("phase", "not started");
  return s;
}

}  // namespace

absl::Status RestoreKubeletEndpoints(const ApiClient& api, const KubeletRestoreOptions& o) {
  std::ostream null_log(nullptr);
  std::ostream& log = o.log != nullptr ? *o.log : null_log;
  auto sleep = o.sleep ? o.sleep : [](absl::Duration d) { absl::SleepFor(d); };
  const std::string name = absl::StrCat(o.namespace_name, "/", o.daemonset);
  const std::string ds_path =
      absl::StrCat("/apis/apps/v1/namespaces/", o.namespace_name, "/daemonsets/", o.daemonset);
  auto ds = api.Get(ds_path);
  if (absl::IsNotFound(ds.status())) {
    log << "no DaemonSet " << name << ": no node to put back\n";
    return absl::OkStatus();
  }
  if (!ds.ok()) return Annotate(ds.status(), "reading the DaemonSet");
  const std::string mode = Mode((*ds)["spec"]["template"]);
  if (mode != "restore") {
    // All nodes at once: the DaemonSet is about to go, nothing is served by rolling slowly.
    nlohmann::json patch = {
        {"spec",
         {{"updateStrategy",
           {{"type", "RollingUpdate"},
            {"rollingUpdate", {{"maxUnavailable", "100%"}, {"maxSurge", 0}}}}},
          {"template",
           {{"metadata", {{"annotations", {{kKubeletEndpointAnnotation, "restore"}}}}}}}}}};
    ds = api.MergePatch(ds_path, patch);
    if (!ds.ok()) return Annotate(ds.status(), "switching the DaemonSet's pods to restore");
    log << "DaemonSet " << name
        << ": every node's pod now restarts to put kubelet's endpoint back\n";
  }
  const std::string pods_path = absl::StrCat("/api/v1/namespaces/", o.namespace_name,
                                             "/pods?labelSelector=", QueryEscape(Selector(*ds)));
  const absl::Time deadline = absl::Now() + o.timeout;
  std::string last;
  for (;;) {
    Rollout r = RolloutOf(*ds);
    const std::string line = absl::StrCat(
        r.updated, " of ", r.desired, " nodes run the restoring pod, ", r.available, " available");
    if (line != last) log << line << "\n";
    last = line;
    if (r.done()) break;
    if (absl::Now() >= deadline) {
      std::vector<std::string> waiting;
      if (auto pods = api.Get(pods_path); pods.ok()) {
        for (const auto& p : (*pods).value("items", nlohmann::json::array())) {
          NodeState s = StateOf(p);
          if (!s.restoring || !s.done) {
            waiting.push_back(absl::StrCat(s.node.empty() ? "(unscheduled)" : s.node, " (pod ",
                                           s.pod, s.restoring ? ": " : ": old template, ", s.note,
                                           ")"));
          }
        }
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "after ", absl::FormatDuration(o.timeout), " ", line,
          waiting.empty() ? "" : "; still waiting: ", absl::StrJoin(waiting, ", "),
          ". On those nodes kubelet still uses the shim, which keeps running: run "
          "`kubelet-endpoint.sh restore` there (docs/install.md), or `helm uninstall --no-hooks` "
          "to uninstall without putting them back"));
    }
    sleep(o.poll);
    ds = api.Get(ds_path);
    if (!ds.ok()) return Annotate(ds.status(), "watching the DaemonSet's rollout");
  }
  // Which nodes kept their kubelet as it was, and why (their init container says).
  auto pods = api.Get(pods_path);
  if (!pods.ok()) return Annotate(pods.status(), "listing the DaemonSet's pods");
  int restored = 0;
  for (const auto& p : (*pods).value("items", nlohmann::json::array())) {
    NodeState s = StateOf(p);
    if (!s.restoring) continue;
    if (s.done && s.note.empty()) {
      ++restored;
    } else {
      log << "node " << s.node << ": kubelet left as it was: " << s.note << "\n";
    }
  }
  log << "kubelet's endpoint is back on " << restored << " node(s); the DaemonSet may go\n";
  return absl::OkStatus();
}

}  // namespace cryo::kube
