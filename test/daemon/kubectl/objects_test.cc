// The plugin's pure parts: container choice, cryo pods, merging, the resume pod, the patch,
// kubectl's error texts and the human formats.

#include "daemon/kubectl/objects.h"

#include "daemon/kubectl/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "daemon/kubectl/kubectl.h"

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
  EXPECT_EQ(pods[0].port, kDefaultCryodPort);
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

TEST(FormatTest, UrlsAndNumbers) {
  EXPECT_EQ(UrlEncode("app.kubernetes.io/name=cryo"), "app.kubernetes.io%2Fname%3Dcryo");
  EXPECT_EQ(U64(json("123")), 123u);
  EXPECT_EQ(U64(json(7)), 7u);
  EXPECT_EQ(U64(json("x")), 0u);
}

}  // namespace
}  // namespace cryo::kubectl
