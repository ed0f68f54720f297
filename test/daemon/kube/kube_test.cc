// cryod's Kubernetes API client over TLS against a stand-in API server, and the uninstall
// hook's work: switch the DaemonSet's pods to restoring kubelet's endpoint, wait for every node,
// name the ones that could not or did not.
#include <stdlib.h>

#include <atomic>
#include <sstream>

#include "daemon/kube/api_client.h"
#include "daemon/kube/job_members.h"
#include "daemon/kube/kubelet_restore.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/clients/kubectl/fake_apiserver.h"
#include "test/daemon/test_util.h"

namespace cryo::kube {
namespace {

using ::cryo::kubectl::testing::FakeApiServer;
using ::cryo::kubectl::testing::JsonResponse;
using ::cryo::kubectl::testing::Request;
using ::cryo::kubectl::testing::Response;
using ::cryo::kubectl::testing::StatusJson;
using ::testing::HasSubstr;

constexpr char kDs[] = "/apis/apps/v1/namespaces/cryo-system/daemonsets/cryo";
constexpr char kPods[] = "/api/v1/namespaces/cryo-system/pods";

class KubeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    ASSERT_TRUE(fs::WriteFileAtomic(dir_.path + "/ca.crt", server_.certificate_pem()).ok());
    ASSERT_TRUE(fs::WriteFileAtomic(dir_.path + "/token", "sa-token\n").ok());
  }
  std::unique_ptr<ApiClient> Client(const std::string& ca_file = "") {
    ApiConfig c{server_.url(), "sa-token", ca_file.empty() ? dir_.path + "/ca.crt" : ca_file};
    auto api = ApiClient::Create(c, absl::Seconds(10));
    EXPECT_TRUE(api.ok()) << api.status();
    return api.ok() ? std::move(*api) : nullptr;
  }
  KubeletRestoreOptions Options() {
    KubeletRestoreOptions o;
    o.namespace_name = "cryo-system";
    o.daemonset = "cryo";
    o.log = &log_;
    o.sleep = [](absl::Duration) {};
    return o;
  }

  FakeApiServer server_{/*tls=*/true};
  TempDir dir_;
  std::ostringstream log_;
};

nlohmann::json Ds(const std::string& mode, int64_t generation, int64_t observed, int desired,
                  int updated, int available) {
  return {{"kind", "DaemonSet"},
          {"metadata", {{"name", "cryo"}, {"generation", generation}}},
          {"spec",
           {{"selector", {{"matchLabels", {{"app.kubernetes.io/name", "cryo"}}}}},
            {"template", {{"metadata", {{"annotations", {{kKubeletEndpointAnnotation, mode}}}}}}}}},
          {"status",
           {{"observedGeneration", observed},
            {"desiredNumberScheduled", desired},
            {"updatedNumberScheduled", updated},
            {"numberAvailable", available}}}};
}

// A pod of the DaemonSet on `node`, its init containers in `init` (name, state) order; `last`,
// the first one's lastState.
nlohmann::json Pod(const std::string& node, const std::string& mode,
                   std::vector<std::pair<std::string, nlohmann::json>> init,
                   const nlohmann::json& last = nullptr) {
  nlohmann::json statuses = nlohmann::json::array();
  for (auto& [name, state] : init) statuses.push_back({{"name", name}, {"state", state}});
  if (!last.is_null()) statuses[0]["lastState"] = last;
  return {{"metadata",
           {{"name", "cryo-" + node + "-" + mode},
            {"annotations", {{kKubeletEndpointAnnotation, mode}}}}},
          {"spec", {{"nodeName", node}}},
          {"status", {{"phase", "Pending"}, {"initContainerStatuses", statuses}}}};
}
const nlohmann::json kExit0 = {{"terminated", {{"exitCode", 0}}}};
// Both init containers ended well; configure-kubelet's termination message `message`.
nlohmann::json Done(const std::string& node, const std::string& message = "") {
  nlohmann::json configured = kExit0;
  if (!message.empty()) configured["terminated"]["message"] = message;
  return Pod(node, "restore", {{"install-shim", kExit0}, {kConfigureKubeletContainer, configured}});
}
nlohmann::json Items(std::vector<nlohmann::json> pods) { return {{"items", pods}}; }

TEST_F(KubeTest, InClusterConfigNeedsThePodsEnvironmentAndItsServiceAccount) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  auto c = InClusterConfig(dir_.path);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  c = InClusterConfig(dir_.path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->base_url, "https://[fd00::1]:443");
  EXPECT_EQ(c->token, "sa-token");
  c = InClusterConfig(dir_.path + "/none");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("automountServiceAccountToken"));
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
}

TEST_F(KubeTest, TheClientSendsItsTokenOverTlsAndReadsTheServersErrors) {
  server_.OnJson("GET", kDs, StatusJson(403, "Forbidden", "daemonsets.apps \"cryo\" is forbidden"),
                 403);
  auto api = Client();
  auto r = api->Get(kDs);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(r.status().message(), HasSubstr("is forbidden"));
  auto reqs = server_.requests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_EQ(reqs.back().headers["authorization"], "Bearer sa-token");

  // Another CA than the server's: refused before anything is sent.
  TempDir other;
  FakeApiServer impostor(/*tls=*/true);
  ASSERT_TRUE(fs::WriteFileAtomic(other.path + "/ca.crt", impostor.certificate_pem()).ok());
  const size_t before = server_.requests().size();
  r = Client(other.path + "/ca.crt")->Get(kDs);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(server_.requests().size(), before);
}

TEST_F(KubeTest, NoDaemonSetMeansNothingToPutBack) {
  auto s = RestoreKubeletEndpoints(*Client(), Options());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(log_.str(), HasSubstr("no DaemonSet cryo-system/cryo"));
  for (const auto& r : server_.requests()) EXPECT_EQ(r.method, "GET");
}

TEST_F(KubeTest, EveryNodeRestartsIntoRestoreAndNodesLeftAloneAreNamed) {
  std::atomic<int> ds_gets{0}, pod_gets{0};
  server_.On("GET", kDs, [&](const Request&) {
    // Before the patch: converted. After it: the controller has seen it.
    return JsonResponse(ds_gets++ == 0 ? Ds("convert", 3, 3, 2, 2, 2)
                                       : Ds("restore", 4, 4, 2, 2, 2));
  });
  // The patch's answer still carries the old template's status (observed 3 of generation 4).
  server_.On("PATCH", kDs,
             [&](const Request&) { return JsonResponse(Ds("restore", 4, 3, 2, 2, 2)); });
  server_.On("GET", kPods, [&](const Request&) {
    switch (pod_gets++) {
      case 0:  // nothing restarted yet
        return JsonResponse(Items({Pod("node-a", "convert", {{"install-shim", kExit0}}),
                                   Pod("node-b", "convert", {{"install-shim", kExit0}})}));
      case 1:  // node-a is back; node-b's new pod still installs the shim
        return JsonResponse(
            Items({Done("node-a"), Pod("node-b", "convert", {{"install-shim", kExit0}}),
                   Pod("node-b", "restore",
                       {{"install-shim", {{"running", nlohmann::json::object()}}}})}));
      default:  // node-b done, but it could not edit kubelet's config
        return JsonResponse(
            Items({Done("node-a"), Done("node-b",
                                        "kubelet not pointed at the shim: "
                                        "/var/lib/kubelet/config.yaml is not writable here")}));
    }
  });
  auto s = RestoreKubeletEndpoints(*Client(), Options());
  ASSERT_TRUE(s.ok()) << s;

  Request patch;
  for (const auto& r : server_.requests()) {
    if (r.method == "PATCH") patch = r;
  }
  EXPECT_EQ(patch.headers["content-type"], "application/merge-patch+json");
  nlohmann::json body = patch.Json();
  EXPECT_EQ(body["spec"]["template"]["metadata"]["annotations"][kKubeletEndpointAnnotation],
            "restore");
  EXPECT_EQ(body["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"], "100%");
  // The pods were listed by the DaemonSet's own selector.
  bool listed = false;
  for (const auto& r : server_.requests()) {
    if (r.path == kPods) listed = r.Param("labelSelector") == "app.kubernetes.io/name=cryo";
  }
  EXPECT_TRUE(listed);
  // Nothing said from the patch's stale status; then each step of the rollout once.
  EXPECT_EQ(
      log_.str(),
      "DaemonSet cryo-system/cryo: every node's pod now restarts to put kubelet's endpoint back\n"
      "1 of 2 nodes put kubelet back\n"
      "2 of 2 nodes put kubelet back\n"
      "node node-b: kubelet left as it was: kubelet not pointed at the shim: "
      "/var/lib/kubelet/config.yaml is not writable here\n"
      "kubelet's endpoint is back on 1 node(s); the DaemonSet may go\n");
}

TEST_F(KubeTest, ANodeWhoseCryodIsNotReadyIsBackOnceConfigureKubeletEnded) {
  // No pod is available (cryod cannot start), but both nodes ran the restore.
  server_.OnJson("GET", kDs, Ds("restore", 5, 5, 2, 2, 0));
  server_.OnJson("GET", kPods, Items({Done("node-a"), Done("node-b")}));
  auto s = RestoreKubeletEndpoints(*Client(), Options());
  ASSERT_TRUE(s.ok()) << s;
  for (const auto& r : server_.requests()) EXPECT_NE(r.method, "PATCH") << "already restoring";
  EXPECT_THAT(log_.str(), HasSubstr("back on 2 node(s)"));
}

TEST_F(KubeTest, ANodeThatNeverRestoresFailsTheHookNamingItAndWhatItWaitsOn) {
  server_.OnJson("GET", kDs, Ds("restore", 4, 4, 4, 2, 2));
  server_.OnJson(
      "GET", kPods,
      Items({Done("node-a"), Pod("node-b", "convert", {{"install-shim", kExit0}}),
             // In a crash loop: waiting, and why the last run failed.
             Pod("node-d", "restore",
                 {{"install-shim", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}}},
                 {{"terminated",
                   {{"exitCode", 1}, {"reason", "Error"}, {"message", "no shim bundle"}}}}),
             Pod("node-c", "restore",
                 {{"install-shim",
                   {{"terminated",
                     {{"exitCode", 1},
                      {"reason", "Error"},
                      {"message", "Failed to reload daemon"}}}}},
                  {kConfigureKubeletContainer, {{"waiting", {{"reason", "PodInitializing"}}}}}})}));
  KubeletRestoreOptions o = Options();
  o.timeout = absl::ZeroDuration();
  auto s = RestoreKubeletEndpoints(*Client(), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("1 of 4 nodes put kubelet back"));
  EXPECT_THAT(s.message(),
              HasSubstr("node-d (pod cryo-node-d-restore: install-shim: waiting: CrashLoopBackOff "
                        "(last run: exit 1: Error: no shim bundle))"));
  EXPECT_THAT(s.message(), HasSubstr("node-b (pod cryo-node-b-convert: old template, "));
  EXPECT_THAT(s.message(),
              HasSubstr("node-c (pod cryo-node-c-restore: install-shim: exit 1: Error: Failed to "
                        "reload daemon)"));
  EXPECT_THAT(s.message(), Not(HasSubstr("node-a")));
  EXPECT_THAT(s.message(), HasSubstr("helm uninstall --no-hooks"));
}

nlohmann::json Pod(const std::string& name, const std::string& node,
                   const nlohmann::json& annotations, const nlohmann::json& labels,
                   const std::string& container_id) {
  return {{"metadata", {{"name", name}, {"annotations", annotations}, {"labels", labels}}},
          {"spec", {{"nodeName", node}}},
          {"status",
           {{"podIP", "10.1.0.7"},
            {"containerStatuses",
             nlohmann::json::array({{{"name", "worker"}, {"containerID", container_id}}})}}}};
}

// Which pods form a job, from the API as the shim decides it; and each node's cryod.
TEST_F(KubeTest, AJobsMembersAndTheirNodesCryodsComeFromTheApi) {
  const nlohmann::json job = {{"cryo.dev/job", "sum"}, {"cryo.dev/job-size", "2"}};
  nlohmann::json pods = {
      {"items",
       {Pod("sum-a", "node-a", job, nlohmann::json::object(), "containerd://aaa"),
        Pod("other", "node-a", nlohmann::json::object(), nlohmann::json::object(),
            "containerd://ccc"),
        Pod("sum-b", "node-b", job, nlohmann::json::object(), "containerd://bbb")}}};
  server_.On("GET", "/api/v1/namespaces/ml/pods", [&](const Request& r) {
    EXPECT_EQ(r.params.at("fieldSelector"), "status.phase=Running");
    return JsonResponse(pods);
  });
  auto api = Client();
  ASSERT_NE(api, nullptr);
  auto members = ListJobMembers(*api, "cryo.dev", "ml", "sum");
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].member, "sum-a");
  EXPECT_EQ((*members)[0].node, "node-a");
  EXPECT_EQ((*members)[0].container_id, "aaa") << "the runtime's id, without its scheme";
  EXPECT_EQ((*members)[1].node, "node-b");

  // One member gone: a checkpoint of half a job is none.
  pods["items"].erase(2);
  auto half = ListJobMembers(*api, "cryo.dev", "ml", "sum");
  EXPECT_EQ(half.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(half.status().message()), HasSubstr("1 missing"));
  // Two pods claiming one member.
  pods["items"].push_back(
      Pod("sum-a2", "node-b",
          {{"cryo.dev/job", "sum"}, {"cryo.dev/job-size", "2"}, {"cryo.dev/job-member", "sum-a"}},
          nlohmann::json::object(), "containerd://ddd"));
  auto twice = ListJobMembers(*api, "cryo.dev", "ml", "sum");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("both say they are member sum-a"));
  EXPECT_EQ(ListJobMembers(*api, "cryo.dev", "ml", "nope").status().code(),
            absl::StatusCode::kNotFound);

  server_.On("GET", kPods, [&](const Request& r) {
    EXPECT_EQ(r.params.at("labelSelector"), "app.kubernetes.io/name=cryo");
    return JsonResponse({{"items",
                          {Pod("cryo-x", "node-a", nlohmann::json::object(),
                               nlohmann::json::object(), "containerd://1"),
                           {{"metadata", {{"name", "cryo-y"}}},
                            {"spec", {{"nodeName", "node-b"}}},
                            {"status", {{"podIP", "fd00::9"}}}}}}});
  });
  auto peers = ListPeerAddresses(*api, "cryo-system", "app.kubernetes.io/name=cryo", 9470);
  ASSERT_TRUE(peers.ok()) << peers.status();
  EXPECT_EQ(peers->at("node-a"), "10.1.0.7:9470");
  EXPECT_EQ(peers->at("node-b"), "[fd00::9]:9470");
}

// A job whose pods do not say its size (JobSet, PyTorchJob, indexed Job): its owner does, read
// from the API; an owner that cannot be read or says no number refuses the job checkpoint.
TEST_F(KubeTest, AJobsSizeComesFromItsOwnerWhenItsPodsDoNotSayIt) {
  auto member = [](const std::string& name, const std::string& node, nlohmann::json labels,
                   const std::string& id) {
    return Pod(name, node, nlohmann::json::object(), std::move(labels), id);
  };
  nlohmann::json pods = {{"items",
                          {member("train-w-0-0", "node-a",
                                  {{"jobset.sigs.k8s.io/jobset-name", "train"},
                                   {"jobset.sigs.k8s.io/job-global-index", "0"},
                                   {"batch.kubernetes.io/job-completion-index", "0"}},
                                  "containerd://aaa"),
                           member("train-w-1-0", "node-b",
                                  {{"jobset.sigs.k8s.io/jobset-name", "train"},
                                   {"jobset.sigs.k8s.io/job-global-index", "1"},
                                   {"batch.kubernetes.io/job-completion-index", "0"}},
                                  "containerd://bbb"),
                           member("ddp-master-0", "node-a",
                                  {{"training.kubeflow.org/job-name", "ddp"},
                                   {"training.kubeflow.org/replica-type", "Master"},
                                   {"training.kubeflow.org/replica-index", "0"}},
                                  "containerd://ccc")}}};
  server_.On("GET", "/api/v1/namespaces/ml/pods",
             [&](const Request&) { return JsonResponse(pods); });
  // Two replicated Jobs of one pod each, then three: 2 members, then 4.
  nlohmann::json jobset = {
      {"spec",
       {{"replicatedJobs",
         {{{"name", "w"},
           {"replicas", 2},
           {"template", {{"spec", {{"parallelism", 1}, {"completions", 1}}}}}}}}}}};
  server_.On("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/train",
             [&](const Request&) { return JsonResponse(jobset); });
  auto api = Client();
  ASSERT_NE(api, nullptr);
  auto members = ListJobMembers(*api, "cryo.dev", "ml", "train");
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].member, "0-0");
  EXPECT_EQ((*members)[1].member, "1-0");
  EXPECT_EQ((*members)[0].size, 2) << "the JobSet's";
  jobset["spec"]["replicatedJobs"][0]["replicas"] = 4;
  auto short_of = ListJobMembers(*api, "cryo.dev", "ml", "train");
  EXPECT_EQ(short_of.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(short_of.status().message()), HasSubstr("2 missing"));

  // A PyTorchJob: its master and workers. One worker of two runs: refused.
  server_.On("GET", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/ddp", [&](const Request&) {
    return JsonResponse({{"spec",
                          {{"pytorchReplicaSpecs",
                            {{"Master", {{"replicas", 1}}}, {"Worker", {{"replicas", 2}}}}}}}});
  });
  auto ddp = ListJobMembers(*api, "cryo.dev", "ml", "ddp");
  EXPECT_EQ(ddp.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ddp.status().message()), HasSubstr("has 3 members and 1 run"));

  // An owner the API does not give (RBAC, no such CRD) says why and what to set.
  auto size = JobSizeFromOwner(*api, "ml", contract::JobSource::kIndexedJob, "gone");
  EXPECT_EQ(size.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(size.status().message()), HasSubstr("cryo.dev/job-size"));
  // An indexed Job: the pods it runs at once.
  server_.On("GET", "/apis/batch/v1/namespaces/ml/jobs/idx", [&](const Request&) {
    return JsonResponse({{"spec", {{"completions", 8}, {"parallelism", 4}}}});
  });
  EXPECT_EQ(*JobSizeFromOwner(*api, "ml", contract::JobSource::kIndexedJob, "idx"), 4);
  server_.On("GET", "/apis/batch/v1/namespaces/ml/jobs/odd", [&](const Request&) {
    return JsonResponse({{"spec", {{"parallelism", "four"}}}});
  });
  EXPECT_EQ(JobSizeFromOwner(*api, "ml", contract::JobSource::kIndexedJob, "odd").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cryo::kube
