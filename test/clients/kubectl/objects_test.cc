// The plugin's pure parts: container choice, cryo pods and nodes, merging, the resume pod, the
// patch, kubectl's error texts, the output formats (YAML included).

#include "clients/kubectl/objects.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "clients/kubectl/errors.h"
#include "clients/kubectl/kubectl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/subprocess.h"

namespace cryo::kubectl {
namespace {

using ::testing::HasSubstr;

json TwoContainerPod() {
  return json::parse(R"({
    "metadata": {"name": "duo", "namespace": "ml"},
    "spec": {"containers": [{"name": "worker"}, {"name": "sidecar"}]},
    "status": {"containerStatuses": [
      {"name": "worker", "state": {"running": {}}},
      {"name": "sidecar", "state": {"terminated": {"reason": "Error", "exitCode": 3}}}]}})");
}

TEST(PickContainerTest, ExplicitOnlyOrDefaultAnnotation) {
  json pod = TwoContainerPod();
  EXPECT_EQ(*PickContainer(pod, "sidecar"), "sidecar");
  auto none = PickContainer(pod, "");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("2 containers: choose one with -c"));
  pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] = "worker";
  EXPECT_EQ(*PickContainer(pod, ""), "worker");
  pod["spec"]["containers"].erase(1);
  pod["metadata"].erase("annotations");
  EXPECT_EQ(*PickContainer(pod, ""), "worker");
}

TEST(NotRunningReasonTest, States) {
  json pod = TwoContainerPod();
  EXPECT_EQ(NotRunningReason(pod, "worker"), "");
  EXPECT_EQ(NotRunningReason(pod, "sidecar"), "terminated: Error, exit code 3");
  EXPECT_EQ(NotRunningReason(json::object(), "x"), "no status yet");
}

TEST(CryoPodsTest, PortNamedHttpOfTheCryodContainer) {
  json list = json::parse(R"({"items": [
    {"metadata": {"name": "cryo-b"}, "spec": {"nodeName": "b", "containers": [
       {"name": "proxy", "ports": [{"name": "http", "containerPort": 8080}]},
       {"name": "cryod", "ports": [{"name": "grpc", "containerPort": 1}, {"name": "http", "containerPort": 9999}]}]},
     "status": {"phase": "Running"}},
    {"metadata": {"name": "cryo-a"}, "spec": {"nodeName": "a", "containers": [{"name": "x"}]},
     "status": {"phase": "Pending"}},
    {"metadata": {"name": "cryo-c"}, "spec": {"nodeName": "c", "containers": [
       {"name": "other", "ports": [{"name": "http", "containerPort": 7000}]}]},
     "status": {"phase": "Running"}}]})");
  auto pods = CryoPodsFromList(list);
  ASSERT_EQ(pods.size(), 3u);
  EXPECT_EQ(pods[0].name, "cryo-a");
  EXPECT_EQ(pods[0].port, 0) << "no port named http: not reachable through the pod proxy";
  EXPECT_FALSE(pods[0].running);
  EXPECT_EQ(pods[1].port, 9999);
  EXPECT_TRUE(pods[1].running);
  EXPECT_EQ(pods[2].port, 7000);
}

TEST(MergeCheckpointsTest, ByIdNewestFirst) {
  json a = json::parse(R"([{"checkpoint_id": "x", "created_at": "2026-11-01T00:00:00Z"},
                           {"checkpoint_id": "y", "created_at": "2026-11-03T00:00:00.5Z"}])");
  json b = json::parse(R"([{"checkpoint_id": "y", "created_at": "2026-11-03T00:00:00.5Z"},
                           {"checkpoint_id": "z", "created_at": "2026-11-02T00:00:00+02:00"},
                           {"no_id": true}])");
  json m = MergeCheckpoints({a, b, json::object()});
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["checkpoint_id"], "y");
  EXPECT_EQ(m[1]["checkpoint_id"], "z");
  EXPECT_EQ(m[2]["checkpoint_id"], "x");
}

TEST(CheckpointsOfTest, MatchesNamespacePodContainerAndUid) {
  json list = json::parse(R"([
    {"checkpoint_id": "a", "labels": {"io.kubernetes.pod.namespace": "ml",
      "io.kubernetes.pod.name": "train-0", "io.kubernetes.container.name": "worker",
      "io.kubernetes.pod.uid": "u1"}},
    {"checkpoint_id": "no-uid", "labels": {"io.kubernetes.pod.namespace": "ml",
      "io.kubernetes.pod.name": "train-0", "io.kubernetes.container.name": "worker"}},
    {"checkpoint_id": "earlier-pod", "labels": {"io.kubernetes.pod.namespace": "ml",
      "io.kubernetes.pod.name": "train-0", "io.kubernetes.container.name": "worker",
      "io.kubernetes.pod.uid": "u0"}},
    {"checkpoint_id": "sidecar", "labels": {"io.kubernetes.pod.namespace": "ml",
      "io.kubernetes.pod.name": "train-0", "io.kubernetes.container.name": "sidecar"}},
    {"checkpoint_id": "other-ns", "labels": {"io.kubernetes.pod.namespace": "dev",
      "io.kubernetes.pod.name": "train-0", "io.kubernetes.container.name": "worker"}},
    {"checkpoint_id": "process-mode"}, "not an object"])");
  auto ids = [](const std::vector<json>& v) {
    std::vector<std::string> out;
    for (const auto& c : v) out.push_back(c["checkpoint_id"].get<std::string>());
    return out;
  };
  const PodRef ref{"ml", "train-0", "worker"};
  EXPECT_EQ(ids(CheckpointsOf(list, ref, "u1")), (std::vector<std::string>{"a", "no-uid"}));
  EXPECT_EQ(ids(CheckpointsOf(list, ref, "")),
            (std::vector<std::string>{"a", "no-uid", "earlier-pod"}));
  EXPECT_TRUE(CheckpointsOf(json::object(), ref, "u1").empty());
}

TEST(BuildResumePodTest, FromAWorkloadTemplate) {
  json deploy = json::parse(R"({"apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "prod", "uid": "u"},
    "spec": {"template": {
      "metadata": {"labels": {"app": "web", "pod-template-hash": "abc"},
                   "annotations": {"cryo.dev/containers": "old", "keep": "1"}},
      "spec": {"nodeName": "n1", "priorityClassName": "high", "priority": 1000,
               "preemptionPolicy": "Never", "ephemeralContainers": [],
               "containers": [{"name": "app"}, {"name": "log"}]}}}})");
  ResumePodOptions o;
  o.checkpoint_id = "ck";
  o.container = "app";
  o.namespace_name = "other";
  auto pod = BuildResumePod(deploy, o);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_THAT((*pod)["metadata"]["name"].get<std::string>(), ::testing::StartsWith("web-r-"));
  EXPECT_EQ((*pod)["metadata"]["namespace"], "other");
  EXPECT_EQ((*pod)["metadata"]["labels"], json({{"app", "web"}}));
  EXPECT_EQ((*pod)["metadata"]["annotations"],
            json({{"keep", "1"}, {"cryo.dev/resume", "ck"}, {"cryo.dev/containers", "app"}}));
  EXPECT_EQ((*pod)["spec"], json::parse(R"({"priorityClassName": "high",
      "containers": [{"name": "app"}, {"name": "log"}]})"));
}

TEST(BuildResumePodTest, RefusesAMismatchedContainerAndNonPods) {
  json pod = TwoContainerPod();
  ResumePodOptions o;
  o.checkpoint_id = "ck";
  o.container = "gone";
  EXPECT_FALSE(BuildResumePod(pod, o).ok());
  EXPECT_FALSE(BuildResumePod(json::parse(R"({"kind": "ConfigMap"})"), ResumePodOptions{}).ok());
  // A long name still makes a name of at most 63 characters.
  o.container = "";
  pod["metadata"]["name"] = std::string(80, 'a');
  EXPECT_LE((*BuildResumePod(pod, o))["metadata"]["name"].get<std::string>().size(), 63u);
}

TEST(WorkloadTest, KindsAndPatch) {
  EXPECT_EQ(ParseWorkload("Deploy/web")->resource, "deployment");
  EXPECT_EQ(ParseWorkload("statefulsets.apps/db")->resource, "statefulset");
  EXPECT_EQ(ParseWorkload("jobs/train")->name, "train");
  EXPECT_FALSE(ParseWorkload("pod/x").ok());
  EXPECT_FALSE(ParseWorkload("job").ok());
  EXPECT_EQ(
      WorkloadResumePatch("p", "ck", ""),
      json::parse(R"({"spec": {"template": {"metadata": {"annotations": {"p/resume": "ck"}}}}})"));
}

TEST(KubectlErrorTest, Classifies) {
  EXPECT_EQ(ClassifyKubectlError("Error from server (NotFound): pods \"x\" not found\n").kind,
            KubectlError::kNotFound);
  auto e = ClassifyKubectlError(
      "Error from server (InternalError): an error on the server (\"boom\") has prevented the "
      "request from succeeding");
  EXPECT_EQ(e.kind, KubectlError::kServer);
  EXPECT_EQ(e.reason, "InternalError");
  EXPECT_EQ(ClassifyKubectlError("error: You must be logged in to the server (Unauthorized)").kind,
            KubectlError::kUnauthorized);
  EXPECT_EQ(ClassifyKubectlError("Error from server (Forbidden): nodes \"n\" is forbidden").kind,
            KubectlError::kForbidden);
  EXPECT_EQ(ClassifyKubectlError("The connection to the server 127.0.0.1:1 was refused - did you "
                                 "specify the right host or port?")
                .kind,
            KubectlError::kUnreachable);
  EXPECT_EQ(ClassifyKubectlError("Unable to connect to the server: dial tcp: lookup x: no such "
                                 "host")
                .kind,
            KubectlError::kUnreachable);
  EXPECT_EQ(ExitCodeOf(KubectlStatus(ClassifyKubectlError("Unable to connect to the server: x"))),
            kExitApiUnreachable);
  EXPECT_EQ(ExitCodeOf(KubectlStatus(ClassifyKubectlError("Error from server (NotFound): x"))),
            kExitError);
}

TEST(ErrorsTest, ExitCodeTravelsThroughContext) {
  absl::Status s = WithContext(Failure(kExitNoCryo, "no cryo"), "checking node");
  EXPECT_EQ(ExitCodeOf(s), kExitNoCryo);
  EXPECT_EQ(s.message(), "checking node: no cryo");
  EXPECT_EQ(ExitCodeOf(absl::InternalError("x")), kExitError);
  EXPECT_EQ(ExitCodeOf(absl::OkStatus()), kExitOk);
}

TEST(ReadyNodesTest, OnlyReadyOnesSorted) {
  json list = json::parse(R"({"items": [
    {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "c"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
    {"metadata": {"name": "d"}, "status": {}},
    {"metadata": {"name": "a"}, "status": {"conditions": [
      {"type": "DiskPressure", "status": "True"}, {"type": "Ready", "status": "True"}]}}]})");
  EXPECT_EQ(ReadyNodes(list), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(ReadyNodes(json::object()).empty());
}

TEST(CryodEndpointTest, PodsOrNodesWithAPort) {
  EXPECT_EQ(ParseCryodEndpoint("")->kind, CryodEndpoint::kPods);
  EXPECT_EQ(ParseCryodEndpoint("pods")->kind, CryodEndpoint::kPods);
  auto e = ParseCryodEndpoint("nodes");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, CryodEndpoint::kNodes);
  EXPECT_EQ(e->port, kDefaultCryodPort);
  EXPECT_EQ(ParseCryodEndpoint("nodes:8080")->port, 8080);
  EXPECT_EQ(ParseCryodEndpoint("nodes:8080")->ToString(), "nodes:8080");
  for (const char* bad :
       {"node", "nodes:", "nodes:0", "nodes:65536", "nodes:x", "pod", "http://x"}) {
    EXPECT_FALSE(ParseCryodEndpoint(bad).ok()) << bad;
  }
}

TEST(OutputTest, KubectlsListAndNames) {
  EXPECT_EQ(KubeList(json::array({1})),
            json::parse(R"({"apiVersion": "v1", "kind": "List", "items": [1],
                            "metadata": {"resourceVersion": ""}})"));
  EXPECT_EQ(KubeList(json())["items"], json::array());
  EXPECT_EQ(QualifiedKind("job"), "job.batch");
  EXPECT_EQ(QualifiedKind("deployment"), "deployment.apps");
  EXPECT_EQ(QualifiedKind("statefulset"), "statefulset.apps");
  EXPECT_EQ(QualifiedKind("pod"), "pod");
}

TEST(YamlTest, BlockStyleAsKubectlPrintsIt) {
  json j = json::parse(R"({
    "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
    "items": [{"checkpoint_id": "ck-1", "pids": [1, 7], "size_bytes": "2048", "ok": true,
               "nothing": null, "empty": {}, "none": [], "ratio": 0.5,
               "labels": {"cryo.dev/reason": "kubelet"}},
              [1, [2, 3]], "x"]})");
  EXPECT_EQ(ToYaml(j), R"(apiVersion: v1
items:
- checkpoint_id: ck-1
  empty: {}
  labels:
    cryo.dev/reason: kubelet
  none: []
  nothing: null
  ok: true
  pids:
  - 1
  - 7
  ratio: 0.5
  size_bytes: "2048"
- - 1
  - - 2
    - 3
- x
kind: List
metadata:
  resourceVersion: ""
)");
  EXPECT_EQ(ToYaml(json("plain")), "plain\n");
  EXPECT_EQ(ToYaml(json::object()), "{}\n");
  EXPECT_EQ(ToYaml(json(3)), "3\n");
}

TEST(YamlTest, QuotesWhatAReaderWouldTakeForSomethingElse) {
  auto y = [](const std::string& s) { return ToYaml(json{{"k", s}}); };
  // Plain where nothing else can be read.
  for (const char* plain : {"ml.train.worker", "registry.local/train:1", "a b", "http://x/y",
                            "cryo.dev/resume", "_x", "/var/lib/x.tar", "a=b", "a#b"}) {
    EXPECT_EQ(y(plain), absl::StrCat("k: ", plain, "\n")) << plain;
  }
  // Quoted: numbers, dates, booleans and null of YAML 1.1 and 1.2, indicators, comments,
  // mapping and flow syntax, surrounding space, the empty string, non-ASCII, controls.
  for (const char* quoted : {"2048",  "2026-11-02T10:00:00Z",
                             "1e3",   ".5",
                             "-1",    "+1",
                             "0x1f",  "true",
                             "False", "yes",
                             "No",    "on",
                             "OFF",   "y",
                             "N",     "null",
                             "Null",  "~",
                             "",      " a",
                             "a ",    "a: b",
                             "a:",    "a #b",
                             "- a",   "[a]",
                             "{a}",   "*a",
                             "&a",    "!a",
                             "%a",    "@a",
                             "`a",    "'a'",
                             "\"a\"", "|",
                             ">",     "?",
                             "a,b",   "a\nb",
                             "a\tb",  "\xc3\xa9t\xc3\xa9"}) {
    const std::string out = y(quoted);
    EXPECT_THAT(out, ::testing::StartsWith("k: \"")) << quoted;
  }
  EXPECT_EQ(y("a\nb"), "k: \"a\\nb\"\n");
  EXPECT_EQ(y(std::string("a\x7f")), "k: \"a\\x7f\"\n");
  EXPECT_EQ(y("\xc2\x85"), "k: \"\\u0085\"\n");  // NEL, a C1 control
  EXPECT_EQ(ToYaml(json{{"a: b", 1}}), "\"a: b\": 1\n");
}

TEST(YamlTest, ReadsBackAsTheSameJson) {
  // Checked with PyYAML (a YAML 1.1 reader, the strictest about what plain scalars mean) where
  // the machine has it; kubectl's own reader is exercised by the restore --dry-run test.
  if (std::system("python3 -c 'import yaml' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with PyYAML is not installed";
  }
  json j = json::parse(R"({"s": ["2048", "2026-11-02T10:00:00Z", "yes", "null", "", "a: b",
    "x #y", "- z", "\u00e9t\u00e9", "tab\there", "nl\nhere", "\u0085", "\u007f", "~", "0o17",
    "1_000", "12:30", ".inf", "<<", "=", "a", "a b"],
    "n": [1, -2, 0.5, true, false, null, {}, []], "m": {"k.io/x": {"deep": [[1], {"a": 1}]}}})");
  char path[] = "/tmp/kubectl-cryo-yaml-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string yaml = ToYaml(j);
  ASSERT_EQ(::write(fd, yaml.data(), yaml.size()), static_cast<ssize_t>(yaml.size()));
  ::close(fd);
  auto r = cryo::RunCapture({"python3", "-c",
                             "import json, sys, yaml\n"
                             "print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
                             path});
  ::unlink(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit.ShellCode(), 0) << r->output << "\n" << yaml;
  EXPECT_EQ(json::parse(r->output), j) << yaml;
}

TEST(ErrorsTest, ApiNotFoundIsNeverAFailure) {
  EXPECT_TRUE(
      IsApiNotFound(KubectlStatus(ClassifyKubectlError("Error from server (NotFound): x"))));
  EXPECT_FALSE(IsApiNotFound(Failure(kExitKubectlMissing, "no kubectl")));
  EXPECT_FALSE(IsApiNotFound(Failure(kExitPodNotFound, "no pod")));
  EXPECT_FALSE(IsApiNotFound(absl::OkStatus()));
}

TEST(KubectlErrorTest, LogLinesAreNotTheMessage) {
  // kubectl -v=6: its log, then its error.
  auto e = ClassifyKubectlError(
      "I1124 10:00:00.000000   12 round_trippers.go:553] GET http://x/api 404 Not Found in 1 "
      "milliseconds\nError from server (NotFound): pods \"x\" not found\n");
  EXPECT_EQ(e.kind, KubectlError::kNotFound);
  EXPECT_EQ(e.message, "Error from server (NotFound): pods \"x\" not found");
  // Only log lines: they are the message.
  e = ClassifyKubectlError(
      "E1124 10:00:00.000000   12 memcache.go:265] dial tcp 127.0.0.1:1: "
      "connect: connection refused\n");
  EXPECT_EQ(e.kind, KubectlError::kUnreachable);
  EXPECT_THAT(e.message, HasSubstr("connection refused"));
}

TEST(FormatTest, UrlsAndNumbers) {
  EXPECT_EQ(UrlEncode("app.kubernetes.io/name=cryo"), "app.kubernetes.io%2Fname%3Dcryo");
  EXPECT_EQ(U64(json("123")), 123u);
  EXPECT_EQ(U64(json(7)), 7u);
  EXPECT_EQ(U64(json("x")), 0u);
}

}  // namespace
}  // namespace cryo::kubectl
