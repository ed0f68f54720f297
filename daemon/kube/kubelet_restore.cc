#include "daemon/kube/kubelet_restore.h"

#include <map>
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

// What a pod of the DaemonSet says about its node's kubelet.
struct PodState {
  std::string node, pod;
  bool restoring = false;  // runs the restoring template
  bool done = false;       // ... and its configure-kubelet ended with exit 0
  // done: configure-kubelet's termination message (why it left kubelet alone; empty when it
  // put it back or had nothing to do); not done: the first init container not done, and why.
  std::string note;
};

// "waiting: PodInitializing", "terminated: exit 1: Failed to reload daemon", "running".
std::string StateText(const nlohmann::json& state) {
  if (state.contains("terminated")) {
    const auto& t = state["terminated"];
    std::string out = absl::StrCat("exit ", Int(t, "exitCode"));
    for (const char* k : {"reason", "message"}) {
      if (!t.value(k, "").empty()) absl::StrAppend(&out, ": ", t.value(k, ""));
    }
    return out;
  }
  if (state.contains("waiting")) {
    const auto& w = state["waiting"];
    return absl::StrCat("waiting: ", w.value("reason", ""),
                        w.value("message", "").empty() ? "" : ": ", w.value("message", ""));
  }
  return state.contains("running") ? "running" : "not started";
}

PodState StateOf(const nlohmann::json& pod) {
  PodState s;
  s.node = pod["spec"].value("nodeName", "");
  s.pod = pod["metadata"].value("name", "");
  s.restoring = Mode(pod) == "restore";
  const auto& st = pod.value("status", nlohmann::json::object());
  // Init containers run in order: configure-kubelet is done only when everything before it is.
  for (const auto& c : st.value("initContainerStatuses", nlohmann::json::array())) {
    const auto& state = c.value("state", nlohmann::json::object());
    const bool ok = state.contains("terminated") && Int(state["terminated"], "exitCode") == 0;
    if (c.value("name", "") == kConfigureKubeletContainer && ok) {
      s.done = true;
      s.note = state["terminated"].value("message", "");
      return s;
    }
    if (!ok) {
      s.note = absl::StrCat(c.value("name", ""), ": ", StateText(state));
      // A crash loop spends most of its time waiting: the last run says why.
      const auto& last = c.value("lastState", nlohmann::json::object());
      if (!state.contains("terminated") && last.contains("terminated")) {
        absl::StrAppend(&s.note, " (last run: ", StateText(last), ")");
      }
      return s;
    }
  }
  s.note = absl::StrCat("pod ", st.value("phase", "not started"));
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
  // A node is back when a pod of the restoring template ran configure-kubelet to its end there,
  // whatever cryod does after it (it may never become ready: that is no reason to keep the
  // DaemonSet).
  const absl::Time deadline = absl::Now() + o.timeout;
  std::string last;
  std::map<std::string, PodState> by_node;  // the restoring pod when there is one
  for (;;) {
    const nlohmann::json& meta = (*ds)["metadata"];
    const nlohmann::json& st = ds->value("status", nlohmann::json::object());
    const bool observed = Int(st, "observedGeneration") >= Int(meta, "generation");
    const int64_t desired = Int(st, "desiredNumberScheduled");
    auto pods = api.Get(pods_path);
    if (!pods.ok()) return Annotate(pods.status(), "listing the DaemonSet's pods");
    by_node.clear();
    for (const auto& p : pods->value("items", nlohmann::json::array())) {
      PodState s = StateOf(p);
      auto [it, fresh] = by_node.emplace(s.node, s);
      if (!fresh && (s.restoring > it->second.restoring ||
                     (s.restoring == it->second.restoring && s.done > it->second.done))) {
        it->second = s;
      }
    }
    int64_t back = 0;
    for (const auto& [node, s] : by_node) back += s.restoring && s.done;
    // Before the controller has seen the patch its status is the old template's: say nothing.
    if (observed) {
      const std::string line = absl::StrCat(back, " of ", desired, " nodes put kubelet back");
      if (line != last) log << line << "\n";
      last = line;
      if (back >= desired) break;
    }
    if (absl::Now() >= deadline) {
      std::vector<std::string> waiting;
      for (const auto& [node, s] : by_node) {
        if (s.restoring && s.done) continue;
        waiting.push_back(absl::StrCat(node.empty() ? "(unscheduled)" : node, " (pod ", s.pod, ": ",
                                       s.restoring ? "" : "old template, ", s.note, ")"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "after ", absl::FormatDuration(o.timeout), ", ", back, " of ", desired,
          " nodes put kubelet back",
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
  int restored = 0;
  for (const auto& [node, s] : by_node) {
    if (!(s.restoring && s.done)) continue;
    if (s.note.empty()) {
      ++restored;
    } else {
      log << "node " << node << ": kubelet left as it was: " << s.note << "\n";
    }
  }
  log << "kubelet's endpoint is back on " << restored << " node(s); the DaemonSet may go\n";
  return absl::OkStatus();
}

}  // namespace cryo::kube
