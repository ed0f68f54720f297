// Runs the real kubectl-checkpoint binary, which runs the real kubectl, against a fake API
// server (standing in for kubelet and cryod behind the API server's proxies too), and checks
// the requests it sent, what it printed and how it exited.

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/kubectl/errors.h"
#include "test/daemon/kubectl/fake_apiserver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "lib/base/subprocess.h"

namespace cryo::kubectl {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using testing::FakeApiServer;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::JsonResponse;
using testing::Lines;
using ::testing::Not;
using testing::Request;
using testing::Response;
using ::testing::StartsWith;
using testing::StatusJson;

constexpr char kCryoPods[] = "/api/v1/namespaces/cryo-system/pods";
constexpr char kTrainUid[] = "6d3c1a8e-0000-4000-8000-000000000001";
constexpr char kTrainCheckpoint[] = "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker";
constexpr char kTrainArchive[] = "/var/lib/kubelet/checkpoints/checkpoint-train-0_ml-worker.tar";

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const Outcome& r) {
  return os << "exit " << r.code << "\n--- stdout\n" << r.out << "--- stderr\n" << r.err;
}

// A container's status in a pod: "running", "waiting:REASON" or "terminated:REASON".
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

// A pod as the API server returns it, server-set fields included.
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

// The cryo DaemonSet's pods: (name, node, phase).
json CryoPodList(const std::vector<std::tuple<std::string, std::string, std::string>>& pods) {
  json items = json::array();
  for (const auto& [name, node, phase] : pods) {
    items.push_back(
        {{"metadata", {{"name", name}, {"namespace", "cryo-system"}}},
         {"spec",
          {{"nodeName", node},
           {"containers",
            {{{"name", "cryod"},
              {"ports", {{{"name", "http"}, {"containerPort", 9464}, {"protocol", "TCP"}}}}}}}}},
         {"status", {{"phase", phase}}}});
  }
  return {{"kind", "PodList"}, {"apiVersion", "v1"}, {"items", items}};
}

// A checkpoint as cryod's /v1/checkpoints answers it.
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

std::string ProxyPath(const std::string& cryo_pod, const std::string& rest) {
  return absl::StrCat(kCryoPods, "/", cryo_pod, ":9464/proxy", rest);
}

// A checkpoint the shim took of NS/POD/CONTAINER (the labels it sets), of the pod `uid`.
json CheckpointOf(const std::string& id, const std::string& ns, const std::string& pod,
                  const std::string& container, const std::string& uid = kTrainUid) {
  json c = Checkpoint(id, "2026-11-02T10:00:00Z", "node-a", 4096);
  c["labels"] = {{"io.kubernetes.pod.namespace", ns},
                 {"io.kubernetes.pod.name", pod},
                 {"io.kubernetes.container.name", container},
                 {"io.kubernetes.pod.uid", uid},
                 {"cryo.dev/reason", "checkpoint-api"}};
  return c;
}

class KubectlCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // kubectl is part of this machine kind: its absence is a broken machine, not a skip.
    ASSERT_FALSE(FindExecutable("kubectl").empty())
        << "kubectl is not on PATH: these tests run the real kubectl against a fake API "
           "server. Install kubectl (client only) and run them again.";
    ASSERT_TRUE(server_.ok()) << "the fake API server could not listen on 127.0.0.1";
    char t[] = "/tmp/kubectl-checkpoint-test-XXXXXX";
    ASSERT_NE(::mkdtemp(t), nullptr);
    dir_ = t;
    kubeconfig_ = dir_ + "/kubeconfig";
    WriteKubeconfig(kubeconfig_, server_.url());
  }
  void TearDown() override {
    if (!dir_.empty()) (void)!::system(("rm -rf '" + dir_ + "'").c_str());
  }

  static void WriteKubeconfig(const std::string& path, const std::string& server) {
    std::ofstream f(path);
    f << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: " << server
      << "\n    insecure-skip-tls-verify: true\nusers:\n- name: tester\n  user:\n"
         "    token: test-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n"
         "    user: tester\n    namespace: default\ncurrent-context: fake\n";
  }

  // The binary with KUBECONFIG pointing at the fake server, and a HOME of its own so kubectl's
  // discovery cache stays in the test's directory.
  Outcome Plugin(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {KUBECTL_CHECKPOINT_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions ro;
    ro.argv = argv;
    ro.env = env_with_defaults(std::move(env));
    auto r = cryo::Run(ro);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    return {r->exit.ShellCode(), r->out, r->err};
  }

  // The test's variables after the defaults, so they win.
  std::vector<std::string> env_with_defaults(std::vector<std::string> env) {
    std::vector<std::string> all = {"KUBECONFIG=" + kubeconfig_, "HOME=" + dir_,
                                    "KUBECACHEDIR=" + dir_ + "/cache"};
    all.insert(all.end(), env.begin(), env.end());
    return all;
  }

  void ServeTrainPod(const std::string& state = "running") {
    server_.OnJson("GET", "/api/v1/namespaces/ml/pods/train-0",
                   Pod("ml", "train-0", "node-a", {{"worker", state}}));
  }
  void ServeCryoPods() {
    server_.On("GET", kCryoPods, [](const Request& r) {
      json all = CryoPodList({{"cryo-a", "node-a", "Running"}, {"cryo-b", "node-b", "Running"}});
      std::string sel = r.Param("fieldSelector");
      if (absl::StartsWith(sel, "spec.nodeName=")) {
        json items = json::array();
        for (const auto& p : all["items"]) {
          if ("spec.nodeName=" + p["spec"]["nodeName"].get<std::string>() == sel)
            items.push_back(p);
        }
        all["items"] = items;
      }
      return JsonResponse(all);
    });
  }

  // kubelet's checkpoint call at `post_path` answers `archives`; cryod's list on `cryo_pod`
  // answers `before` until that call arrives and `after` from then on.
  void ServeCheckpointCall(const std::string& cryo_pod, const std::string& post_path,
                           const json& archives, const json& before, const json& after) {
    auto posted = std::make_shared<std::atomic<bool>>(false);
    server_.On("POST", post_path, [posted, archives](const Request&) {
      posted->store(true);
      return JsonResponse({{"items", archives}});
    });
    server_.On("GET", ProxyPath(cryo_pod, "/v1/checkpoints"),
               [posted, before, after](const Request&) {
                 return JsonResponse(posted->load() ? after : before);
               });
  }

  FakeApiServer server_;
  std::string dir_;
  std::string kubeconfig_;
};

// ---- kubectl checkpoint POD

TEST_F(KubectlCheckpointTest, CheckpointsThroughKubeletsApi) {
  ServeTrainPod();
  ServeCryoPods();
  const json old = CheckpointOf("ck-old", "ml", "train-0", "worker");
  ServeCheckpointCall("cryo-a", kTrainCheckpoint, json::array({kTrainArchive}), json::array({old}),
                      json::array({CheckpointOf("ck-new", "ml", "train-0", "worker"), old}));
  Outcome r = Plugin({"train-0", "-n", "ml", "--timeout", "90"});
  ASSERT_EQ(r.code, 0) << r;
  auto reqs = server_.ApiRequests();
  EXPECT_THAT(Lines(reqs),
              ElementsAre("GET /api/v1/namespaces/ml/pods/train-0", std::string("GET ") + kCryoPods,
                          "GET " + ProxyPath("cryo-a", "/v1/checkpoints"),
                          std::string("POST ") + kTrainCheckpoint,
                          "GET " + ProxyPath("cryo-a", "/v1/checkpoints")));
  EXPECT_EQ(reqs[1].Param("labelSelector"), "app.kubernetes.io/name=cryo");
  EXPECT_EQ(reqs[1].Param("fieldSelector"), "spec.nodeName=node-a");
  EXPECT_EQ(reqs[3].Param("timeout"), "90");
  EXPECT_THAT(r.out, HasSubstr("checkpointed ml/train-0/worker on node node-a"));
  EXPECT_THAT(r.out, HasSubstr("cryo checkpoint: ck-new (kubectl checkpoint inspect ck-new)"));
  EXPECT_THAT(r.out, HasSubstr(kTrainArchive));
  EXPECT_THAT(r.out, Not(HasSubstr("ck-old")));
}

TEST_F(KubectlCheckpointTest, CheckpointJsonAndKubeconfigFlagAndContextNamespace) {
  // No -n: the context's namespace; no KUBECONFIG: --kubeconfig is passed to kubectl.
  server_.OnJson("GET", "/api/v1/namespaces/default/pods/web",
                 Pod("default", "web", "node-b", {{"app", "running"}}));
  ServeCryoPods();
  ServeCheckpointCall("cryo-b", "/api/v1/nodes/node-b/proxy/checkpoint/default/web/app",
                      json::array({"/var/lib/kubelet/checkpoints/c.tar"}), json::array(),
                      json::array({CheckpointOf("ck-web", "default", "web", "app")}));
  Outcome r = Plugin({"pod/web", "--kubeconfig", kubeconfig_, "-o", "json"},
                     {"KUBECONFIG=" + dir_ + "/does-not-exist"});
  ASSERT_EQ(r.code, 0) << r;
  json j = json::parse(r.out);
  EXPECT_EQ(j, json({{"namespace", "default"},
                     {"pod", "web"},
                     {"container", "app"},
                     {"node", "node-b"},
                     {"items", {"/var/lib/kubelet/checkpoints/c.tar"}},
                     {"checkpoint_id", "ck-web"}}));
  auto reqs = server_.ApiRequests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[3].method, "POST");
  EXPECT_EQ(reqs[3].Param("timeout"), "");
}

TEST_F(KubectlCheckpointTest, KubeletNotGoingThroughTheShimIsAnError) {
  // containerd 2.x answered CheckpointContainer itself: kubelet reports an archive, but cryod's
  // store got nothing new of this container (only other pods' and containers' checkpoints, and
  // one of an earlier pod of the same name).
  ServeTrainPod();
  ServeCryoPods();
  const json old = CheckpointOf("ck-old", "ml", "train-0", "worker");
  ServeCheckpointCall(
      "cryo-a", kTrainCheckpoint, json::array({kTrainArchive}), json::array({old}),
      json::array({CheckpointOf("ck-other-pod", "ml", "train-1", "worker"),
                   CheckpointOf("ck-sidecar", "ml", "train-0", "sidecar"),
                   CheckpointOf("ck-earlier-pod", "ml", "train-0", "worker", "0000-old-uid"),
                   old}));
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitNotThroughCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("kubelet on node node-a checkpointed ml/train-0/worker, but cryo's "
                               "store has no new checkpoint of it"));
  EXPECT_THAT(r.err, HasSubstr("does not seem to go through cryo-cri-shim"));
  EXPECT_THAT(r.err, HasSubstr("docs/install.md"));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("The runtime's own archive is at ", kTrainArchive,
                                            " on node node-a")));
  EXPECT_EQ(r.out, "") << "nothing claims success";
  EXPECT_EQ(Lines(server_.ApiRequests()).back(), "GET " + ProxyPath("cryo-a", "/v1/checkpoints"));
}

TEST_F(KubectlCheckpointTest, CryodNotAnsweringStopsBeforeKubeletIsAsked) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"),
                 StatusJson(503, "ServiceUnavailable",
                            "error trying to reach service: dial tcp "
                            "10.0.0.7:9464: connect: connection refused"),
                 503);
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitCryodFailed) << r;
  EXPECT_THAT(r.err, HasSubstr("cryo pod cryo-a (node node-a) does not answer"));
  EXPECT_THAT(r.err, HasSubstr("nothing was checkpointed"));
  for (const auto& q : server_.ApiRequests()) EXPECT_NE(q.method, "POST");
}

TEST_F(KubectlCheckpointTest, PodNotFound) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/nope",
                 StatusJson(404, "NotFound", "pods \"nope\" not found"), 404);
  Outcome r = Plugin({"nope", "-n", "ml"});
  EXPECT_EQ(r.code, kExitPodNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("pod ml/nope not found"));
  EXPECT_THAT(Lines(server_.ApiRequests()), ElementsAre("GET /api/v1/namespaces/ml/pods/nope"));
}

TEST_F(KubectlCheckpointTest, ContainerNotRunning) {
  ServeTrainPod("waiting:CrashLoopBackOff");
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitContainerNotRunning) << r;
  EXPECT_THAT(r.err, HasSubstr("container worker of pod ml/train-0 is not running (waiting: "
                               "CrashLoopBackOff)"));
  EXPECT_EQ(server_.ApiRequests().size(), 1u);
}

TEST_F(KubectlCheckpointTest, ContainerMustBeChosenAndExist) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/duo",
                 Pod("ml", "duo", "node-a", {{"worker", "running"}, {"sidecar", "running"}}));
  Outcome r = Plugin({"duo", "-n", "ml"});
  EXPECT_EQ(r.code, kExitContainerNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("choose one with -c (worker, sidecar)"));
  r = Plugin({"duo", "-n", "ml", "-c", "nope"});
  EXPECT_EQ(r.code, kExitContainerNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("has no container 'nope' (its containers: worker, sidecar)"));
}

TEST_F(KubectlCheckpointTest, PodNotScheduled) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/train-0",
                 Pod("ml", "train-0", "", {{"worker", "waiting:ContainerCreating"}}));
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitPodNotScheduled) << r;
  EXPECT_THAT(r.err, HasSubstr("pod ml/train-0 is not scheduled to a node yet (phase Pending)"));
}

TEST_F(KubectlCheckpointTest, NodeWithoutCryo) {
  ServeTrainPod();
  server_.OnJson("GET", kCryoPods, CryoPodList({}));
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("node node-a does not run cryo"));
  EXPECT_THAT(r.err, HasSubstr("app.kubernetes.io/name=cryo in namespace cryo-system"));
  for (const auto& q : server_.ApiRequests()) EXPECT_NE(q.method, "POST");
}

TEST_F(KubectlCheckpointTest, KubeletErrorIsQuoted) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::array());
  const std::string why =
      "checkpointing of ml/train-0/worker failed (rpc error: code = FailedPrecondition desc = "
      "container uses a GPU that cannot be checkpointed)";
  server_.On("POST", "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker",
             Response{500, why, "text/plain; charset=utf-8"});
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitKubeletRefused) << r;
  EXPECT_THAT(r.err, HasSubstr("kubelet on node node-a refused to checkpoint ml/train-0/worker"));
  EXPECT_THAT(r.err, HasSubstr(why));
}

TEST_F(KubectlCheckpointTest, KubeletWithoutCheckpointApi) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::array());
  server_.On("POST", "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker",
             Response{404, "404 page not found\n", "text/plain; charset=utf-8"});
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitKubeletRefused) << r;
  EXPECT_THAT(r.err, HasSubstr("ContainerCheckpoint feature gate"));
}

TEST_F(KubectlCheckpointTest, UnauthorizedQuotesKubectl) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/train-0",
                 StatusJson(401, "Unauthorized", "Unauthorized"), 401);
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitUnauthorized) << r;
  EXPECT_THAT(r.err, HasSubstr("You must be logged in to the server"));
}

TEST_F(KubectlCheckpointTest, ForbiddenNodeProxy) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::array());
  server_.OnJson("POST", "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker",
                 StatusJson(403, "Forbidden",
                            "nodes \"node-a\" is forbidden: User \"bob\" cannot create resource "
                            "\"nodes/proxy\" in API group \"\" at the cluster scope"),
                 403);
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitUnauthorized) << r;
  EXPECT_THAT(r.err, HasSubstr("cannot create resource \"nodes/proxy\""));
}

TEST_F(KubectlCheckpointTest, ApiServerUnreachable) {
  // Nothing listens on port 1 of the loopback address.
  WriteKubeconfig(kubeconfig_, "http://127.0.0.1:1");
  Outcome r = Plugin({"train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitApiUnreachable) << r;
  EXPECT_THAT(r.err, HasSubstr("cannot reach the Kubernetes API server"));
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1:1"));
}

TEST_F(KubectlCheckpointTest, KubectlMissingIs127ForEveryCommand) {
  // A missing kubectl was once taken for "the API server has no cryo pods" (exit 9).
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"train-0", "-n", "ml"},
           {"list"},
           {"list", "--node", "node-a"},
           {"inspect", "ck-1"},
           {"restore", "ck-1"},
           {"restore", "ck-1", "--from-file", "/dev/null"},
           {"restore", "ck-1", "--workload", "job/train"}}) {
    for (const std::string& kubectl : {std::string("/nonexistent"), dir_}) {  // missing; a dir
      Outcome r = Plugin(args, {"KUBECTL=" + kubectl});
      EXPECT_EQ(r.code, kExitKubectlMissing) << absl::StrJoin(args, " ") << "\n" << r;
      EXPECT_THAT(r.err, HasSubstr("cannot run kubectl")) << absl::StrJoin(args, " ");
    }
  }
}

TEST_F(KubectlCheckpointTest, UsageErrors) {
  Outcome r = Plugin({"train-0", "--bogus"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  EXPECT_THAT(r.err, HasSubstr("unknown flag --bogus"));
  r = Plugin({"list", "-c", "x"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  r = Plugin({"train-0", "-o", "yaml"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  r = Plugin({});
  EXPECT_EQ(r.code, kExitUsage) << r;
  EXPECT_THAT(server_.requests(), IsEmpty());
}

TEST_F(KubectlCheckpointTest, HelpForEachCommand) {
  for (const std::string cmd : {"list", "inspect", "restore"}) {
    Outcome r = Plugin({cmd, "--help"});
    EXPECT_EQ(r.code, 0) << r;
    EXPECT_THAT(r.out, HasSubstr("kubectl checkpoint " + cmd)) << cmd;
    EXPECT_THAT(r.out, HasSubstr("--annotation-prefix")) << cmd;
  }
  Outcome r = Plugin({"-h"});
  EXPECT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("kubectl checkpoint POD [-c CONTAINER]"));
  EXPECT_THAT(server_.requests(), IsEmpty());
}

// ---- list

class ListTest : public KubectlCheckpointTest {
 protected:
  void SetUp() override {
    KubectlCheckpointTest::SetUp();
    ServeCryoPods();
    // node-a and node-b share a store: both report ck-shared.
    json a = {Checkpoint("ck-shared", "2026-11-02T10:00:00Z", "node-a", 1536 << 20),
              Checkpoint("ck-old", "2026-11-01T10:00:00Z", "node-a", 512)};
    json b = {Checkpoint("ck-new", "2026-11-02T11:00:00Z", "node-b", 2048),
              Checkpoint("ck-shared", "2026-11-02T10:00:00Z", "node-a", 1536 << 20)};
    server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), a);
    server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"), b);
  }
};

TEST_F(ListTest, MergesNodesSharingAStore) {
  Outcome r = Plugin({"list"});
  ASSERT_EQ(r.code, 0) << r;
  auto reqs = server_.ApiRequests();
  EXPECT_THAT(Lines(reqs), ElementsAre(std::string("GET ") + kCryoPods,
                                       "GET " + ProxyPath("cryo-a", "/v1/checkpoints"),
                                       "GET " + ProxyPath("cryo-b", "/v1/checkpoints")));
  EXPECT_EQ(reqs[0].Param("fieldSelector"), "");
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << r;
  EXPECT_THAT(lines[0], StartsWith("ID "));
  for (const char* col : {"WORKLOAD", "POD", "NODE", "SIZE", "AGE"}) {
    EXPECT_THAT(lines[0], HasSubstr(col));
  }
  EXPECT_THAT(lines[1], StartsWith("ck-new "));
  EXPECT_THAT(lines[2], StartsWith("ck-shared "));
  EXPECT_THAT(lines[3], StartsWith("ck-old "));
  EXPECT_THAT(lines[2], HasSubstr("ml.train.worker"));
  EXPECT_THAT(lines[2], HasSubstr("ml/train-0/worker"));
  EXPECT_THAT(lines[2], HasSubstr("node-a"));
  EXPECT_THAT(lines[2], HasSubstr("1.5 GiB"));
  EXPECT_THAT(lines[1], HasSubstr("node-b"));
}

TEST_F(ListTest, JsonIsTheMergedArray) {
  Outcome r = Plugin({"list", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  json j = json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  std::vector<std::string> ids;
  for (const auto& c : j) ids.push_back(c["checkpoint_id"]);
  EXPECT_THAT(ids, ElementsAre("ck-new", "ck-shared", "ck-old"));
  EXPECT_EQ(j[1], Checkpoint("ck-shared", "2026-11-02T10:00:00Z", "node-a", 1536 << 20));
}

TEST_F(ListTest, OneNodeAndWorkloadFilter) {
  Outcome r = Plugin({"list", "--node", "node-b", "--workload", "ml.train.worker"});
  ASSERT_EQ(r.code, 0) << r;
  auto reqs = server_.ApiRequests();
  ASSERT_THAT(Lines(reqs), ElementsAre(std::string("GET ") + kCryoPods,
                                       "GET " + ProxyPath("cryo-b", "/v1/checkpoints")));
  EXPECT_EQ(reqs[0].Param("fieldSelector"), "spec.nodeName=node-b");
  EXPECT_EQ(reqs[1].Param("workload"), "ml.train.worker");
}

TEST_F(ListTest, AFailingCryodIsAWarning) {
  server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"),
                 {{"error", {{"code", "unavailable"}, {"message", "cryod is starting"}}}}, 503);
  Outcome r = Plugin({"list", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json::parse(r.out).size(), 2u);
  EXPECT_THAT(r.err, HasSubstr("warning: cryo pod cryo-b (node node-b)"));
}

TEST_F(ListTest, NoCryodAnswers) {
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::object(), 500);
  server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"), json::object(), 500);
  Outcome r = Plugin({"list"});
  EXPECT_EQ(r.code, kExitCryodFailed) << r;
}

// ---- inspect

TEST_F(KubectlCheckpointTest, InspectAsksCryodsUntilOneHasIt) {
  ServeCryoPods();
  // cryo-a's store does not have it; cryo-b's does.
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints/ck-1"),
                 {{"error", {{"code", "not_found"}, {"message", "no checkpoint ck-1"}}}}, 404);
  json ck = Checkpoint("ck-1", "2026-11-02T10:00:00Z", "node-a", 3 << 20);
  ck["store_path"] = "/var/lib/cryo/store/checkpoints/ck-1";
  ck["files"] = {{{"path", "images/pages-1.img"}, {"size", "3145728"}, {"checksum", "xxh64:1"}}};
  ck["manifest"] = {{"source",
                     {{"kernel", "6.18.0"},
                      {"arch", "x86_64"},
                      {"criu_version", "4.1.1"},
                      {"cryo_version", "0.1.0"}}},
                    {"target", {{"cmdline", {"python3", "train.py"}}}},
                    {"container", {{"image", "registry.local/train:1"}}},
                    {"gpu", {{"cuda", {{"driver", "580"}}}}},
                    {"gpu_processes", {{{"pid", 7}}}},
                    {"options", {{"leave_running", true}}}};
  server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints/ck-1"), ck);
  Outcome r = Plugin({"inspect", "ck-1"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(Lines(server_.ApiRequests()),
              ElementsAre(std::string("GET ") + kCryoPods,
                          "GET " + ProxyPath("cryo-a", "/v1/checkpoints/ck-1"),
                          "GET " + ProxyPath("cryo-b", "/v1/checkpoints/ck-1")));
  for (const char* want :
       {"ID:         ck-1", "Pod:        ml/train-0/worker", "Node:       node-a",
        "Command:    python3 train.py (pid 1, 2 processes)", "Size:       3.0 MiB in 12 files",
        "Source:     kernel 6.18.0, x86_64, CRIU 4.1.1, cryo 0.1.0",
        "Image:      registry.local/train:1", "GPU:        cuda (1 GPU process)",
        "Options:    left running", "Stages:     dump 80ms, gpu_checkpoint 1200ms",
        "Labels:     cryo.dev/reason=kubelet", "io.kubernetes.pod.name=train-0"}) {
    EXPECT_THAT(r.out, HasSubstr(want));
  }
  r = Plugin({"inspect", "ck-1", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json::parse(r.out), ck);
}

TEST_F(KubectlCheckpointTest, InspectUnknownAndUnsafeIds) {
  ServeCryoPods();
  Outcome r = Plugin({"inspect", "ck-nope"});
  EXPECT_EQ(r.code, kExitCheckpointNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("checkpoint ck-nope not found (asked cryo on 2 nodes)"));
  const size_t before = server_.requests().size();
  r = Plugin({"inspect", "../etc"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  EXPECT_EQ(server_.requests().size(), before);
}

// ---- restore

class RestoreTest : public KubectlCheckpointTest {
 protected:
  void SetUp() override {
    KubectlCheckpointTest::SetUp();
    server_.ServeDiscovery();
    ServeCryoPods();
    server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints/ck-1"),
                   Checkpoint("ck-1", "2026-11-02T10:00:00Z", "node-a", 4096));
    server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints/ck-1"),
                   Checkpoint("ck-1", "2026-11-02T10:00:00Z", "node-a", 4096));
    // The API server stores what it is sent and adds its own fields.
    server_.On("POST", "/api/v1/namespaces/ml/pods", [](const Request& r) {
      json pod = r.Json();
      pod["metadata"]["uid"] = "new-uid";
      pod["status"] = {{"phase", "Pending"}};
      return JsonResponse(pod, 201);
    });
  }

  // The one pod creation request.
  Request Created() {
    std::vector<Request> posts;
    for (const auto& r : server_.ApiRequests()) {
      if (r.method == "POST") posts.push_back(r);
    }
    EXPECT_EQ(posts.size(), 1u);
    return posts.empty() ? Request{} : posts[0];
  }
};

TEST_F(RestoreTest, CreatesAResumePodFromTheSourcePod) {
  ServeTrainPod();
  Outcome r = Plugin({"restore", "ck-1", "--name", "train-0-resumed"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("pod/train-0-resumed created in namespace ml"));
  EXPECT_THAT(r.out, HasSubstr("resumes from checkpoint ck-1 wherever the scheduler places it"));
  Request post = Created();
  EXPECT_EQ(post.path, "/api/v1/namespaces/ml/pods");
  EXPECT_EQ(post.Param("fieldValidation"), "Strict");
  json pod = post.Json();
  json src = Pod("ml", "train-0", "node-a", {{"worker", "running"}});
  json want_spec = src["spec"];
  want_spec.erase("nodeName");
  want_spec.erase("priority");
  EXPECT_EQ(
      pod,
      json({{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata",
             {{"name", "train-0-resumed"},
              {"namespace", "ml"},
              {"labels", {{"app", "train"}, {"batch.kubernetes.io/job-name", "train"}}},
              {"annotations",
               {{"team", "ml"}, {"cryo.dev/resume", "ck-1"}, {"cryo.dev/containers", "worker"}}}}},
            {"spec", want_spec}}))
      << pod.dump(2);
  // The source pod was read where the checkpoint's labels say it lived.
  bool read_source = false;
  for (const auto& q : server_.ApiRequests()) {
    read_source |= q.method == "GET" && q.path == "/api/v1/namespaces/ml/pods/train-0";
  }
  EXPECT_TRUE(read_source);
}

TEST_F(RestoreTest, NodeBindsThePodAndAsksThatNodesCryod) {
  ServeTrainPod();
  Outcome r = Plugin({"restore", "ck-1", "--node", "node-b", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  json pod = Created().Json();
  EXPECT_EQ(pod["spec"]["nodeName"], "node-b");
  EXPECT_THAT(pod["metadata"]["name"].get<std::string>(), StartsWith("train-0-r-"));
  EXPECT_EQ(pod["metadata"]["name"].get<std::string>().size(),
            std::string("train-0-r-").size() + 5);
  // Printed: the object as the server stored it.
  EXPECT_EQ(json::parse(r.out)["metadata"]["uid"], "new-uid");
  auto reqs = server_.ApiRequests();
  ASSERT_GE(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].Param("fieldSelector"), "spec.nodeName=node-b");
  EXPECT_EQ(Lines(reqs)[1], "GET " + ProxyPath("cryo-b", "/v1/checkpoints/ck-1"));
}

TEST_F(RestoreTest, DryRunPrintsThePodAndCreatesNothing) {
  ServeTrainPod();
  Outcome r = Plugin({"restore", "ck-1", "--dry-run", "--annotation-prefix", "example.com/cryo"});
  ASSERT_EQ(r.code, 0) << r;
  json pod = json::parse(r.out);
  EXPECT_EQ(pod["metadata"]["annotations"]["example.com/cryo/resume"], "ck-1");
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  EXPECT_FALSE(pod.contains("status"));
  for (const char* k : {"uid", "resourceVersion", "creationTimestamp", "ownerReferences",
                        "managedFields", "generateName"}) {
    EXPECT_FALSE(pod["metadata"].contains(k)) << k;
  }
  for (const auto& q : server_.ApiRequests()) EXPECT_NE(q.method, "POST");
}

TEST_F(RestoreTest, SourcePodGoneSuggestsFromFile) {
  Outcome r = Plugin({"restore", "ck-1"});
  EXPECT_EQ(r.code, kExitSourcePodGone) << r;
  EXPECT_THAT(r.err, HasSubstr("pod ml/train-0, which checkpoint ck-1 was taken from, no longer "
                               "exists"));
  EXPECT_THAT(r.err, HasSubstr("--from-file pod.json|yaml"));

  // The same pod from a YAML file: read locally by kubectl, then created.
  std::ofstream(dir_ + "/pod.yaml") << "apiVersion: v1\nkind: Pod\nmetadata:\n  name: train-0\n"
                                       "  namespace: ml\n  labels:\n    app: train\n"
                                       "spec:\n  nodeName: node-a\n  containers:\n"
                                       "  - name: worker\n    image: registry.local/train:1\n";
  r = Plugin({"restore", "ck-1", "--from-file", dir_ + "/pod.yaml", "--name", "again"});
  ASSERT_EQ(r.code, 0) << r;
  json pod = Created().Json();
  EXPECT_EQ(pod["metadata"]["name"], "again");
  EXPECT_EQ(pod["metadata"]["labels"], json({{"app", "train"}}));
  EXPECT_EQ(pod["metadata"]["annotations"],
            json({{"cryo.dev/resume", "ck-1"}, {"cryo.dev/containers", "worker"}}));
  EXPECT_EQ(pod["spec"],
            json({{"containers", {{{"name", "worker"}, {"image", "registry.local/train:1"}}}}}));
}

TEST_F(RestoreTest, WorkloadGetsAMergePatchOnItsTemplate) {
  json job = {{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata", {{"name", "train"}, {"namespace", "ml"}}},
              {"spec", {{"template", {{"spec", {{"containers", json::array()}}}}}}}};
  server_.OnJson("GET", "/apis/batch/v1/namespaces/ml/jobs/train", job);
  server_.OnJson("PATCH", "/apis/batch/v1/namespaces/ml/jobs/train", job);
  Outcome r = Plugin({"restore", "ck-1", "--workload", "job/train"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("job/train in namespace ml annotated"));
  std::vector<Request> patches;
  for (const auto& q : server_.ApiRequests()) {
    if (q.method == "PATCH") patches.push_back(q);
  }
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].path, "/apis/batch/v1/namespaces/ml/jobs/train");
  EXPECT_EQ(patches[0].headers["content-type"], "application/merge-patch+json");
  EXPECT_EQ(patches[0].Json(), json::parse(R"({"spec": {"template": {"metadata": {"annotations":
                {"cryo.dev/resume": "ck-1", "cryo.dev/containers": "worker"}}}}})"));
}

TEST_F(RestoreTest, WorkloadNotFound) {
  Outcome r = Plugin({"restore", "ck-1", "--workload", "deploy/web", "-n", "ml"});
  EXPECT_EQ(r.code, kExitWorkloadNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("deployment/web not found in namespace ml"));
  r = Plugin({"restore", "ck-1", "--workload", "cronjob/x"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  r = Plugin({"restore", "ck-1", "--workload", "job/x", "--node", "n"});
  EXPECT_EQ(r.code, kExitUsage) << r;
}

}  // namespace
}  // namespace cryo::kubectl
