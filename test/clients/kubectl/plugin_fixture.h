#pragma once

// What the tests of kubectl-cryo share: a fake API server with a kubeconfig pointing at it,
// the objects it serves (pods, cryo pods, nodes, checkpoints), and ways to run the plugin: as
// kubectl-cryo, as kubectl-checkpoint, and through the real kubectl's plugin lookup.

#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/clients/kubectl/fake_apiserver.h"

namespace cryo::kubectl::testing {

using nlohmann::json;

inline constexpr char kCryoPods[] = "/api/v1/namespaces/cryo-system/pods";
inline constexpr char kTrainUid[] = "6d3c1a8e-0000-4000-8000-000000000001";
inline constexpr char kTrainCheckpoint[] =
    "/api/v1/nodes/node-a/proxy/checkpoint/ml/train-0/worker";
inline constexpr char kTrainArchive[] =
    "/var/lib/kubelet/checkpoints/checkpoint-train-0_ml-worker.tar";

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};
std::ostream& operator<<(std::ostream& os, const Outcome& r);

// A container's status in a pod: "running", "waiting:REASON" or "terminated:REASON".
json ContainerStatus(const std::string& name, const std::string& state);
// A pod as the API server returns it, server-set fields included.
json Pod(const std::string& ns, const std::string& name, const std::string& node,
         const std::vector<std::pair<std::string, std::string>>& containers);
// The cryo DaemonSet's pods: (name, node, phase), cryod's port named http (9464) unless
// `http_port` is false.
json CryoPodList(const std::vector<std::tuple<std::string, std::string, std::string>>& pods,
                 bool http_port = true);
// A NodeList: (name, Ready condition status).
json NodeList(const std::vector<std::pair<std::string, std::string>>& nodes);
// The Secret the cryo pods name for their HTTP API's token, and the token in it.
inline constexpr char kApiTokenSecret[] = "cryo-http-api";
inline constexpr char kApiToken[] = "test-cryod-api-token-0123456789";
// A checkpoint as cryod's /v1/checkpoints answers it (of ml/train-0/worker).
json Checkpoint(const std::string& id, const std::string& created, const std::string& node,
                uint64_t size);
// A checkpoint the shim took of NS/POD/CONTAINER (the labels it sets), of the pod `uid`.
json CheckpointOf(const std::string& id, const std::string& ns, const std::string& pod,
                  const std::string& container, const std::string& uid = kTrainUid);
// cryod's path REST on CRYO_POD through the pod proxy.
std::string ProxyPath(const std::string& cryo_pod, const std::string& rest);
// cryod's path REST on NODE:9464 through the node proxy (cryod as a host service).
std::string NodeProxyPath(const std::string& node, const std::string& rest);

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A kubeconfig with two contexts on the fake server: "fake" (current; user tester, token
  // test-token, namespace default) and "other" (user other-user, token other-token, namespace
  // ml); the cluster "fake" skips TLS verification, "strict" (the same server) does not, and
  // nothing listens where "nowhere" (127.0.0.1:1) is.
  static void WriteKubeconfig(const std::string& path, const std::string& server);
  // An executable shell script at dir_/NAME; returns its path.
  std::string WriteScript(const std::string& name, const std::string& body);

  // kubectl-cryo ARGS, with KUBECONFIG pointing at the fake server, a HOME of its own so
  // kubectl's discovery cache stays in the test's directory, and none of the plugin's
  // variables from the environment of the test (later `env` entries win).
  Outcome Plugin(const std::vector<std::string>& args, std::vector<std::string> env = {});
  // The same binary run as kubectl-checkpoint.
  Outcome Legacy(const std::vector<std::string>& args, std::vector<std::string> env = {});
  // The real kubectl with the plugin's directory (both names) first on PATH: `kubectl ARGS`.
  Outcome ThroughKubectl(const std::vector<std::string>& args, std::vector<std::string> env = {});
  Outcome RunBinary(const std::string& binary, const std::vector<std::string>& args,
                    std::vector<std::string> env);

  void ServeTrainPod(const std::string& state = "running");
  // cryo-a on node-a and cryo-b on node-b, both running, with fieldSelector honoured.
  void ServeCryoPods();
  // kubelet's checkpoint call at `post_path` answers `archives`; cryod's list at `list_path`
  // answers `before` until that call arrives and `after` from then on.
  void ServeCheckpointCall(const std::string& list_path, const std::string& post_path,
                           const json& archives, const json& before, const json& after);

  FakeApiServer server_{/*tls=*/true};
  std::string dir_;
  std::string kubeconfig_;
};

}  // namespace cryo::kubectl::testing
