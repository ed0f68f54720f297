// kubectl-cryo's names, kubectl's flags passed through, cryod as a host service, and what the
// plugin says when it finds no cryod: the real binary, the real kubectl, a fake API server.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/kubectl/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/subprocess.h"
#include "test/clients/kubectl/plugin_fixture.h"

namespace cryo::kubectl::testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// ---- the two names

class NamesTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    ServeTrainPod();
    ServeCryoPods();
    server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"), json::array());
  }

  // A kubectl that has a built-in "checkpoint" (as KEP-5091 proposes): its `help checkpoint`
  // answers with that command's help; everything else is the real kubectl.
  std::string KubectlWithBuiltinCheckpoint() {
    return WriteScript("kubectl-with-checkpoint",
                       absl::StrCat("case \" $* \" in *\" help checkpoint \"*)\n"
                                    "  printf 'Checkpoint a container.\\n\\nUsage:\\n"
                                    "  kubectl checkpoint POD [options]\\n'; exit 0;;\n"
                                    "esac\nexec '",
                                    FindExecutable("kubectl"), "' \"$@\"\n"));
  }
};

TEST_F(NamesTest, KubectlFindsBothNames) {
  Outcome r = ThroughKubectl({"plugin", "list"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr(std::string(KUBECTL_PLUGIN_DIR) + "/kubectl-cryo\n"));
  EXPECT_THAT(r.out, HasSubstr(std::string(KUBECTL_PLUGIN_DIR) + "/kubectl-checkpoint\n"));
  // kubectl warns here about a plugin that a built-in command shadows.
  EXPECT_THAT(r.err, Not(HasSubstr("overwrites existing command")));
  EXPECT_THAT(r.err, Not(HasSubstr("warning")));
}

TEST_F(NamesTest, CheckpointUnderBothNamesThroughKubectl) {
  const std::string list = ProxyPath("cryo-a", "/v1/checkpoints");
  const json ck1 = CheckpointOf("ck-1", "ml", "train-0", "worker");
  const json ck2 = CheckpointOf("ck-2", "ml", "train-0", "worker");
  ServeCheckpointCall(list, kTrainCheckpoint, json::array({kTrainArchive}), json::array(),
                      json::array({ck1}));
  Outcome r = ThroughKubectl({"cryo", "checkpoint", "train-0", "-n", "ml"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("cryo checkpoint: ck-1 (kubectl cryo inspect ck-1)"));
  // The second name takes the pod right away, as "kubectl checkpoint POD" always did.
  ServeCheckpointCall(list, kTrainCheckpoint, json::array({kTrainArchive}), json::array({ck1}),
                      json::array({ck2, ck1}));
  r = ThroughKubectl({"checkpoint", "pod/train-0", "-n", "ml", "-o", "name"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "checkpoint/ck-2\n");
  EXPECT_EQ(r.err, "");
  // ... and the commands too, with the same results.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"list", "-A"}, {"list", "-n", "ml", "-o", "json"}, {"version", "-o", "json"}}) {
    std::vector<std::string> cryo = {"cryo"}, checkpoint = {"checkpoint"};
    cryo.insert(cryo.end(), args.begin(), args.end());
    checkpoint.insert(checkpoint.end(), args.begin(), args.end());
    Outcome a = ThroughKubectl(cryo);
    Outcome b = ThroughKubectl(checkpoint);
    ASSERT_EQ(a.code, 0) << a;
    EXPECT_EQ(a.code, b.code) << b;
    EXPECT_EQ(a.out, b.out) << absl::StrJoin(args, " ");
  }
  EXPECT_THAT(ThroughKubectl({"cryo", "list", "-A", "-o", "name"}).out,
              HasSubstr("checkpoint/ck-2\n"));
  // Under its main name the pod needs the command: "kubectl cryo train-0" is a usage error.
  r = ThroughKubectl({"cryo", "train-0"});
  EXPECT_EQ(r.code, kExitUsage) << r;
  EXPECT_THAT(r.err, HasSubstr("kubectl cryo checkpoint POD"));
}

TEST_F(NamesTest, SecondNameWarnsOnceKubectlHasACheckpointOfItsOwn) {
  server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints"), json::array());
  const std::string builtin = KubectlWithBuiltinCheckpoint();
  Outcome r = Legacy({"list", "-A"}, {"KUBECTL=" + builtin});
  EXPECT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.err, HasSubstr("warning: this kubectl has a built-in \"checkpoint\" command, which "
                               "\"kubectl checkpoint\" runs instead of this plugin: use \"kubectl "
                               "cryo checkpoint POD\""));
  // Not under the main name, and not while kubectl has no such command.
  EXPECT_THAT(Plugin({"list", "-A"}, {"KUBECTL=" + builtin}).err, Not(HasSubstr("warning")));
  EXPECT_THAT(Legacy({"list", "-A"}).err, Not(HasSubstr("warning")));
  // version says which it is.
  r = Plugin({"version"}, {"KUBECTL=" + builtin});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("kubectl checkpoint: kubectl's built-in command, not this plugin: "
                               "use kubectl cryo\n"));
  r = Plugin({"version", "-o", "json"}, {"KUBECTL=" + builtin});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json::parse(r.out)["kubectl"]["builtinCheckpoint"], true);
}

TEST_F(NamesTest, Version) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"version"}, {"--version"}}) {
    Outcome r = Plugin(args);
    ASSERT_EQ(r.code, 0) << r;
    std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 3u) << r;
    EXPECT_EQ(lines[0], absl::StrCat("kubectl cryo ", CRYO_VERSION));
    EXPECT_THAT(lines[1], AllOf(StartsWith("kubectl v1."), HasSubstr("(kubectl)")));
    EXPECT_THAT(lines[2], StartsWith("kubectl checkpoint: not built into this kubectl"));
    EXPECT_EQ(Legacy(args).out, r.out);
  }
  Outcome r = Plugin({"version", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  json j = json::parse(r.out);
  EXPECT_EQ(j["kubectlCryo"]["version"], CRYO_VERSION);
  EXPECT_THAT(j["kubectl"]["clientVersion"].get<std::string>(), StartsWith("v1."));
  EXPECT_EQ(j["kubectl"]["builtinCheckpoint"], false);
  r = Plugin({"version", "-o", "yaml"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("kubectl:\n  builtinCheckpoint: false\n  clientVersion: "));
  // (This machine's kubectl asks the server for /version on every run, even with --client.)
  EXPECT_THAT(server_.ApiRequests(), IsEmpty()) << "version needs no cluster";
}

// ---- kubectl's flags

class PassthroughTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    server_.ServeDiscovery();
    ServeTrainPod();
    ServeCryoPods();
    const json ck = CheckpointOf("ck-1", "ml", "train-0", "worker");
    ServeCheckpointCall(ProxyPath("cryo-a", "/v1/checkpoints"), kTrainCheckpoint,
                        json::array({kTrainArchive}), json::array(), json::array({ck}));
    server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints"), json::array());
    server_.OnJson("GET", ProxyPath("cryo-a", "/v1/checkpoints/ck-1"), ck);
    server_.OnJson("GET", ProxyPath("cryo-b", "/v1/checkpoints/ck-1"), ck);
    server_.On("POST", "/api/v1/namespaces/ml/pods",
               [](const Request& r) { return JsonResponse(r.Json(), 201); });
    json job = {{"apiVersion", "batch/v1"},
                {"kind", "Job"},
                {"metadata", {{"name", "train"}, {"namespace", "ml"}}}};
    server_.OnJson("GET", "/apis/batch/v1/namespaces/ml/jobs/train", job);
    server_.OnJson("PATCH", "/apis/batch/v1/namespaces/ml/jobs/train", job);
    std::ofstream(dir_ + "/pod.json") << Pod("ml", "train-0", "node-a", {{"worker", "running"}});
  }

  // Every command, each sending at least one request (restore: a create, a patch, a file).
  std::vector<std::vector<std::string>> EveryCommand() {
    return {{"checkpoint", "train-0", "-n", "ml"},
            {"list"},
            {"list", "-A", "--node", "node-a"},
            {"inspect", "ck-1"},
            {"restore", "ck-1", "--name", "r"},
            {"restore", "ck-1", "--name", "r", "--from-file", dir_ + "/pod.json"},
            {"restore", "ck-1", "--workload", "job/train"}};
  }

  // A kubectl that logs its arguments, one call per line, to dir_/calls, then runs the real one.
  std::string LoggingKubectl() {
    return WriteScript("kubectl-logging",
                       absl::StrCat("printf '%s\\n' \"$*\" >> '", dir_, "/calls'\nexec '",
                                    FindExecutable("kubectl"), "' \"$@\"\n"));
  }
  std::vector<std::string> Calls() {
    std::stringstream s;
    s << std::ifstream(dir_ + "/calls").rdbuf();
    (void)!::unlink((dir_ + "/calls").c_str());
    return absl::StrSplit(s.str(), '\n', absl::SkipEmpty());
  }
};

TEST_F(PassthroughTest, IdentityFlagsReachTheApiServer) {
  for (std::vector<std::string> args : EveryCommand()) {
    const size_t before = server_.requests().size();
    args.insert(args.end(), {"--as", "alice", "--as-group", "ml-team", "--as-group=ops",
                             "--as-uid=u-1", "--token", "other-token"});
    Outcome r = Plugin(args);
    ASSERT_EQ(r.code, 0) << absl::StrJoin(args, " ") << "\n" << r;
    const auto reqs = server_.requests();
    ASSERT_GT(reqs.size(), before) << absl::StrJoin(args, " ");
    for (size_t i = before; i < reqs.size(); ++i) {
      auto h = reqs[i].headers;
      const std::string what =
          absl::StrCat(absl::StrJoin(args, " "), ": ", reqs[i].method, " ", reqs[i].path);
      EXPECT_EQ(h["impersonate-user"], "alice") << what;
      EXPECT_EQ(h["impersonate-group"], "ml-team, ops") << what;
      EXPECT_EQ(h["impersonate-uid"], "u-1") << what;
      EXPECT_EQ(h["authorization"], "Bearer other-token") << what;
    }
  }
}

TEST_F(PassthroughTest, ConnectionFlagsChooseServerAndUser) {
  auto auth_of_last = [this] { return server_.requests().back().headers["authorization"]; };
  Outcome r = Plugin({"list", "-A"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(auth_of_last(), "Bearer test-token");
  r = Plugin({"list", "-A", "--user", "other-user"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(auth_of_last(), "Bearer other-token");
  r = Plugin({"list", "-A", "--context=other"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(auth_of_last(), "Bearer other-token");
  // TLS: the server's certificate is checked unless told otherwise.
  r = Plugin({"list", "-A", "--cluster", "strict"});
  EXPECT_EQ(r.code, kExitApiUnreachable) << r;
  EXPECT_THAT(r.err, HasSubstr("certificate"));
  r = Plugin({"list", "-A", "--cluster", "strict", "--insecure-skip-tls-verify"});
  EXPECT_EQ(r.code, 0) << r;
  std::ofstream(dir_ + "/ca.pem") << server_.certificate_pem();
  r = Plugin({"list", "-A", "--cluster", "strict", "--certificate-authority", dir_ + "/ca.pem"});
  EXPECT_EQ(r.code, 0) << r;
  r = Plugin({"list", "-A", "--cluster=strict", "--tls-server-name=localhost",
              "--certificate-authority=" + dir_ + "/ca.pem"});
  EXPECT_EQ(r.code, 0) << r;
  r = Plugin({"list", "-A", "--cluster=strict", "--tls-server-name=elsewhere.example",
              "--certificate-authority=" + dir_ + "/ca.pem"});
  EXPECT_EQ(r.code, kExitApiUnreachable) << r;
  // A cluster where nothing listens: unreachable (3), not "no cryo" (9).
  r = Plugin({"list", "--cluster", "nowhere"});
  EXPECT_EQ(r.code, kExitApiUnreachable) << r;
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1:1"));
  // The kubeconfig's server is nowhere; --server / -s point at the fake one.
  WriteKubeconfig(kubeconfig_, "http://127.0.0.1:1");
  EXPECT_EQ(Plugin({"list", "-A"}).code, kExitApiUnreachable);
  for (const std::vector<std::string>& server :
       std::vector<std::vector<std::string>>{{"--server", server_.url()},
                                             {"--server=" + server_.url()},
                                             {"-s", server_.url()},
                                             {"-s=" + server_.url()}}) {
    std::vector<std::string> args = {"checkpoint", "train-0", "-n", "ml", "-o", "json"};
    args.insert(args.end(), server.begin(), server.end());
    r = Plugin(args);
    EXPECT_NE(r.code, kExitApiUnreachable) << absl::StrJoin(args, " ") << "\n" << r;
    EXPECT_EQ(server_.requests().back().path, ProxyPath("cryo-a", "/v1/checkpoints"));
  }
}

TEST_F(PassthroughTest, EveryKubectlCallGetsThemAll) {
  const std::string kubectl = LoggingKubectl();
  const std::vector<std::string> flags = {"--kubeconfig=" + kubeconfig_,
                                          "--context=fake",
                                          "--cluster=fake",
                                          "--user=tester",
                                          "--server=" + server_.url(),
                                          "--token=test-token",
                                          "--as=alice",
                                          "--as-group=g1",
                                          "--as-uid=u-1",
                                          "--request-timeout=7s",
                                          "--insecure-skip-tls-verify=true",
                                          "--cache-dir=" + dir_ + "/cache2",
                                          "--warnings-as-errors=false",
                                          "--v=1",
                                          "--disable-compression=true"};
  // As given: --name VALUE, --name=VALUE, -s, -v, bare booleans.
  const std::vector<std::string> given = {"--kubeconfig",
                                          kubeconfig_,
                                          "--context",
                                          "fake",
                                          "--cluster=fake",
                                          "--user",
                                          "tester",
                                          "-s",
                                          server_.url(),
                                          "--token",
                                          "test-token",
                                          "--as",
                                          "alice",
                                          "--as-group",
                                          "g1",
                                          "--as-uid",
                                          "u-1",
                                          "--request-timeout",
                                          "7s",
                                          "--insecure-skip-tls-verify",
                                          "--cache-dir",
                                          dir_ + "/cache2",
                                          "--warnings-as-errors=false",
                                          "-v",
                                          "1",
                                          "--disable-compression"};
  auto all_commands = EveryCommand();
  all_commands.push_back({"version"});
  for (std::vector<std::string> args : all_commands) {
    args.insert(args.end(), given.begin(), given.end());
    Outcome r = Plugin(args, {"KUBECTL=" + kubectl, "KUBECONFIG=/nonexistent"});
    ASSERT_EQ(r.code, 0) << absl::StrJoin(args, " ") << "\n" << r;
    std::vector<std::string> calls = Calls();
    ASSERT_THAT(calls, Not(IsEmpty())) << absl::StrJoin(args, " ");
    for (const std::string& call : calls) {
      // kubectl GLOBAL_FLAGS COMMAND...: in the order given, before the command.
      EXPECT_THAT(call, StartsWith(absl::StrJoin(flags, " ") + " "))
          << absl::StrJoin(args, " ") << "\n  ran: kubectl " << call;
    }
  }
}

TEST_F(PassthroughTest, RequestTimeoutReachesTheApiServer) {
  Outcome r = Plugin({"list", "-A", "--request-timeout=7s"});
  ASSERT_EQ(r.code, 0) << r;
  for (const auto& q : server_.ApiRequests()) EXPECT_EQ(q.Param("timeout"), "7s") << q.path;
}

TEST_F(PassthroughTest, VerbosityShowsKubectlsLog) {
  for (const std::vector<std::string>& v :
       std::vector<std::vector<std::string>>{{"-v=6"}, {"-v", "6"}, {"--v=6"}, {"-v6"}}) {
    std::vector<std::string> args = {"inspect", "ck-1", "-o", "name"};
    args.insert(args.end(), v.begin(), v.end());
    Outcome r = Plugin(args);
    ASSERT_EQ(r.code, 0) << r;
    EXPECT_EQ(r.out, "checkpoint/ck-1\n");
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("GET ", server_.url(), kCryoPods)))
        << absl::StrJoin(v, " ");
    // (cryod's API is asked with a query: the token goes in its body.)
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("POST ", server_.url(),
                                              ProxyPath("cryo-a", "/v1/query 200"))));
  }
  // kubectl's error is still the message, the log beside it.
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/nope",
                 StatusJson(404, "NotFound", "pods \"nope\" not found"), 404);
  Outcome r = Plugin({"checkpoint", "nope", "-n", "ml", "-v", "6"});
  EXPECT_EQ(r.code, kExitPodNotFound) << r;
  EXPECT_THAT(r.err, HasSubstr("/api/v1/namespaces/ml/pods/nope 404"));
  EXPECT_THAT(r.err, HasSubstr("error: pod ml/nope not found\n"));
}

// ---- cryod as a host service

class HostServiceTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    server_.OnJson("GET", "/api/v1/nodes",
                   NodeList({{"node-a", "True"}, {"node-b", "True"}, {"node-c", "False"}}));
    json a = {Checkpoint("ck-a", "2026-11-02T10:00:00Z", "node-a", 4096)};
    json b = {Checkpoint("ck-b", "2026-11-02T11:00:00Z", "node-b", 4096)};
    server_.OnJson("GET", NodeProxyPath("node-a", "/v1/checkpoints"), a);
    server_.OnJson("GET", NodeProxyPath("node-b", "/v1/checkpoints"), b);
    server_.OnJson("GET", NodeProxyPath("node-b", "/v1/checkpoints/ck-b"), b[0]);
  }
};

TEST_F(HostServiceTest, ListAsksEveryReadyNode) {
  Outcome r = Plugin({"list", "-n", "ml", "-o", "name", "--cryo-endpoint", "nodes:9464"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "checkpoint/ck-b\ncheckpoint/ck-a\n");
  EXPECT_THAT(Lines(server_.ApiRequests()),
              ElementsAre("GET /api/v1/nodes", "GET " + NodeProxyPath("node-a", "/v1/checkpoints"),
                          "GET " + NodeProxyPath("node-b", "/v1/checkpoints")));
  EXPECT_EQ(server_.ApiRequests()[0].query, "");
}

TEST_F(HostServiceTest, FromTheEnvironmentWithANodeSelector) {
  Outcome r = Plugin({"list", "-n", "ml", "-o", "name"},
                     {"CRYO_ENDPOINT=nodes:9464", "CRYO_NODE_SELECTOR=cryo.dev/node=true"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(server_.ApiRequests()[0].path, "/api/v1/nodes");
  EXPECT_EQ(server_.ApiRequests()[0].Param("labelSelector"), "cryo.dev/node=true");
  // "nodes" alone is port 9464; the flags win over the environment.
  const size_t before = server_.ApiRequests().size();
  r = Plugin({"list", "-n", "ml", "--cryo-endpoint=nodes", "--cryo-node-selector", "gpu=yes"},
             {"CRYO_ENDPOINT=nodes:1", "CRYO_NODE_SELECTOR=x=y"});
  ASSERT_EQ(r.code, 0) << r;
  const auto reqs = server_.ApiRequests();
  ASSERT_GT(reqs.size(), before + 1);
  EXPECT_EQ(reqs[before].Param("labelSelector"), "gpu=yes");
  EXPECT_EQ(reqs[before + 1].path, NodeProxyPath("node-a", "/v1/checkpoints"));
  // --cryo-endpoint pods over CRYO_ENDPOINT: the cryo pods are looked for.
  r = Plugin({"list", "--cryo-endpoint", "pods"}, {"CRYO_ENDPOINT=nodes:9464"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_EQ(server_.ApiRequests().back().path, kCryoPods);
}

TEST_F(HostServiceTest, CheckpointThroughTheNodeProxy) {
  ServeTrainPod();
  const json ck = CheckpointOf("ck-new", "ml", "train-0", "worker");
  ServeCheckpointCall(NodeProxyPath("node-a", "/v1/checkpoints"), kTrainCheckpoint,
                      json::array({kTrainArchive}), json::array(), json::array({ck}));
  Outcome r = Plugin({"checkpoint", "train-0", "-n", "ml", "--cryo-endpoint", "nodes:9464"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("cryo checkpoint: ck-new"));
  // Only the pod's node is asked: no node list.
  EXPECT_THAT(Lines(server_.ApiRequests()),
              ElementsAre("GET /api/v1/namespaces/ml/pods/train-0",
                          "GET " + NodeProxyPath("node-a", "/v1/checkpoints"),
                          std::string("POST ") + kTrainCheckpoint,
                          "GET " + NodeProxyPath("node-a", "/v1/checkpoints")));
}

TEST_F(HostServiceTest, InspectOnOneNodeAndAnotherPort) {
  Outcome r =
      Plugin({"inspect", "ck-b", "--node", "node-b", "-o", "name"}, {"CRYO_ENDPOINT=nodes"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "checkpoint/ck-b\n");
  EXPECT_THAT(Lines(server_.ApiRequests()),
              ElementsAre("GET " + NodeProxyPath("node-b", "/v1/checkpoints/ck-b")));
  server_.OnJson("GET", "/api/v1/nodes/node-b:8080/proxy/v1/checkpoints/ck-b",
                 Checkpoint("ck-b", "2026-11-02T11:00:00Z", "node-b", 4096));
  r = Plugin({"inspect", "ck-b", "--node", "node-b", "--cryo-endpoint", "nodes:8080"});
  ASSERT_EQ(r.code, 0) << r;
}

TEST_F(HostServiceTest, ANodeWithoutCryod) {
  // The API server cannot connect to NODE:PORT.
  server_.OnJson("GET", NodeProxyPath("node-b", "/v1/checkpoints"),
                 StatusJson(503, "ServiceUnavailable",
                            "error trying to reach service: dial tcp 10.0.0.2:9464: connect: "
                            "connection refused"),
                 503);
  Outcome r = Plugin({"list", "-A", "-o", "name", "--cryo-endpoint", "nodes:9464"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out, "checkpoint/ck-a\n");
  EXPECT_THAT(r.err, HasSubstr("warning: cryod on node node-b (port 9464): "));
  EXPECT_THAT(r.err, HasSubstr("connection refused (does cryod run on node node-b as a host "
                               "service, with its HTTP API on port 9464 of the node's address?)"));
  // The pod's node has none: nothing is checkpointed.
  server_.OnJson("GET", "/api/v1/namespaces/ml/pods/train-0",
                 Pod("ml", "train-0", "node-b", {{"worker", "running"}}));
  r = Plugin({"checkpoint", "train-0", "-n", "ml", "--cryo-endpoint", "nodes:9464"});
  EXPECT_EQ(r.code, kExitCryodFailed) << r;
  EXPECT_THAT(r.err, HasSubstr("cryod on node node-b (port 9464) does not answer (does cryod run"));
  for (const auto& q : server_.ApiRequests()) EXPECT_NE(q.method, "POST");
}

TEST_F(HostServiceTest, NoSuchNode) {
  server_.OnJson("GET", NodeProxyPath("node-x", "/v1/checkpoints/ck-b"),
                 StatusJson(404, "NotFound", "nodes \"node-x\" not found"), 404);
  Outcome r = Plugin({"inspect", "ck-b", "--node", "node-x", "--cryo-endpoint", "nodes:9464"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("cryod not found: there is no node node-x"));
  // cryod's own 404: the checkpoint is not in that node's store.
  server_.OnJson("GET", NodeProxyPath("node-a", "/v1/checkpoints/ck-b"),
                 {{"error", {{"code", "NOT_FOUND"}, {"message", "no checkpoint ck-b"}}}}, 404);
  r = Plugin({"inspect", "ck-b", "--node", "node-a", "--cryo-endpoint", "nodes:9464"});
  EXPECT_EQ(r.code, kExitCheckpointNotFound) << r;
}

TEST_F(HostServiceTest, NoReadyNode) {
  server_.OnJson("GET", "/api/v1/nodes", NodeList({{"node-c", "False"}}));
  Outcome r = Plugin({"list", "--cryo-endpoint", "nodes:9464", "--cryo-node-selector", "a=b"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("cryod not found: no Ready node labelled a=b to ask "
                               "(--cryo-endpoint nodes:9464)"));
}

// ---- finding cryod

TEST_F(PluginTest, NoCryoPodSaysWhatWasLookedForAndHowToReachAHostService) {
  server_.OnJson("GET", kCryoPods, CryoPodList({}));
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"list"}, {"inspect", "ck-1"}, {"restore", "ck-1"}}) {
    Outcome r = Plugin(args);
    EXPECT_EQ(r.code, kExitNoCryo) << r;
    EXPECT_THAT(r.err, HasSubstr("error: cryod not found: no pod labelled "
                                 "app.kubernetes.io/name=cryo in namespace cryo-system. If the "
                                 "cryo chart is installed in another namespace, add "
                                 "--cryo-namespace NS."));
    EXPECT_THAT(r.err, HasSubstr("If cryod runs as a host service on the nodes instead, point "
                                 "kubectl cryo at its HTTP port, which it reaches through the API "
                                 "server's node proxy: --cryo-endpoint nodes:9464 or "
                                 "CRYO_ENDPOINT=nodes:9464"));
    EXPECT_THAT(r.err, HasSubstr("docs/kubectl.md"));
  }
  Outcome r = Plugin({"list", "--cryo-namespace", "cryo"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("in namespace cryo."));
  EXPECT_EQ(server_.requests().back().path, "/api/v1/namespaces/cryo/pods");
}

TEST_F(PluginTest, CryoPodsWithoutAnHttpPortAreNotCryod) {
  server_.OnJson("GET", kCryoPods, CryoPodList({{"cryo-a", "node-a", "Running"}}, false));
  Outcome r = Plugin({"list"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("cryod not found: pod cryo-a in namespace cryo-system (labelled "
                               "app.kubernetes.io/name=cryo) declares no container port named "
                               "\"http\""));
  EXPECT_THAT(r.err, HasSubstr("--cryo-endpoint nodes:9464"));
  EXPECT_THAT(Lines(server_.ApiRequests()), ElementsAre(std::string("GET ") + kCryoPods));
}

TEST_F(PluginTest, CryoPodsNotRunning) {
  server_.OnJson("GET", kCryoPods, CryoPodList({{"cryo-a", "node-a", "Pending"}}));
  Outcome r = Plugin({"list"});
  EXPECT_EQ(r.code, kExitNoCryo) << r;
  EXPECT_THAT(r.err, HasSubstr("cryo is not running: pod cryo-a in namespace cryo-system is "
                               "Pending"));
}

TEST_F(PluginTest, AnUnreachableClusterIsNotAMissingCryod) {
  WriteKubeconfig(kubeconfig_, "http://127.0.0.1:1");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"list"},
           {"list", "--cryo-endpoint", "nodes:9464"},
           {"inspect", "ck-1"},
           {"inspect", "ck-1", "--cryo-endpoint", "nodes:9464", "--node", "n"},
           {"restore", "ck-1"},
           {"checkpoint", "train-0"}}) {
    Outcome r = Plugin(args);
    EXPECT_EQ(r.code, kExitApiUnreachable) << absl::StrJoin(args, " ") << "\n" << r;
    EXPECT_THAT(r.err, HasSubstr("cannot reach the Kubernetes API server"));
  }
}

}  // namespace
}  // namespace cryo::kubectl::testing
