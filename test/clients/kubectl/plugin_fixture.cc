#include "test/clients/kubectl/plugin_fixture.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/subprocess.h"
#include "lib/contract/labels.h"

namespace cryo::kubectl::testing {

std::ostream& operator<<(std::ostream& os, const Outcome& r) {
  return os << "exit " << r.code << "\n--- stdout\n" << r.out << "--- stderr\n" << r.err;
}

json ContainerStatus(const std::string& name, const std::string& state) {
  json s;
  if (state == "running") {
    s = {{"running", {{"startedAt", "2026-11-02T09:00:00Z"}}}};
  } else if (absl::StartsWith(state, "waiting:")) {
    s = {{"waiting", {{"reason", state.substr(8)}}}};
  } else {
    s = {{"terminated", {{"reason", state.substr(11)}, {"exitCode", 1}}}};
  }
  return {{"name", name}, {"ready", state == "running"}, {"state", s}};
}

json Pod(const std::string& ns, const std::string& name, const std::string& node,
         const std::vector<std::pair<std::string, std::string>>& containers) {
  json spec = {{"containers", json::array()},
               {"restartPolicy", "Never"},
               {"priority", 0},
               {"schedulerName", "default-scheduler"},
               {"volumes", {{{"name", "data"}, {"emptyDir", json::object()}}}}};
  json statuses = json::array();
  for (const auto& [c, state] : containers) {
    spec["containers"].push_back(
        {{"name", c}, {"image", "registry.local/train:1"}, {"args", {"--epochs", "90"}}});
    statuses.push_back(ContainerStatus(c, state));
  }
  if (!node.empty()) spec["nodeName"] = node;
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", ns},
            {"uid", kTrainUid},
            {"resourceVersion", "12345"},
            {"creationTimestamp", "2026-11-02T08:59:00Z"},
            {"generateName", "train-"},
            {"labels",
             {{"app", "train"},
              {"batch.kubernetes.io/job-name", "train"},
              {"batch.kubernetes.io/controller-uid", "0f0f"},
              {"controller-uid", "0f0f"}}},
            {"annotations",
             {{"team", "ml"}, {"kubectl.kubernetes.io/last-applied-configuration", "{}"}}},
            {"ownerReferences",
             {{{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"name", "train"}, {"uid", "0f0f"}}}},
            {"managedFields", json::array({{{"manager", "kube-controller-manager"}}})}}},
          {"spec", spec},
          {"status",
           {{"phase", node.empty() ? "Pending" : "Running"}, {"containerStatuses", statuses}}}};
}

json CryoPodList(const std::vector<std::tuple<std::string, std::string, std::string>>& pods,
                 bool http_port) {
  json items = json::array();
  for (const auto& [name, node, phase] : pods) {
    json ports = {{{"name", "grpc"}, {"containerPort", 9465}, {"protocol", "TCP"}}};
    if (http_port)
      ports.push_back({{"name", "http"}, {"containerPort", 9464}, {"protocol", "TCP"}});
    items.push_back(
        {{"metadata",
          {{"name", name},
           {"namespace", "cryo-system"},
           {"annotations", {{contract::k8s::kCryodApiTokenSecret, kApiTokenSecret}}}}},
         {"spec", {{"nodeName", node}, {"containers", {{{"name", "cryod"}, {"ports", ports}}}}}},
         {"status", {{"phase", phase}}}});
  }
  return {{"kind", "PodList"}, {"apiVersion", "v1"}, {"items", items}};
}

json NodeList(const std::vector<std::pair<std::string, std::string>>& nodes) {
  json items = json::array();
  for (const auto& [name, ready] : nodes) {
    json conditions = json::array();
    conditions.push_back({{"type", "MemoryPressure"}, {"status", "False"}});
    conditions.push_back({{"type", "Ready"}, {"status", ready}});
    items.push_back({{"metadata", {{"name", name}}}, {"status", {{"conditions", conditions}}}});
  }
  return {{"kind", "NodeList"}, {"apiVersion", "v1"}, {"items", items}};
}

json Checkpoint(const std::string& id, const std::string& created, const std::string& node,
                uint64_t size) {
  return {{"checkpoint_id", id},
          {"workload", "ml.train.worker"},
          {"node_name", node},
          {"created_at", created},
          {"root_pid", 1},
          {"pids", {1, 7}},
          {"command", "python3"},
          {"size_bytes", std::to_string(size)},
          {"file_count", 12},
          {"criu_version", "4.1.1"},
          {"kernel", "6.18.0"},
          {"kind", "container"},
          {"labels",
           {{"io.kubernetes.pod.namespace", "ml"},
            {"io.kubernetes.pod.name", "train-0"},
            {"io.kubernetes.container.name", "worker"},
            {"cryo.dev/reason", "kubelet"}}},
          {"stage_ms", {{"dump", "80"}, {"gpu_checkpoint", "1200"}}}};
}

json CheckpointOf(const std::string& id, const std::string& ns, const std::string& pod,
                  const std::string& container, const std::string& uid) {
  json c = Checkpoint(id, "2026-11-02T10:00:00Z", "node-a", 4096);
  c["labels"] = {{"io.kubernetes.pod.namespace", ns},
                 {"io.kubernetes.pod.name", pod},
                 {"io.kubernetes.container.name", container},
                 {"io.kubernetes.pod.uid", uid},
                 {"cryo.dev/reason", "checkpoint-api"}};
  return c;
}

std::string ProxyPath(const std::string& cryo_pod, const std::string& rest) {
  return absl::StrCat(kCryoPods, "/", cryo_pod, ":9464/proxy", rest);
}

std::string NodeProxyPath(const std::string& node, const std::string& rest) {
  return absl::StrCat("/api/v1/nodes/", node, ":9464/proxy", rest);
}

void PluginTest::SetUp() {
  // kubectl is part of this machine kind: its absence is a broken machine, not a skip.
  ASSERT_FALSE(FindExecutable("kubectl").empty())
      << "kubectl is not on PATH: these tests run the real kubectl against a fake API "
         "server. Install kubectl (client only) and run them again.";
  ASSERT_TRUE(server_.ok()) << "the fake API server could not start (TLS, 127.0.0.1)";
  char t[] = "/tmp/kubectl-cryo-test-XXXXXX";
  ASSERT_NE(::mkdtemp(t), nullptr);
  dir_ = t;
  kubeconfig_ = dir_ + "/kubeconfig";
  WriteKubeconfig(kubeconfig_, server_.url());
  // cryod's HTTP API asks for the token of the chart's Secret, which the reader role may get.
  server_.ServeCryodQueries(kApiToken);
  server_.OnJson("GET", std::string("/api/v1/namespaces/cryo-system/secrets/") + kApiTokenSecret,
                 {{"kind", "Secret"},
                  {"apiVersion", "v1"},
                  {"metadata", {{"name", kApiTokenSecret}, {"namespace", "cryo-system"}}},
                  {"data", {{"token", absl::Base64Escape(kApiToken)}}}});
}

void PluginTest::TearDown() {
  if (!dir_.empty()) (void)!::system(("rm -rf '" + dir_ + "'").c_str());
}

void PluginTest::WriteKubeconfig(const std::string& path, const std::string& server) {
  std::ofstream f(path);
  f << "apiVersion: v1\nkind: Config\n"
    << "clusters:\n"
    << "- name: fake\n  cluster:\n    server: " << server
    << "\n    insecure-skip-tls-verify: true\n"
    << "- name: strict\n  cluster:\n    server: " << server << "\n"
    << "- name: nowhere\n  cluster:\n    server: http://127.0.0.1:1\n"
    << "users:\n"
    << "- name: tester\n  user:\n    token: test-token\n"
    << "- name: other-user\n  user:\n    token: other-token\n"
    << "contexts:\n"
    << "- name: fake\n  context:\n    cluster: fake\n    user: tester\n    namespace: default\n"
    << "- name: other\n  context:\n    cluster: fake\n    user: other-user\n    namespace: ml\n"
    << "current-context: fake\n";
}

std::string PluginTest::WriteScript(const std::string& name, const std::string& body) {
  const std::string path = dir_ + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
  return path;
}

Outcome PluginTest::RunBinary(const std::string& binary, const std::vector<std::string>& args,
                              std::vector<std::string> env) {
  RunOptions ro;
  ro.argv = {binary};
  ro.argv.insert(ro.argv.end(), args.begin(), args.end());
  ro.env = {"KUBECONFIG=" + kubeconfig_,
            "HOME=" + dir_,
            "KUBECACHEDIR=" + dir_ + "/cache",
            "KUBECTL=",
            "CRYO_ENDPOINT=",
            "CRYO_NODE_SELECTOR="};
  ro.env.insert(ro.env.end(), env.begin(), env.end());
  auto r = cryo::Run(ro);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  return {r->exit.ShellCode(), r->out, r->err};
}

Outcome PluginTest::Plugin(const std::vector<std::string>& args, std::vector<std::string> env) {
  return RunBinary(KUBECTL_PLUGIN_DIR "/kubectl-cryo", args, std::move(env));
}

Outcome PluginTest::Legacy(const std::vector<std::string>& args, std::vector<std::string> env) {
  return RunBinary(KUBECTL_PLUGIN_DIR "/kubectl-checkpoint", args, std::move(env));
}

Outcome PluginTest::ThroughKubectl(const std::vector<std::string>& args,
                                   std::vector<std::string> env) {
  const char* path = ::getenv("PATH");
  env.insert(env.begin(), absl::StrCat("PATH=", KUBECTL_PLUGIN_DIR, ":", path ? path : ""));
  return RunBinary(FindExecutable("kubectl"), args, std::move(env));
}

void PluginTest::ServeTrainPod(const std::string& state) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/train-0",
                 Pod("ml", "train-0", "node-a", {{"worker", state}}));
}

void PluginTest::ServeCryoPods() {
  server_.On("GET", kCryoPods, [](const Request& r) {
    json all = CryoPodList({{"cryo-a", "node-a", "Running"}, {"cryo-b", "node-b", "Running"}});
    std::string sel = r.Param("fieldSelector");
    if (absl::StartsWith(sel, "spec.nodeName=")) {
      json items = json::array();
      for (const auto& p : all["items"]) {
        if ("spec.nodeName=" + p["spec"]["nodeName"].get<std::string>() == sel) {
          items.push_back(p);
        }
      }
      all["items"] = items;
    }
    return JsonResponse(all);
  });
}

void PluginTest::ServeCheckpointCall(const std::string& list_path, const std::string& post_path,
                                     const json& archives, const json& before, const json& after) {
  auto posted = std::make_shared<std::atomic<bool>>(false);
  server_.On("POST", post_path, [posted, archives](const Request&) {
    posted->store(true);
    return JsonResponse({{"items", archives}});
  });
  server_.On("GET", list_path, [posted, before, after](const Request&) {
    return JsonResponse(posted->load() ? after : before);
  });
}

}  // namespace cryo::kubectl::testing
