// The commands of kubectl-cryo, run as the real binary, which runs the real kubectl against a
// fake API server (standing in for kubelet and cryod behind the API server's proxies too):
// the requests it sent, what it printed and how it exited.

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/kubectl/errors.h"
#include "clients/kubectl/objects.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/clients/kubectl/plugin_fixture.h"

namespace cryo::kubectl::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

using KubectlCryoTest = PluginTest;

// ---- kubectl cryo checkpoint POD

TEST_F(KubectlCryoTest, CheckpointsThroughKubeletsApi) {
  ServeTrainPod();
  ServeCryoPods();
  const json old = CheckpointOf("ck-old", "ml", "train-0", "worker");
  ServeCheckpointCall(ProxyPath("cryo-a", "/v1/checkpoints"), kTrainCheckpoint,
                      json::array({kTrainArchive}), json::array({old}),
                      json::array({CheckpointOf("ck-new", "ml", "train-0", "worker"), old}));
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml", "--timeout", "90"});
  ASSERT_EQ(r.code, 0) << r;
  auto reqs = server_.ApiRequests();
  // cryod's API through a query with the token of the Secret the cryo pod names, read once.
  EXPECT_THAT(
      Lines(reqs),
      ElementsAre("GET /api/v1/namespaces/ml/pods/train-0", std::string("GET ") + kCryoPods,
                  std::string("GET /api/v1/namespaces/cryo-system/secrets/") + kApiTokenSecret,
                  "GET " + ProxyPath("cryo-a", "/v1/checkpoints"),
                  std::string("POST ") + kTrainCheckpoint,
                  "GET " + ProxyPath("cryo-a", "/v1/checkpoints")));
  EXPECT_EQ(reqs[1].Param("labelSelector"), "app.kubernetes.io/name=cryo");
  EXPECT_EQ(reqs[1].Param("fieldSelector"), "spec.nodeName=node-a");
  EXPECT_TRUE(reqs[3].via_query);
  EXPECT_TRUE(reqs[5].via_query);
  EXPECT_EQ(reqs[4].Param("timeout"), "90");
  EXPECT_THAT(r.out, HasSubstr("checkpointed ml/train-0/worker on node node-a"));
  EXPECT_THAT(r.out, HasSubstr("cryo checkpoint: ck-new (kubectl cryo inspect ck-new)"));
  EXPECT_THAT(r.out, HasSubstr(kTrainArchive));
  EXPECT_THAT(r.out, Not(HasSubstr("ck-old")));
}

TEST_F(KubectlCryoTest, CheckpointJsonAndKubeconfigFlagAndContextNamespace) {
  // No -n: the context's namespace; no KUBECONFIG: --kubeconfig is passed to kubectl.
  server_.OnJson("GET", "/api/v1/namespaces/default/pods/web",
                 Pod("default", "web", "node-b", {{"app", "running"}}));
  ServeCryoPods();
  ServeCheckpointCall(ProxyPath("cryo-b", "/v1/checkpoints"),
                      "/api/v1/nodes/node-b/proxy/checkpoint/default/web/app",
                      json::array({"/var/lib/kubelet/checkpoints/c.tar"}), json::array(),
                      json::array({CheckpointOf("ck-web", "default", "web", "app")}));
  Outcome r = Plugin({"checkpoint", "pod/web", "--kubeconfig", kubeconfig_, "-o", "json"},
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
  ASSERT_EQ(reqs.size(), 6u);
  EXPECT_EQ(reqs[4].method, "POST");
  EXPECT_EQ(reqs[4].Param("timeout"), "");
}

TEST_F(KubectlCryoTest, KubeletNotGoingThroughTheShimIsAnError) {
  // containerd 2.x answered CheckpointContainer itself: kubelet reports an archive, but cryod's
  // store got nothing new of this container (only other pods' and containers' checkpoints, and
  // one of an earlier pod of the same name).
  ServeTrainPod();
  ServeCryoPods();
  const json old = CheckpointOf("ck-old", "ml", "train-0", "worker");
  ServeCheckpointCall(
      ProxyPath("cryo-a", "/v1/checkpoints"), kTrainCheckpoint, json::array({kTrainArchive}),
      json::array({old}),
      json::array({CheckpointOf("ck-other-pod", "ml", "train-1", "worker"),
                   CheckpointOf("ck-sidecar", "ml", "train-0", "sidecar"),
                   CheckpointOf("ck-earlier-pod", "ml", "train-0", "worker", "0000-old-uid"),
                   old}));
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
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

TEST_F(KubectlCryoTest, CryodNotAnsweringStopsBeforeKubeletIsAsked) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"),
                 StatusJson(503, "ServiceUnavailable",
                            "error trying to reach service: dial tcp "
                            "10.0.0.7:9464: connect: connection refused"),
                 503);
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitCryodFailed) << r;
  EXPECT_THAT(r.err, HasSubstr("cryo pod cryo-a (node node-a) does not answer"));
  EXPECT_THAT(r.err, HasSubstr("nothing was checkpointed"));
  for (const auto& q : server_.ApiRequests()) EXPECT_NE(q.method, "POST");
}

TEST_F(KubectlCryoTest, PodNotFound) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/nope",
                 StatusJson(404, "NotFound", "pods \"nope\" not found"), 404);
  Outcome r = Plugin({"checkpoint", "nope", "-n", "ml"});
  EXPECT_EQ(r.code, kExitPodNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("pod ml/nope not found"));
  EXPECT_THAT(Lines(server_.ApiRequests()), ElementsAre("GET /api/v1/namespaces/ml/pods/nope"));
}

TEST_F(KubectlCryoTest, ContainerNotRunning) {
  ServeTrainPod("waiting:CrashLoopBackOff");
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitContainerNotRunning) << r;
  EXPECT_THAT(r.err, HasSubstr("container worker of pod ml/train-0 is not running (waiting: "
                               "CrashLoopBackOff)"));
  EXPECT_EQ(server_.ApiRequests().size(), 1u);
}

TEST_F(KubectlCryoTest, ContainerMustBeChosenAndExist) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/duo",
                 Pod("ml", "duo", "node-a", {{"worker", "running"}, {"sidecar", "running"}}));
  Outcome r = Plugin({"checkpoint", "duo", "-n", "ml"});
  EXPECT_EQ(r.code, kExitContainerNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("choose one with -c (worker, sidecar)"));
  r = Plugin({"checkpoint", "duo", "-n", "ml", "-c", "nope"});
  EXPECT_EQ(r.code, kExitContainerNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("has no container 'nope' (its containers: worker, sidecar)"));
}

TEST_F(KubectlCryoTest, PodNotScheduled) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/train-0",
                 Pod("ml", "train-0", "", {{"worker", "waiting:ContainerCreating"}}));
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitPodNotScheduled) << r;
  EXPECT_THAT(r.err, HasSubstr("pod ml/train-0 is not scheduled to a node yet (phase Pending)"));
}

TEST_F(KubectlCryoTest, NodeWithoutCryo) {
  ServeTrainPod();
  server_.OnJson("GET", kCryoPods, CryoPodList({}));
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("cryod not found on node node-a: no pod labelled "
                               "app.kubernetes.io/name=cryo in namespace cryo-system runs there"));
  EXPECT_THAT(r.err, HasSubstr("--cryo-endpoint nodes:9464"));
  for (const auto& q : server_.ApiRequests()) EXPECT_NE(q.method, "POST");
}

TEST_F(KubectlCryoTest, KubeletErrorIsQuoted) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::array());
  const std::string why =
      "checkpointing of ml/train-0/worker failed (rpc error: code = FailedPrecondition desc = "
      "container uses a GPU that cannot be checkpointed)";
  server_.On("POST", "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker",
             Response{500, why, "text/plain; charset=utf-8"});
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitKubeletRefused) << r;
  EXPECT_THAT(r.err, HasSubstr("kubelet on node node-a refused to checkpoint ml/train-0/worker"));
  EXPECT_THAT(r.err, HasSubstr(why));
}

TEST_F(KubectlCryoTest, KubeletWithoutCheckpointApi) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::array());
  server_.On("POST", "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker",
             Response{404, "404 page not found\n", "text/plain; charset=utf-8"});
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitKubeletRefused) << r;
  EXPECT_THAT(r.err, HasSubstr("ContainerCheckpoint feature gate"));
}

TEST_F(KubectlCryoTest, UnauthorizedQuotesKubectl) {
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/train-0",
                 StatusJson(401, "Unauthorized", "Unauthorized"), 401);
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitUnauthorized) << r;
  EXPECT_THAT(r.err, HasSubstr("You must be logged in to the server"));
}

TEST_F(KubectlCryoTest, ForbiddenNodeProxy) {
  ServeTrainPod();
  ServeCryoPods();
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::array());
  server_.OnJson("POST", "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker",
                 StatusJson(403, "Forbidden",
                            "nodes \"node-a\" is forbidden: User \"bob\" cannot create resource "
                            "\"nodes/proxy\" in API group \"\" at the cluster scope"),
                 403);
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitUnauthorized) << r;
  EXPECT_THAT(r.err, HasSubstr("cannot create resource \"nodes/proxy\""));
}

TEST_F(KubectlCryoTest, ApiServerUnreachable) {
  // Nothing listens on port 1 of the loopback address.
  WriteKubeconfig(kubeconfig_, "http://127.0.0.1:1");
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml"});
  EXPECT_EQ(r.code, kExitApiUnreachable) << r;
  EXPECT_THAT(r.err, HasSubstr("cannot reach the Kubernetes API server"));
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1:1"));
}

TEST_F(KubectlCryoTest, KubectlMissingIs127ForEveryCommand) {
  // A missing kubectl was once taken for "the API server has no cryo pods" (exit 9).
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"checkpoint", "train-0", "-n", "ml"},
                                             {"list"},
                                             {"list", "-A"},
                                             {"list", "--node", "node-a"},
                                             {"list", "--cryo-endpoint", "nodes:9464"},
                                             {"inspect", "ck-1"},
                                             {"restore", "ck-1"},
                                             {"restore", "ck-1", "--from-file", "/dev/null"},
                                             {"restore", "ck-1", "--workload", "job/train"},
                                             {"version"},
                                             {"--version"}}) {
    for (const std::string& kubectl : {std::string("/nonexistent"), dir_}) {  // missing; a dir
      Outcome r = Plugin(args, {"KUBECTL=" + kubectl});
      EXPECT_EQ(r.code, kExitKubectlMissing) << absl::StrJoin(args, " ") << "\n" << r;
      EXPECT_THAT(r.err, HasSubstr("cannot run kubectl")) << absl::StrJoin(args, " ");
      // The second name too ("checkpoint" is then implied).
      std::vector<std::string> legacy = args;
      if (legacy[0] == "checkpoint") legacy.erase(legacy.begin());
      r = Legacy(legacy, {"KUBECTL=" + kubectl});
      EXPECT_EQ(r.code, kExitKubectlMissing)
          << "kubectl-checkpoint " << absl::StrJoin(legacy, " ") << "\n"
          << r;
    }
  }
  EXPECT_THAT(server_.requests(), IsEmpty());
}

TEST_F(KubectlCryoTest, UsageErrors) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"checkpoint", "train-0", "--bogus"},
                                             {"checkpoint", "train-0", "--bogus=1", "-Z"},
                                             {"list", "-c", "x"},  // another command's flag
                                             {"checkpoint", "train-0", "-A"},  // -A is list's
                                             {"inspect", "ck-1", "--all-namespaces"},
                                             {"checkpoint", "train-0", "-o", "jsonpath={.x"},
                                             {"list", "--cryo-endpoint", "node:9464"},
                                             {"list", "--cryo-endpoint", "nodes:99999"},
                                             {"list", "-v", "lots"},
                                             {"list", "--insecure-skip-tls-verify=maybe"},
                                             {"version", "-o", "name"},
                                             {"checkpoint"},
                                             {"checkpoint", "a", "b"},
                                             {"list", "extra"},
                                             {"train-0"},  // kubectl-cryo wants a command first
                                             {}}) {
    Outcome r = Plugin(args);
    EXPECT_EQ(r.code, kExitUsage) << absl::StrJoin(args, " ") << "\n" << r;
    EXPECT_THAT(r.err, HasSubstr("kubectl cryo")) << absl::StrJoin(args, " ");
  }
  Outcome r = Plugin({"checkpoint", "train-0", "--bogus"});
  EXPECT_THAT(r.err, HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(r.err, HasSubstr("See 'kubectl cryo checkpoint --help'"));
  r = Plugin({"train-0"});
  EXPECT_THAT(r.err, HasSubstr("unknown command \"train-0\" for \"kubectl cryo\" (to checkpoint "
                               "a pod: kubectl cryo checkpoint POD)"));
  r = Plugin({"list", "--cryo-endpoint", "node:9464"});
  EXPECT_THAT(r.err, HasSubstr("nodes:PORT"));
  r = Plugin({"list"}, {"CRYO_ENDPOINT=pod"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  EXPECT_THAT(r.err, HasSubstr("$CRYO_ENDPOINT"));
  EXPECT_THAT(server_.requests(), IsEmpty());
}

TEST_F(KubectlCryoTest, HelpForEachCommand) {
  for (const std::string cmd : {"checkpoint", "list", "inspect", "restore", "version"}) {
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{cmd, "--help"}, {"help", cmd}, {"-h", cmd}}) {
      Outcome r = Plugin(args);
      EXPECT_EQ(r.code, 0) << r;
      EXPECT_THAT(r.out, HasSubstr("kubectl cryo " + cmd)) << cmd;
      EXPECT_THAT(r.out, HasSubstr("--cryo-endpoint")) << cmd;
      EXPECT_THAT(r.out, HasSubstr("--as-group")) << cmd;
      EXPECT_THAT(r.out, Not(HasSubstr("kubectl checkpoint " + cmd))) << cmd;
    }
  }
  EXPECT_THAT(Plugin({"checkpoint", "--help"}).out, HasSubstr("--container NAME, -c NAME"));
  EXPECT_THAT(Plugin({"list", "--help"}).out, Not(HasSubstr("--container")));
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-h"}, {"--help"}, {"help"}}) {
    Outcome r = Plugin(args);
    EXPECT_EQ(r.code, 0) << r;
    EXPECT_THAT(r.out, HasSubstr("kubectl cryo checkpoint POD [-c CONTAINER]"));
    EXPECT_EQ(Legacy(args).out, r.out);
  }
  // No command: the help, on stderr, as a usage error.
  Outcome r = Plugin({});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("kubectl cryo checkpoint POD [-c CONTAINER]"));
  EXPECT_THAT(server_.requests(), IsEmpty());
}

// ---- list

class ListTest : public KubectlCryoTest {
 protected:
  void SetUp() override {
    KubectlCryoTest::SetUp();
    ServeCryoPods();
    // node-a and node-b share a store: both report ck-shared. Namespace ml has three
    // checkpoints, default one (ck-web), and ck-host was taken outside Kubernetes.
    json host = Checkpoint("ck-host", "2026-10-30T10:00:00Z", "node-a", 100);
    host.erase("labels");
    json a = {Checkpoint("ck-shared", "2026-11-02T10:00:00Z", "node-a", 1536 << 20),
              Checkpoint("ck-old", "2026-11-01T10:00:00Z", "node-a", 512), host};
    json web = CheckpointOf("ck-web", "default", "web", "app");
    web["created_at"] = "2026-10-31T10:00:00Z";
    json b = {Checkpoint("ck-new", "2026-11-02T11:00:00Z", "node-b", 2048),
              Checkpoint("ck-shared", "2026-11-02T10:00:00Z", "node-a", 1536 << 20), web};
    server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), a);
    server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"), b);
  }

  // The first column of each row after the header.
  static std::vector<std::string> FirstColumn(const std::string& table) {
    std::vector<std::string> out;
    std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
    for (size_t i = 1; i < lines.size(); ++i) {
      out.push_back(std::string(lines[i].substr(0, lines[i].find(' '))));
    }
    return out;
  }
};

TEST_F(ListTest, MergesNodesSharingAStore) {
  Outcome r = Plugin({"list", "-n", "ml"});
  ASSERT_EQ(r.code, 0) << r;
  auto reqs = server_.ApiRequests();
  // The token is read once for both cryods.
  EXPECT_THAT(Lines(reqs), ElementsAre(std::string("GET ") + kCryoPods,
                                       std::string("GET /api/v1/namespaces/cryo-system/secrets/") +
                                           kApiTokenSecret,
                                       "GET " + ProxyPath("cryo-a", "/v1/checkpoints"),
                                       "GET " + ProxyPath("cryo-b", "/v1/checkpoints")));
  EXPECT_EQ(reqs[0].Param("fieldSelector"), "");
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << r;
  EXPECT_THAT(lines[0], StartsWith("ID "));
  for (const char* col : {"WORKLOAD", "POD", "NODE", "SIZE", "AGE", "REASON"}) {
    EXPECT_THAT(lines[0], HasSubstr(col));
  }
  EXPECT_THAT(lines[0], Not(HasSubstr("NAMESPACE")));
  EXPECT_THAT(lines[1], StartsWith("ck-new "));
  EXPECT_THAT(lines[2], StartsWith("ck-shared "));
  EXPECT_THAT(lines[3], StartsWith("ck-old "));
  EXPECT_THAT(lines[2], HasSubstr("ml.train.worker"));
  EXPECT_THAT(lines[2], HasSubstr(" train-0/worker "));
  EXPECT_THAT(lines[2], HasSubstr("node-a"));
  EXPECT_THAT(lines[2], HasSubstr("1.5 GiB"));
  EXPECT_THAT(lines[1], HasSubstr("node-b"));
}

TEST_F(ListTest, NamespaceAsKubectlMeansIt) {
  // No -n: the context's namespace (default).
  Outcome r = Plugin({"list"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(FirstColumn(r.out), ElementsAre("ck-web"));
  EXPECT_THAT(r.out, HasSubstr(" web/app "));
  // -n, --namespace, -n=, -nNS.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"list", "-n", "ml"},
                                             {"list", "--namespace", "ml"},
                                             {"list", "--namespace=ml"},
                                             {"list", "-n=ml"},
                                             {"list", "-nml"},
                                             {"-n", "ml", "list"}}) {
    r = Plugin(args);
    ASSERT_EQ(r.code, 0) << r;
    EXPECT_THAT(FirstColumn(r.out), ElementsAre("ck-new", "ck-shared", "ck-old"))
        << absl::StrJoin(args, " ");
  }
  // Another context: its namespace (ml).
  r = Plugin({"list", "--context", "other"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(FirstColumn(r.out), ElementsAre("ck-new", "ck-shared", "ck-old"));
  // A namespace without checkpoints.
  r = Plugin({"list", "-n", "empty"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "No checkpoints found in empty namespace.\n");
}

TEST_F(ListTest, AllNamespaces) {
  // -A wins over -n, as in kubectl; checkpoints taken outside Kubernetes show too.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"list", "-A"},
                                             {"list", "--all-namespaces"},
                                             {"list", "-A", "-n", "ml"},
                                             {"list", "--all-namespaces=true"}}) {
    Outcome r = Plugin(args);
    ASSERT_EQ(r.code, 0) << r;
    std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 6u) << r;
    EXPECT_THAT(lines[0], StartsWith("NAMESPACE   ID "));
    EXPECT_THAT(FirstColumn(r.out), ElementsAre("ml", "ml", "ml", "default", "-"));
    EXPECT_THAT(lines[4], HasSubstr("ck-web"));
    EXPECT_THAT(lines[5], HasSubstr("ck-host"));
  }
}

TEST_F(ListTest, EveryOutputFormat) {
  // json and yaml: kubectl's List.
  Outcome r = Plugin({"list", "-n", "ml", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  json j = json::parse(r.out);
  EXPECT_EQ(j["apiVersion"], "v1");
  EXPECT_EQ(j["kind"], "List");
  EXPECT_EQ(j["metadata"], json({{"resourceVersion", ""}}));
  ASSERT_TRUE(j["items"].is_array());
  std::vector<std::string> ids;
  for (const auto& c : j["items"]) ids.push_back(c["checkpoint_id"]);
  EXPECT_THAT(ids, ElementsAre("ck-new", "ck-shared", "ck-old"));
  EXPECT_EQ(j["items"][1], Checkpoint("ck-shared", "2026-11-02T10:00:00Z", "node-a", 1536 << 20));
  // The same list, written as YAML.
  r = Plugin({"list", "-n", "ml", "-o", "yaml"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, ToYaml(j));
  EXPECT_THAT(r.out, StartsWith("apiVersion: v1\nitems:\n- checkpoint_id: ck-new\n"));
  EXPECT_THAT(r.out, HasSubstr("\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"));
  EXPECT_THAT(r.out, HasSubstr("  size_bytes: \"2048\"\n"));  // a string stays one
  // An empty list is still a List.
  r = Plugin({"list", "-n", "empty", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json::parse(r.out)["items"], json::array());
  // name: checkpoint/ID per line.
  r = Plugin({"list", "-A", "-o", "name"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out,
            "checkpoint/ck-new\ncheckpoint/ck-shared\ncheckpoint/ck-old\ncheckpoint/ck-web\n"
            "checkpoint/ck-host\n");
  // wide: more columns.
  r = Plugin({"list", "-n", "ml", "-o", "wide"});
  ASSERT_EQ(r.code, 0) << r;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << r;
  for (const char* col :
       {"ID", "WORKLOAD", "POD", "NODE", "SIZE", "AGE", "REASON", "KIND", "FILES", "CREATED"}) {
    EXPECT_THAT(lines[0], HasSubstr(col));
  }
  EXPECT_THAT(lines[2], HasSubstr("kubelet   container   12      2026-11-02T10:00:00Z"));
  // text, said or not.
  EXPECT_EQ(Plugin({"list", "-n", "ml", "-o", "text"}).out, Plugin({"list", "-n", "ml"}).out);
  // -o=FORMAT, -oFORMAT, --output FORMAT.
  EXPECT_EQ(Plugin({"list", "-A", "-o=name"}).out, Plugin({"list", "-A", "-oname"}).out);
  EXPECT_EQ(Plugin({"list", "-A", "--output", "name"}).out,
            Plugin({"list", "-A", "--output=name"}).out);
}

// -o jsonpath as kubectl means it (issue 38): over the same List -o json prints.
TEST_F(ListTest, JsonPathOverTheList) {
  Outcome r = Plugin({"list", "-n", "ml", "-o", "jsonpath={.items[*].checkpoint_id}"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "ck-new ck-shared ck-old");
  r = Plugin({"list", "-n", "ml", "-o",
              R"(jsonpath={range .items[*]}{.checkpoint_id}{"\t"}{.node_name}{"\n"}{end})"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "ck-new\tnode-b\nck-shared\tnode-a\nck-old\tnode-a\n");
  // A path that finds nothing fails, naming it; a malformed template is a usage error.
  r = Plugin({"list", "-n", "ml", "-o", "jsonpath={.items[0].no_such_field}"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr(".items[0].no_such_field is not found"));
  r = Plugin({"list", "-n", "ml", "-o", "jsonpath={.items[*}"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("'[' without ']'"));
  r = Plugin({"list", "-n", "ml", "-o", "jsonpath"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("jsonpath needs a template"));
}

TEST_F(ListTest, OneNodeAndWorkloadFilter) {
  Outcome r = Plugin({"list", "--node", "node-b", "--workload", "ml.train.worker"});
  ASSERT_EQ(r.code, 0) << r;
  auto reqs = server_.ApiRequests();
  ASSERT_THAT(Lines(reqs), ElementsAre(std::string("GET ") + kCryoPods,
                                       std::string("GET /api/v1/namespaces/cryo-system/secrets/") +
                                           kApiTokenSecret,
                                       "GET " + ProxyPath("cryo-b", "/v1/checkpoints")));
  EXPECT_EQ(reqs[0].Param("fieldSelector"), "spec.nodeName=node-b");
  EXPECT_EQ(reqs[2].Param("workload"), "ml.train.worker");
}

// Found on 2026-11-28 (issue 38): kubectl's -l and --no-headers were missing.
TEST_F(ListTest, SelectorAndNoHeadersAsKubectlMeansThem) {
  Outcome r = Plugin({"list", "-A", "-l", "cryo.dev/reason=checkpoint-api"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(FirstColumn(r.out), ElementsAre("default"));
  EXPECT_THAT(r.out, HasSubstr("ck-web"));
  r = Plugin({"list", "-n", "ml", "--selector", "cryo.dev/reason!=kubelet"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "");
  r = Plugin({"list", "-A", "-l", "io.kubernetes.pod.uid"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(FirstColumn(r.out), ElementsAre("default"));
  r = Plugin({"list", "-A", "-l", "!io.kubernetes.pod.name"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("ck-host"));
  EXPECT_THAT(r.out, Not(HasSubstr("ck-web")));
  r = Plugin({"list", "-n", "ml", "-l", "io.kubernetes.pod.name==train-0,cryo.dev/reason=kubelet",
              "--no-headers"});
  ASSERT_EQ(r.code, 0) << r;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << r;
  EXPECT_THAT(lines[0], StartsWith("ck-new "));
  r = Plugin({"list", "-l", "env in (prod)"});
  EXPECT_EQ(r.code, 2) << r << " (a usage error)";
  EXPECT_THAT(r.err, HasSubstr("not supported"));
}

TEST_F(ListTest, AFailingCryodIsAWarning) {
  server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"),
                 {{"error", {{"code", "UNAVAILABLE"}, {"message", "cryod is starting"}}}}, 503);
  Outcome r = Plugin({"list", "-A", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json::parse(r.out)["items"].size(), 3u);
  EXPECT_THAT(r.err, HasSubstr("warning: cryo pod cryo-b (node node-b)"));
}

TEST_F(ListTest, NoCryodAnswers) {
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::object(), 500);
  server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"), json::object(), 500);
  Outcome r = Plugin({"list"});
  EXPECT_EQ(r.code, kExitCryodFailed) << r;
}

// ---- cryod's HTTP API token (issue 34: the API lists every namespace's checkpoints, so cryod
// answers only callers that show the token of the chart's Secret)

TEST_F(KubectlCryoTest, ACallerWhoMayNotReadTheApiTokenIsToldWhichRoleGivesIt) {
  ServeCryoPods();
  server_.OnJson(
      "GET", std::string("/api/v1/namespaces/cryo-system/secrets/") + kApiTokenSecret,
      StatusJson(403, "Forbidden",
                 "secrets \"cryo-http-api\" is forbidden: User \"tester\" cannot get "
                 "resource \"secrets\" in API group \"\" in the namespace \"cryo-system\""),
      403);
  Outcome r = Plugin({"inspect", "ck-1"});
  EXPECT_NE(r.code, 0) << r;
  EXPECT_THAT(r.err, HasSubstr("Secret cryo-system/cryo-http-api"));
  EXPECT_THAT(r.err, HasSubstr("cryo-checkpoint-reader"));
  // cryod was never asked.
  for (const auto& q : server_.ApiRequests()) EXPECT_FALSE(q.via_query) << q.path;
}

TEST_F(KubectlCryoTest, ATokenCryodRefusesIsAnErrorNotAMissingCheckpoint) {
  ServeCryoPods();
  server_.ServeCryodQueries("another-token-than-the-secrets");
  Outcome r = Plugin({"inspect", "ck-1"});
  EXPECT_NE(r.code, 0) << r;
  EXPECT_THAT(r.err, Not(HasSubstr("not found"))) << r;
}

// ---- inspect

TEST_F(KubectlCryoTest, InspectAsksCryodsUntilOneHasIt) {
  ServeCryoPods();
  // cryo-a's store does not have it; cryo-b's does.
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints/ck-1"),
                 {{"error", {{"code", "NOT_FOUND"}, {"message", "no checkpoint ck-1"}}}}, 404);
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
  EXPECT_THAT(
      Lines(server_.ApiRequests()),
      ElementsAre(std::string("GET ") + kCryoPods,
                  std::string("GET /api/v1/namespaces/cryo-system/secrets/") + kApiTokenSecret,
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
  r = Plugin({"inspect", "ck-1", "-o", "yaml"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, ToYaml(ck));
  EXPECT_THAT(r.out, HasSubstr("\nmanifest:\n  container:\n    image: registry.local/train:1\n"));
  r = Plugin({"inspect", "ck-1", "-o", "name"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "checkpoint/ck-1\n");
  // -n does not hide a checkpoint: ids are unique across namespaces.
  EXPECT_EQ(Plugin({"inspect", "ck-1", "-n", "elsewhere", "-o", "name"}).out, "checkpoint/ck-1\n");
  EXPECT_EQ(Plugin({"inspect", "ck-1", "-o", "wide"}).out, Plugin({"inspect", "ck-1"}).out);
}

TEST_F(KubectlCryoTest, InspectUnknownAndUnsafeIds) {
  ServeCryoPods();
  Outcome r = Plugin({"inspect", "ck-nope"});
  EXPECT_EQ(r.code, kExitCheckpointNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("checkpoint ck-nope not found (asked cryod on 2 nodes)"));
  const size_t before = server_.requests().size();
  r = Plugin({"inspect", "../etc"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  EXPECT_EQ(server_.requests().size(), before);
}

// ---- restore

class RestoreTest : public KubectlCryoTest {
 protected:
  void SetUp() override {
    KubectlCryoTest::SetUp();
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
  ASSERT_GE(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].Param("fieldSelector"), "spec.nodeName=node-b");
  EXPECT_EQ(Lines(reqs)[2], "GET " + ProxyPath("cryo-b", "/v1/checkpoints/ck-1"));
}

TEST_F(RestoreTest, DryRunPrintsThePodAndCreatesNothing) {
  ServeTrainPod();
  Outcome r = Plugin({"restore", "ck-1", "--dry-run", "--annotation-prefix", "example.com/cryo",
                      "--name", "copy", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  json pod = json::parse(r.out);
  EXPECT_EQ(pod["metadata"]["annotations"]["example.com/cryo/resume"], "ck-1");
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  EXPECT_FALSE(pod.contains("status"));
  for (const char* k : {"uid", "resourceVersion", "creationTimestamp", "ownerReferences",
                        "managedFields", "generateName"}) {
    EXPECT_FALSE(pod["metadata"].contains(k)) << k;
  }
  // Without -o: the same pod as YAML, which kubectl reads back (here through --from-file, which
  // converts it with kubectl annotate --local) into the same pod.
  r = Plugin({"restore", "ck-1", "--dry-run", "--annotation-prefix", "example.com/cryo", "--name",
              "copy"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, ToYaml(pod));
  std::ofstream(dir_ + "/dry-run.yaml") << r.out;
  r = Plugin({"restore", "ck-1", "--dry-run", "--annotation-prefix", "example.com/cryo", "--name",
              "copy", "-o", "json", "--from-file", dir_ + "/dry-run.yaml"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json::parse(r.out), pod);
  EXPECT_EQ(Plugin({"restore", "ck-1", "--dry-run", "-o", "name", "--name", "copy"}).out,
            "pod/copy\n");
  r = Plugin({"restore", "ck-1", "--dry-run=client", "-o", "yaml", "--name", "copy"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, StartsWith("apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n"));
  for (const auto& q : server_.ApiRequests()) EXPECT_NE(q.method, "POST");
}

TEST_F(RestoreTest, OutputFormats) {
  ServeTrainPod();
  Outcome r = Plugin({"restore", "ck-1", "--name", "r1", "-o", "name"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "pod/r1\n");
  r = Plugin({"restore", "ck-1", "--name", "r2", "-o", "yaml"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("\n  uid: new-uid\n"));  // what the server stored
  EXPECT_THAT(r.out, HasSubstr("\nstatus:\n  phase: Pending\n"));
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
  const json want = json::parse(R"({"spec": {"template": {"metadata": {"annotations":
                {"cryo.dev/resume": "ck-1", "cryo.dev/containers": "worker"}}}}})");
  EXPECT_EQ(patches[0].Json(), want);

  // Output formats: the patched object, or kubectl's name for it.
  r = Plugin({"restore", "ck-1", "--workload", "job/train", "-o", "name"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "job.batch/train\n");
  r = Plugin({"restore", "ck-1", "--workload", "job/train", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json::parse(r.out), job);
  r = Plugin({"restore", "ck-1", "--workload", "job/train", "-o", "yaml"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, ToYaml(job));
  // --dry-run: the patch, sent nowhere.
  const size_t sent = server_.requests().size();
  r = Plugin({"restore", "ck-1", "--workload", "sts/db", "--dry-run"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, StartsWith("would patch statefulset/db in namespace ml"));
  r = Plugin({"restore", "ck-1", "--workload", "sts/db", "--dry-run", "-o", "json"});
  EXPECT_EQ(json::parse(r.out), want);
  r = Plugin({"restore", "ck-1", "--workload", "sts/db", "--dry-run", "-o", "name"});
  EXPECT_EQ(r.out, "statefulset.apps/db\n");
  for (size_t i = sent; i < server_.requests().size(); ++i) {
    EXPECT_NE(server_.requests()[i].method, "PATCH");
  }
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
}  // namespace cryo::kubectl::testing
