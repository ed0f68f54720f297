// Container mode end to end, with real parts: two containerd 1.6 nodes, a cryod on each in
// container mode, the shim in front of each, one shared store, and a CRI client doing what
// kubelet does. Opted-in pods are checkpointed (kubelet's checkpoint API, preemption stops)
// and resumed on the other node; everything else is left alone. Needs root.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "daemon/container/archive.h"
#include "e2e/containerd/cri_client.h"
#include "e2e/containerd/fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/subprocess.h"
#include "lib/contract/archive.h"
#include "nlohmann/json.hpp"
#include "test/daemon/criu/craft_images.h"
#include "test/daemon/termination/test_http_server.h"
#include "test/http_get_local.h"

// A failed stop says why (the shim's or the runtime's error).
#define ASSERT_STOPPED(expr)                      \
  do {                                            \
    const absl::Status stop_status = (expr);      \
    ASSERT_TRUE(stop_status.ok()) << stop_status; \
  } while (0)

namespace cryo::e2e {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

// The job: counts, logs each tick, appends it to a file it keeps open in its writable layer,
// and exits 42 once /tmp/stop exists.
const std::vector<std::string> kCounter = {
    "sh", "-c",
    "i=0; exec 3>>/tmp/ticks; while :; do i=$((i+1)); echo \"tick $i\"; echo $i >&3; "
    "if [ -e /tmp/stop ]; then exit 42; fi; sleep 0.1; done"};

// The numbers a job wrote to its CRI log as "<prefix>N" lines ("tick N" by default), in order.
std::vector<int> Ticks(const std::string& log_path, absl::string_view prefix = "tick ") {
  std::vector<int> out;
  auto lines = ReadCriLog(log_path);
  if (!lines.ok()) return out;
  for (const auto& l : *lines) {
    absl::string_view t = l.text;
    int n;
    if (absl::ConsumePrefix(&t, prefix) && absl::SimpleAtoi(t, &n)) out.push_back(n);
  }
  return out;
}

// Two processes of one pod talking TCP over its loopback, as the ranks of a one-pod torchrun
// job do: an echo server (nc -ll, cat per connection) and a client that sends a count every
// tick and logs each number that comes back as "echo N".
const std::vector<std::string> kLoopbackPair = {
    "sh", "-c",
    "nc -ll -p 7000 -e cat & sleep 0.5; i=0; while :; do i=$((i+1)); echo $i; sleep 0.1; done | "
    "nc 127.0.0.1 7000 | while read n; do echo \"echo $n\"; done"};

std::string TailOf(const std::string& path) {
  std::string all = Slurp(path);
  return all.size() > 3000 ? all.substr(all.size() - 3000) : all;
}

// The uid of the Job the pods belong to (the Job controller's controller-uid label).
const std::string kJobUid = "5e1f0c2a-0000-4000-8000-000000000001";

class ContainerModeE2e : public ContainerdE2e {
 protected:
  struct Pod {
    std::string pod_id;
    std::string ctr_id;
    std::string log_path;
    // The host file kubelet mounts at the container's terminationMessagePath; kubelet adds
    // what the container wrote there to its status' message once it exited.
    std::string termination_log;
    cri::PodSandboxConfig config;
  };

  // Runs a pod (one container "counter") on `node` through that node's shim. The pod is a
  // Job's pod, as the Job controller labels them (job-name, controller-uid): replacement pods
  // of the same Job share the default workload key.
  absl::StatusOr<Pod> RunPod(const std::string& node, const std::string& name,
                             const std::map<std::string, std::string>& annotations,
                             const std::vector<std::string>& command = kCounter, bool start = true,
                             const std::string& job_uid = kJobUid) {
    CriClient& shim = Shim(node);
    Pod p;
    const std::string log_dir = world().PodLogDir(node, name);
    p.config = MakePodConfig(name, absl::StrCat("uid-", name), log_dir, world().CgroupParent(node));
    if (!namespace_.empty()) {
      p.config.mutable_metadata()->set_namespace_(namespace_);
      (*p.config.mutable_labels())["io.kubernetes.pod.namespace"] = namespace_;
    }
    (*p.config.mutable_labels())["batch.kubernetes.io/job-name"] = "trainer";
    (*p.config.mutable_labels())["batch.kubernetes.io/controller-uid"] = job_uid;
    for (const auto& [k, v] : annotations) (*p.config.mutable_annotations())[k] = v;
    if (pod_network_) {
      p.config.set_hostname(name);
      p.config.mutable_linux()
          ->mutable_security_context()
          ->mutable_namespace_options()
          ->set_network(cri::POD);
    }
    auto pod_id = shim.RunPodSandbox(p.config);
    if (!pod_id.ok()) return pod_id.status();
    p.pod_id = *pod_id;
    pods_.push_back({node, p.pod_id});
    cri::ContainerConfig config = MakeContainerConfig("counter", command);
    if (pod_network_) {
      config.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
          cri::POD);
    }
    if (container_tweak_) container_tweak_(&config);
    // kubelet labels every container with its pod.
    for (const char* k :
         {"io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid"}) {
      (*config.mutable_labels())[k] = p.config.labels().at(k);
    }
    // ... annotates it with the pod's grace period and its termination message path, and
    // mounts an empty host file there (pkg/kubelet/kuberuntime, makeMounts).
    (*config.mutable_annotations())["io.kubernetes.pod.terminationGracePeriod"] = "30";
    (*config.mutable_annotations())["io.kubernetes.container.terminationMessagePath"] =
        "/dev/termination-log";
    (*config.mutable_annotations())["io.kubernetes.container.terminationMessagePolicy"] = "File";
    p.termination_log = absl::StrCat(world().dir(), "/termination-", name);
    std::ofstream(p.termination_log).flush();
    ::chmod(p.termination_log.c_str(), 0666);
    cri::Mount* m = config.add_mounts();
    m->set_container_path("/dev/termination-log");
    m->set_host_path(p.termination_log);
    auto ctr = shim.CreateContainer(p.pod_id, config, p.config);
    if (!ctr.ok()) return ctr.status();
    p.ctr_id = *ctr;
    p.log_path = absl::StrCat(log_dir, "/counter.log");
    if (start) {
      if (absl::Status s = shim.StartContainer(p.ctr_id); !s.ok()) return s;
    }
    return p;
  }

  static double Secs(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

  // The next pods are on the pod network with cryo-sumpair at /opt/cryo/cryo-sumpair.
  void SumpairPods() {
    pod_network_ = true;
    container_tweak_ = [](cri::ContainerConfig* c) {
      cri::Mount* m = c->add_mounts();
      m->set_container_path("/opt/cryo/cryo-sumpair");
      m->set_host_path(CRYO_SUMPAIR_STATIC);
      m->set_readonly(true);
    };
  }

  // Starts the containers at once, as the kubelets of their nodes would: a job's replacements
  // each wait in their start for the others. The first failure, with every node's that failed
  // (one that waited names the member whose start failed first, not why).
  absl::Status StartTogether(const std::vector<std::pair<std::string, const Pod*>>& pods) {
    std::vector<absl::Status> st(pods.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < pods.size(); ++i) {
      CriClient& shim = Shim(pods[i].first);  // made here: clients_ is not for threads
      threads.emplace_back([&, i] { st[i] = shim.StartContainer(pods[i].second->ctr_id); });
    }
    for (auto& t : threads) t.join();
    absl::Status first;
    std::vector<std::string> each;
    for (size_t i = 0; i < pods.size(); ++i) {
      if (st[i].ok()) continue;
      if (first.ok()) first = st[i];
      each.push_back(absl::StrCat(pods[i].first, ": ", st[i].ToString()));
    }
    if (first.ok()) return first;
    return absl::Status(first.code(), absl::StrJoin(each, "\n"));
  }

  CriClient& Shim(const std::string& node) {
    auto it = clients_.find(node);
    if (it == clients_.end()) {
      it = clients_.emplace(node, std::make_unique<CriClient>(world().ShimSocket(node))).first;
    }
    return *it->second;
  }

  // The status once the runtime has recorded the exit. containerd's StopContainer can return
  // before it has (the task already gone, its exit event still being handled); kubelet learns
  // of the exit from its next status poll, so this waits as kubelet does.
  // The runtime's own view of a container, asked past the shim: its verbose ContainerStatus,
  // whose info["info"] (containerd's) holds the init pid and the OCI spec as the runtime wrote it.
  absl::StatusOr<cri::ContainerStatusResponse> RuntimeStatus(const std::string& node,
                                                             const std::string& id) {
    CriClient direct(world().NodeSocket(node));
    cri::ContainerStatusRequest req;
    req.set_container_id(id);
    req.set_verbose(true);
    cri::ContainerStatusResponse resp;
    grpc::Status st =
        direct.Call(direct.runtime(), &cri::RuntimeService::Stub::ContainerStatus, req, &resp);
    if (!st.ok()) return FromGrpc(st);
    return resp;
  }

  absl::StatusOr<cri::ContainerStatus> ExitedStatus(const std::string& node,
                                                    const std::string& id) {
    return Shim(node).WaitContainer(
        id, [](const cri::ContainerStatus& s) { return s.state() == cri::CONTAINER_EXITED; });
  }

  bool WaitTicks(const Pod& p, size_t n) {
    return WaitUntil([&] { return Ticks(p.log_path).size() >= n; }, absl::Seconds(60));
  }

  std::vector<v1::CheckpointInfo> Checkpoints(const std::string& workload) {
    std::vector<v1::CheckpointInfo> out;
    for (const auto& c : world().cryod("node-a").List()) {
      if (c.workload() == workload) out.push_back(c);
    }
    return out;
  }

  absl::StatusOr<cri::ExecSyncResponse> Exec(const std::string& node, const std::string& id,
                                             const std::string& script) {
    cri::ExecSyncRequest req;
    req.set_container_id(id);
    for (const char* a : {"sh", "-c"}) req.add_cmd(a);
    req.add_cmd(script);
    req.set_timeout(20);
    cri::ExecSyncResponse resp;
    grpc::Status st =
        Shim(node).Call(Shim(node).runtime(), &cri::RuntimeService::Stub::ExecSync, req, &resp);
    if (!st.ok()) return FromGrpc(st);
    return resp;
  }

  // Whether the container runs, as the runtime says.
  bool Running(const std::string& node, const std::string& ctr) {
    auto st = Shim(node).ContainerStatus(ctr);
    return st.ok() && st->state() == cri::CONTAINER_RUNNING;
  }

  // The pod's address on its node's pod network, as the runtime reports it to kubelet.
  std::string PodIp(const std::string& node, const std::string& pod_id) {
    CriClient direct(world().NodeSocket(node));
    cri::PodSandboxStatusRequest req;
    req.set_pod_sandbox_id(pod_id);
    cri::PodSandboxStatusResponse resp;
    grpc::Status st =
        direct.Call(direct.runtime(), &cri::RuntimeService::Stub::PodSandboxStatus, req, &resp);
    return st.ok() ? resp.status().network().ip() : "";
  }

  // The GPU jobs (over the fake driver and the real one) keep a JSON status record at
  // /tmp/status in their pod: read there (null when there is none yet).
  nlohmann::json Status(const std::string& node, const std::string& ctr) {
    auto r = Exec(node, ctr, "cat /tmp/status");
    if (!r.ok()) return nlohmann::json();
    return nlohmann::json::parse(r->stdout(), nullptr, false);
  }

  // A number of that record; 0 when it has none.
  static uint64_t U(const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<uint64_t>() : 0;
  }

  // Whether the record's `what` went past `n` within `timeout`; false as soon as the container
  // no longer runs.
  bool StatusPast(const std::string& node, const std::string& ctr, const char* what, uint64_t n,
                  absl::Duration timeout) {
    bool past = false;
    WaitUntil(
        [&] {
          past = U(Status(node, ctr), what) > n;
          return past || !Running(node, ctr);
        },
        timeout);
    return past;
  }

  // A GPU pod's annotations: checkpoint-on-stop, the fast path and `resume: auto` when asked.
  static std::map<std::string, std::string> GpuOptIn(bool fastpath, bool resume) {
    std::map<std::string, std::string> a = {{"cryo.dev/checkpoint-on-stop", "true"}};
    if (fastpath) a["cryo.dev/gpu-fast-path"] = "true";
    if (resume) a["cryo.dev/resume"] = "auto";
    return a;
  }

  // Host directories mounted read-only at the same paths (the busybox image has no libc).
  static void MountHostDirs(cri::ContainerConfig* c, const std::set<std::string>& dirs) {
    for (const std::string& dir : dirs) {
      if (dir.size() < 2 || dir[0] != '/' || ::access(dir.c_str(), F_OK) != 0) continue;
      cri::Mount* m = c->add_mounts();
      m->set_container_path(dir);
      m->set_host_path(dir);
      m->set_readonly(true);
    }
  }

  void TearDown() override {
    if (world_ == nullptr) return;  // no world was made: nothing to clean up
    for (const auto& [node, pod] : pods_) RemovePodQuietly(Shim(node), pod);
    DeleteAllCheckpoints();
  }

  // kubelet's CheckpointContainer of `ctr` through `node`'s shim, its archive at `location`
  // (none when empty).
  grpc::Status KubeletCheckpoint(const std::string& node, const std::string& ctr,
                                 const std::string& location,
                                 absl::Duration timeout = absl::Minutes(2)) {
    cri::CheckpointContainerRequest req;
    req.set_container_id(ctr);
    if (!location.empty()) req.set_location(location);
    cri::CheckpointContainerResponse resp;
    CriClient& shim = Shim(node);
    return shim.Call(shim.runtime(), &cri::RuntimeService::Stub::CheckpointContainer, req, &resp,
                     timeout);
  }

  // Builds checkpoint image `name` from `archive` (flipping a byte of `tamper` first when set),
  // and imports it into `node`'s containerd.
  absl::Status BuildAndImport(const std::string& archive, const std::string& name,
                              const std::string& node, const std::string& tamper = "") {
    const std::string oci = absl::StrCat(archive, ".oci.tar");
    std::vector<std::string> build = {"/bin/bash",
                                      absl::StrCat(CRYO_E2E_SCRIPTS_DIR, "/checkpoint-image.sh"),
                                      archive, name, oci};
    if (!tamper.empty()) build.push_back(tamper);
    for (const auto& argv :
         std::vector<std::vector<std::string>>{build,
                                               {"ctr", "--address", world().NodeSocket(node), "-n",
                                                "k8s.io", "images", "import", oci}}) {
      auto r = RunCapture(argv, absl::Minutes(3));
      if (!r.ok()) return r.status();
      if (!r->exit.exited || r->exit.code != 0) {
        return absl::InternalError(
            absl::StrCat(argv[0], " ", argv[1], ": ", r->exit.Describe(), ": ", r->output));
      }
    }
    return absl::OkStatus();
  }

  // A plain pod (no owner; only `annotations`, none by default) on `node` whose container's
  // image is `image` and which names no command, as a user writes it.
  absl::StatusOr<Pod> RunImagePod(const std::string& node, const std::string& name,
                                  const std::string& image,
                                  const std::map<std::string, std::string>& annotations = {}) {
    CriClient& shim = Shim(node);
    Pod p;
    const std::string log_dir = world().PodLogDir(node, name);
    p.config = MakePodConfig(name, absl::StrCat("uid-", name), log_dir, world().CgroupParent(node));
    for (const auto& [k, v] : annotations) (*p.config.mutable_annotations())[k] = v;
    auto pod_id = shim.RunPodSandbox(p.config);
    if (!pod_id.ok()) return pod_id.status();
    p.pod_id = *pod_id;
    pods_.push_back({node, p.pod_id});
    cri::ContainerConfig config = MakeContainerConfig("counter", {});
    config.clear_command();
    config.mutable_image()->set_image(image);
    if (container_tweak_) container_tweak_(&config);
    for (const char* k :
         {"io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid"}) {
      (*config.mutable_labels())[k] = p.config.labels().at(k);
    }
    auto ctr = shim.CreateContainer(p.pod_id, config, p.config);
    if (!ctr.ok()) return ctr.status();
    p.ctr_id = *ctr;
    p.log_path = absl::StrCat(log_dir, "/counter.log");
    if (absl::Status s = shim.StartContainer(p.ctr_id); !s.ok()) return s;
    return p;
  }

  void DeleteAllCheckpoints() {
    for (const auto& c : world().cryod("node-a").List()) {
      v1::DeleteCheckpointRequest req;
      req.set_checkpoint_id(c.checkpoint_id());
      v1::DeleteCheckpointResponse resp;
      grpc::ClientContext ctx;
      (void)world().cryod("node-a").stub().DeleteCheckpoint(&ctx, req, &resp);
    }
  }

  std::map<std::string, std::unique_ptr<CriClient>> clients_;
  std::vector<std::pair<std::string, std::string>> pods_;
  // Applied to every container RunPod creates (its security context, say).
  std::function<void(cri::ContainerConfig*)> container_tweak_;
  // The namespace of the pods RunPod creates; empty: MakePodConfig's (cryo-e2e).
  std::string namespace_;
  // Pods on the node's pod network (the bridge CNI, node.sh), not the host's.
  bool pod_network_ = false;
};

const std::string kWorkload = "cryo-e2e.trainer.5e1f0c2a.counter";

TEST_F(ContainerModeE2e, CheckpointContainerWritesKubeletArchiveAndTheContainerRunsOn) {
  auto p = RunPod("node-a", "ckpt-api", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitTicks(*p, 5));

  const std::string archive = absl::StrCat(world().dir(), "/kubelet/checkpoints/ckpt-api.tar");
  grpc::Status st = KubeletCheckpoint("node-a", p->ctr_id, archive);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();

  // The archive holds what checkpointctl (lib/metadata.go and internal/container.go of
  // checkpoint-restore/checkpointctl, 1.1-1.4) reads: config.dump (ContainerConfig: id, name,
  // rootfsImage, rootfsImageRef, rootfsImageName, runtime, createdTime, checkpointedTime),
  // spec.dump (the OCI spec; its annotations), checkpoint/ (CRIU's images), rootfs-diff.tar,
  // deleted.files, dump.log, stats-dump (CRIU's statistics: `inspect --stats` and `--all` fail
  // without it), status (containerd's: CreatedAt, shown as CREATED) and status.dump (CRI's
  // ContainerStatus, as CRI-O and containerd 2 write it); and cryo's own manifest.
  auto names = container::ListArchive(archive);
  ASSERT_TRUE(names.ok()) << names.status();
  for (const char* want :
       {"config.dump", "spec.dump", "checkpoint/inventory.img", "rootfs-diff.tar", "deleted.files",
        "dump.log", "stats-dump", "status", "status.dump", "cryo-manifest.json"}) {
    EXPECT_THAT(*names, Contains(want));
  }
  auto config = container::ReadArchiveFile(archive, "config.dump");
  ASSERT_TRUE(config.ok());
  nlohmann::json cj = nlohmann::json::parse(*config);
  EXPECT_EQ(cj["id"], p->ctr_id);
  EXPECT_EQ(cj["name"], "counter");
  EXPECT_EQ(cj["rootfsImage"], kBusyboxImage) << "the image's name, not its id";
  EXPECT_EQ(cj["rootfsImageName"], kBusyboxImage);
  EXPECT_FALSE(cj["rootfsImageRef"].get<std::string>().empty());
  for (const char* field : {"runtime", "createdTime", "checkpointedTime"}) {
    EXPECT_TRUE(cj.contains(field)) << field;
  }
  auto status_file = container::ReadArchiveFile(archive, "status");
  ASSERT_TRUE(status_file.ok());
  EXPECT_GT(nlohmann::json::parse(*status_file).value("CreatedAt", int64_t{0}), 1700000000000000000)
      << "CreatedAt in nanoseconds, as CRI-O writes it";
  auto status_dump = container::ReadArchiveFile(archive, "status.dump");
  ASSERT_TRUE(status_dump.ok());
  EXPECT_EQ(nlohmann::json::parse(*status_dump)["metadata"]["name"], "counter");
  // cryo's manifest lists every file of the archive under the archive's own names.
  auto cm = container::ReadArchiveFile(archive, "cryo-manifest.json");
  ASSERT_TRUE(cm.ok());
  for (const auto& f : nlohmann::json::parse(*cm)["files"]) {
    EXPECT_THAT(*names, Contains(f["path"].get<std::string>()));
  }
  // The writable layer holds the job's files, not cryo's own mount point.
  auto diff = container::ReadArchiveFile(archive, "rootfs-diff.tar");
  ASSERT_TRUE(diff.ok());
  const std::string diff_path = absl::StrCat(world().dir(), "/rootfs-diff.tar");
  std::ofstream(diff_path, std::ios::binary) << *diff;
  auto diff_names = container::ListArchive(diff_path);
  ASSERT_TRUE(diff_names.ok()) << diff_names.status();
  for (const auto& n : *diff_names) EXPECT_NE(n.rfind(".cryo", 0), 0u) << n;
  auto spec = container::ReadArchiveFile(archive, "spec.dump");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(nlohmann::json::parse(*spec)["annotations"]["io.kubernetes.cri.container-name"],
            "counter");

  // Published in the store with the pod's facts, and the job runs on.
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].kind(), "container");
  EXPECT_EQ(list[0].labels().at("cryo.dev/reason"), "checkpoint-api");
  EXPECT_EQ(list[0].labels().at("io.kubernetes.pod.name"), "ckpt-api");
  EXPECT_TRUE(list[0].leave_running());
  const size_t before = Ticks(p->log_path).size();
  EXPECT_TRUE(WaitTicks(*p, before + 5)) << "the container stopped counting";
  auto status = Shim("node-a").ContainerStatus(p->ctr_id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), cri::CONTAINER_RUNNING);
  std::vector<int> ticks = Ticks(p->log_path);
  for (size_t i = 0; i < ticks.size(); ++i) ASSERT_EQ(ticks[i], static_cast<int>(i) + 1);
}

TEST_F(ContainerModeE2e, PreemptedContainerResumesOnAnotherNodeWhereItLeftOff) {
  auto a = RunPod("node-a", "trainer-1", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitTicks(*a, 10));

  // Preemption: kubelet stops the container with the pod's grace period.
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  auto stopped = ExitedStatus("node-a", a->ctr_id);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->state(), cri::CONTAINER_EXITED);
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u) << "the stop did not leave a checkpoint";
  EXPECT_EQ(list[0].labels().at("cryo.dev/reason"), "stop");
  // The stop gave the pod's own grace period (as a preemption, a delete or a drain does).
  EXPECT_EQ(list[0].labels().at("cryo.dev/stop-grace"), "pod");
  EXPECT_EQ(list[0].labels().at("cryo.dev/stop-grace-seconds"), "30");
  // Stopped after its checkpoint: the checkpointed exit code, not the kill's 137, so that a
  // Job's podFailurePolicy can ignore it; containerd's reason for any non-zero exit, and the
  // termination message docs/containers.md quotes, which kubelet adds to the status' message.
  EXPECT_EQ(stopped->exit_code(), 75);
  EXPECT_EQ(stopped->reason(), "Error");
  EXPECT_EQ(stopped->message(), "") << "containerd reports no message of its own";
  EXPECT_EQ(Slurp(a->termination_log),
            "cryo: checkpointed before this stop; its replacement resumes from the checkpoint\n");
  bool mounted = false;
  for (const auto& m : stopped->mounts()) {
    mounted |= m.container_path() == "/dev/termination-log" && m.host_path() == a->termination_log;
  }
  EXPECT_TRUE(mounted) << "kubelet finds the message's file through the status' mounts";
  EXPECT_EQ(list[0].node_name(), "node-a");
  EXPECT_FALSE(list[0].leave_running());
  std::vector<int> old_ticks = Ticks(a->log_path);
  ASSERT_FALSE(old_ticks.empty());
  const int last = old_ticks.back();

  // The replacement pod of the same Job, on the other node, resumes automatically.
  auto b = RunPod("node-b", "trainer-2",
                  {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/resume", "auto"}});
  ASSERT_TRUE(b.ok()) << b.status();
  auto running = Shim("node-b").ContainerStatus(b->ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->state(), cri::CONTAINER_RUNNING);
  EXPECT_EQ(running->annotations().at("cryo.dev/resume-from"), list[0].checkpoint_id());
  ASSERT_TRUE(WaitTicks(*b, 5));
  std::vector<int> new_ticks = Ticks(b->log_path);
  // The counter goes on from where it was checkpointed, not from 1, in the new pod's log.
  EXPECT_EQ(new_ticks.front(), last + 1);
  for (size_t i = 1; i < new_ticks.size(); ++i) EXPECT_EQ(new_ticks[i], new_ticks[i - 1] + 1);

  // Its writable layer came along: the file it keeps open holds every tick so far.
  auto lines = Exec("node-b", b->ctr_id, "wc -l < /tmp/ticks");
  ASSERT_TRUE(lines.ok()) << lines.status();
  int n = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(lines->stdout()), &n)) << lines->stdout();
  EXPECT_GE(n, last + 5);

  // When the job ends, its exit code is the container's.
  ASSERT_TRUE(Exec("node-b", b->ctr_id, "touch /tmp/stop").ok());
  auto done = Shim("node-b").WaitContainer(
      b->ctr_id, [](const cri::ContainerStatus& s) { return s.state() == cri::CONTAINER_EXITED; },
      absl::Seconds(30));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), cri::CONTAINER_EXITED);
  EXPECT_EQ(done->exit_code(), 42);
}

// The ranks of a one-pod job talk over the pod's loopback. Stopped on node A, the pod resumes on
// node B, in a new network namespace: the connection between its processes carries on with
// nothing lost or repeated (every number echoed once, in order, from where it stopped).
TEST_F(ContainerModeE2e, ProcessesTalkingOverThePodsLoopbackResumeOnAnotherNode) {
  auto a = RunPod("node-a", "pair-1", {{"cryo.dev/checkpoint-on-stop", "true"}}, kLoopbackPair);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(
      WaitUntil([&] { return Ticks(a->log_path, "echo ").size() >= 10; }, absl::Seconds(60)))
      << TailOf(a->log_path);
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u) << "the stop did not leave a checkpoint";
  std::vector<int> old = Ticks(a->log_path, "echo ");
  ASSERT_FALSE(old.empty());

  auto b =
      RunPod("node-b", "pair-2",
             {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/resume", "auto"}}, kLoopbackPair);
  ASSERT_TRUE(b.ok()) << b.status();
  auto running = Shim("node-b").ContainerStatus(b->ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->annotations().at("cryo.dev/resume-from"), list[0].checkpoint_id());
  ASSERT_TRUE(
      WaitUntil([&] { return Ticks(b->log_path, "echo ").size() >= 10; }, absl::Seconds(60)))
      << "the restored pair does not talk: " << TailOf(b->log_path);
  std::vector<int> now = Ticks(b->log_path, "echo ");
  EXPECT_EQ(now.front(), old.back() + 1) << "a number was lost or repeated across the move";
  for (size_t i = 1; i < now.size(); ++i) EXPECT_EQ(now[i], now[i - 1] + 1);
}

// A restored job gets at most what its new container grants (the OCI spec, as the runtime set up
// the container's cryo-init). The pod drops every capability and sets no_new_privs. Its honest
// checkpoint restores into a pod like it, but not into a pod that runs as uid 1000 (the job
// ran as root). The next checkpoint, rewritten in the store to bring the job back with a hard
// RLIMIT_NOFILE above the pod's, then with every capability and no_new_privs off (checksums
// fixed, as a pod author's checkpoint image could be built), is refused when the replacement
// starts: nothing runs, and the refusal names the field.
TEST_F(ContainerModeE2e, ARestoreGrantsNoMoreThanTheNewContainer) {
  auto confine = [](cri::ContainerConfig* c) {
    auto* sc = c->mutable_linux()->mutable_security_context();
    sc->set_no_new_privs(true);
    sc->mutable_capabilities()->add_drop_capabilities("ALL");
  };
  container_tweak_ = confine;
  auto a = RunPod("node-a", "creds-src", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitTicks(*a, 3));
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u);
  const std::string honest = list[0].checkpoint_id();
  const int last = Ticks(a->log_path).back();

  auto refused = [&](const std::string& pod, const std::string& id) -> std::string {
    auto p = RunPod("node-b", pod, {{"cryo.dev/resume", id}}, kCounter, /*start=*/false);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return "";
    absl::Status started = Shim("node-b").StartContainer(p->ctr_id);
    EXPECT_EQ(started.code(), absl::StatusCode::kPermissionDenied) << started;
    auto done = Shim("node-b").WaitContainer(p->ctr_id, [](const cri::ContainerStatus& s) {
      return s.state() == cri::CONTAINER_EXITED;
    });
    EXPECT_TRUE(done.ok());
    EXPECT_EQ(Ticks(p->log_path).size(), 0u) << "nothing may run from a refused restore";
    return std::string(started.message());
  };

  // uid 0 into a pod that runs as uid 1000.
  container_tweak_ = [&](cri::ContainerConfig* c) {
    confine(c);
    c->mutable_linux()->mutable_security_context()->mutable_run_as_user()->set_value(1000);
  };
  EXPECT_THAT(refused("creds-user", honest), HasSubstr("uid is 0"));

  // The honest image into a pod like its own: resumes.
  container_tweak_ = confine;
  auto b = RunPod("node-b", "creds-dst",
                  {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/resume", honest}});
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(WaitTicks(*b, 3));
  EXPECT_EQ(Ticks(b->log_path).front(), last + 1);

  // Its next checkpoint, rewritten to raise the job: refused, naming what it would raise.
  ASSERT_STOPPED(Shim("node-b").StopContainer(b->ctr_id, 30));
  list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 2u);
  const std::string raised = list[0].checkpoint_id();
  ASSERT_NE(raised, honest);
  const std::string raised_dir = absl::StrCat(world().store(), "/checkpoints/", raised);
  // First its hard RLIMIT_NOFILE, above the pod's (CRIU may set it: it has CAP_SYS_RESOURCE).
  ASSERT_TRUE(cryo::testing::RewriteCoreImages(raised_dir, [](::criu::core_entry* core) {
    if (!core->has_tc() || !core->tc().has_rlimits()) return;
    auto* rl = core->mutable_tc()->mutable_rlimits()->mutable_rlimits();
    if (rl->size() > RLIMIT_NOFILE) rl->Mutable(RLIMIT_NOFILE)->set_max(RLIM_INFINITY);
  }));
  EXPECT_THAT(refused("rlimit-raised", raised), HasSubstr("hard RLIMIT_NOFILE of unlimited"));
  ASSERT_TRUE(cryo::testing::RewriteImageCredentials(raised_dir, cryo::testing::RaiseToRoot));
  const std::string why = refused("creds-raised", raised);
  EXPECT_THAT(why, HasSubstr("cap_prm"));
  EXPECT_THAT(why, HasSubstr("CAP_SYS_ADMIN"));
}

// A multi-threaded job in a pod under the runtime's default seccomp profile (as the restricted
// Pod Security Standard requires): every thread shares the container's filter, which CRIU
// records on the main thread only (TSYNC). Checkpointed on stop, it resumes on node B, counting
// on, and every thread of the restored job is under the filter again (issue 40: this was
// refused at restore, the job lost). runc compiles the profile with its architecture checks in
// Go map order, so node B's pod gets other bytes about one time in two: the restore compares
// what the filters decide, not their bytes.
TEST_F(ContainerModeE2e, AMultiThreadedJobUnderTheDefaultSeccompProfileResumesOnAnotherNode) {
  container_tweak_ = [](cri::ContainerConfig* c) {
    c->mutable_linux()->mutable_security_context()->mutable_seccomp()->set_profile_type(
        cri::SecurityProfile::RuntimeDefault);
    // The busybox image has no libc: the job comes in as a static binary, read-only.
    cri::Mount* m = c->add_mounts();
    m->set_container_path("/opt/cryo/cryo-testload");
    m->set_host_path(CRYO_TESTLOAD_STATIC);
    m->set_readonly(true);
  };
  const std::vector<std::string> job = {
      "/opt/cryo/cryo-testload", "--status", "/tmp/status", "--threads", "3", "--mem-mib", "8",
      "--interval-ms",           "100",      "--ticks"};
  // Each thread of the job's processes (the main one, with four threads, and its child) and
  // its seccomp mode, as the pod sees them.
  auto modes = [&](const std::string& node, const std::string& ctr) -> std::vector<std::string> {
    auto r = Exec(node, ctr,
                  "for p in $(pidof cryo-testload); do for t in /proc/$p/task/*; do "
                  "echo \"$t $(grep '^Seccomp:' $t/status | cut -f2)\"; done; done");
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    return absl::StrSplit(absl::StripAsciiWhitespace(r->stdout()), '\n', absl::SkipEmpty());
  };
  auto a = RunPod("node-a", "seccomp-1", {{"cryo.dev/checkpoint-on-stop", "true"}}, job);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitTicks(*a, 5)) << TailOf(a->log_path);
  std::vector<std::string> before = modes("node-a", a->ctr_id);
  ASSERT_EQ(before.size(), 5u) << absl::StrJoin(before, "; ");
  for (const auto& t : before) EXPECT_TRUE(absl::EndsWith(t, " 2")) << "not filtered: " << t;

  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u) << "the stop did not leave a checkpoint";
  auto stopped = ExitedStatus("node-a", a->ctr_id);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->exit_code(), 75) << "stopped after its checkpoint";
  const int last = Ticks(a->log_path).back();

  auto b = RunPod("node-b", "seccomp-2",
                  {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/resume", "auto"}}, job);
  ASSERT_TRUE(b.ok()) << b.status();
  auto running = Shim("node-b").ContainerStatus(b->ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->annotations().at("cryo.dev/resume-from"), list[0].checkpoint_id());
  ASSERT_TRUE(WaitTicks(*b, 3)) << TailOf(b->log_path) << "\nnode B's cryod:\n"
                                << TailOf(world().cryod("node-b").log());
  std::vector<int> ticks = Ticks(b->log_path);
  EXPECT_EQ(ticks.front(), last + 1) << "the counter did not go on from the checkpoint";
  std::vector<std::string> after = modes("node-b", b->ctr_id);
  ASSERT_EQ(after.size(), 5u) << absl::StrJoin(after, "; ");
  for (const auto& t : after) EXPECT_TRUE(absl::EndsWith(t, " 2")) << "not filtered: " << t;
}

// A checkpoint belongs to its pod's namespace (issue 34). A pod of another namespace that names
// it fails its creation, saying whose it is; one that sets the same workload key gets a key of
// its own namespace: it starts fresh and its checkpoints never become the first one's newest.
TEST_F(ContainerModeE2e, ACheckpointBelongsToItsNamespace) {
  const std::string key = "cryo-e2e.shared-key.counter";
  auto a = RunPod("node-a", "ns-a",
                  {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/workload", "shared-key"}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitTicks(*a, 3));
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  auto list = Checkpoints(key);
  ASSERT_EQ(list.size(), 1u) << "no checkpoint of the key in namespace cryo-e2e";
  const std::string theirs = list[0].checkpoint_id();

  namespace_ = "team-b";
  auto named = RunPod("node-b", "ns-b1", {{"cryo.dev/resume", theirs}});
  ASSERT_FALSE(named.ok()) << "a pod of team-b resumed cryo-e2e's checkpoint";
  EXPECT_EQ(named.status().code(), absl::StatusCode::kPermissionDenied) << named.status();
  EXPECT_THAT(std::string(named.status().message()), HasSubstr("belongs to namespace cryo-e2e"));

  auto same_key = RunPod("node-b", "ns-b2",
                         {{"cryo.dev/checkpoint-on-stop", "true"},
                          {"cryo.dev/resume", "auto"},
                          {"cryo.dev/workload", "cryo-e2e.shared-key"}});
  ASSERT_TRUE(same_key.ok()) << same_key.status();
  auto st = Shim("node-b").ContainerStatus(same_key->ctr_id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->annotations().count("cryo.dev/resume-from"), 0u) << "it resumed another's job";
  ASSERT_TRUE(WaitTicks(*same_key, 3));
  EXPECT_EQ(Ticks(same_key->log_path).front(), 1) << "it did not start fresh";
  ASSERT_STOPPED(Shim("node-b").StopContainer(same_key->ctr_id, 30));
  EXPECT_EQ(Checkpoints("team-b.cryo-e2e.shared-key.counter").size(), 1u);
  list = Checkpoints(key);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].checkpoint_id(), theirs) << "team-b's checkpoint became cryo-e2e's newest";
}

TEST_F(ContainerModeE2e, PodsThatDoNotOptInAreLeftAlone) {
  auto p = RunPod("node-a", "plain", {});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitTicks(*p, 3));
  auto resp = RuntimeStatus("node-a", p->ctr_id);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->status().annotations().count("cryo.dev/managed"), 0u);
  nlohmann::json info = nlohmann::json::parse(resp->info().at("info"));
  EXPECT_EQ(info["runtimeSpec"]["process"]["args"], nlohmann::json(kCounter))
      << "the command of a pod that did not opt in was changed";
  // Its stop is a plain stop: no checkpoint.
  ASSERT_STOPPED(Shim("node-a").StopContainer(p->ctr_id, 10));
  EXPECT_TRUE(Checkpoints(kWorkload).empty());
}

// The chart's node setup on a node whose kubelet talks to containerd, as a stock node's does:
// the configure-kubelet init container's `convert` points kubelet's config at the shim; kubelet,
// restarted, reaches containerd through it (the pod that ran before is still there, same id); a
// pod opted in afterwards is checkpointed at its stop; the uninstall's `restore` puts the config
// back byte for byte and kubelet talks to containerd again. kubelet is the e2e's CRI client: at
// each restart (the script's `systemctl restart kubelet`, through a stand-in for nsenter that
// records it) it reconnects to the endpoint the config names. The real kubelet's side of this
// was checked by hand with ../shared/k8s/ (docs/install.md, step 4).
TEST_F(ContainerModeE2e, TheInstallerConvertsAStockNodeAndUninstallPutsItBack) {
  const std::string host = world().dir() + "/node-setup";
  const std::string config = host + "/var/lib/kubelet/config.yaml";
  const std::string state = host + "/opt/cryo/state/kubelet-endpoint";
  const std::string restarts = host + "/restarts";
  ASSERT_TRUE(fs::MakeDirs(host + "/var/lib/kubelet").ok());
  ASSERT_TRUE(fs::MakeDirs(host + "/proc").ok());  // no kubelet process with flags of its own
  const std::string containerd = absl::StrCat("unix://", world().NodeSocket("node-a"));
  const std::string shim = absl::StrCat("unix://", world().ShimSocket("node-a"));
  const std::string original = absl::StrCat(
      "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
      "cgroupDriver: cgroupfs\ncontainerRuntimeEndpoint: ",
      containerd, "\nserializeImagePulls: false\n");
  ASSERT_TRUE(fs::WriteFileAtomic(config, original, 0644).ok());
  ASSERT_TRUE(fs::WriteFileAtomic(host + "/nsenter",
                                  absl::StrCat("#!/bin/sh\necho \"$*\" >>", restarts, "\n"), 0755)
                  .ok());
  auto kubelet_endpoint = [&] {
    for (absl::string_view line : absl::StrSplit(Slurp(config), '\n')) {
      if (absl::ConsumePrefix(&line, "containerRuntimeEndpoint: ")) return std::string(line);
    }
    return std::string();
  };
  // kubelet (re)starts: its CRI client goes to the config's endpoint.
  auto restart_kubelet = [&] {
    const std::string endpoint = kubelet_endpoint();
    clients_["node-a"] =
        std::make_unique<CriClient>(std::string(absl::StripPrefix(endpoint, "unix://")));
  };
  auto configure_kubelet = [&](const std::string& mode) {
    auto r =
        RunCapture({"env", "HOST_ROOT=", "KUBELET_CONFIG=" + config,
                    "KUBELET_FLAG_FILES=" + host + "/etc/default/kubelet",
                    "PROC_ROOT=" + host + "/proc", "SHIM_SOCKET=" + world().ShimSocket("node-a"),
                    "STATE_FILE=" + state, "NSENTER=" + host + "/nsenter",
                    "TERMINATION_LOG=" + host + "/termination-log", "UNCHANGED_EXIT=3", "bash",
                    absl::StrCat(CRYO_HOST_SCRIPTS_DIR, "/kubelet-endpoint.sh"), mode});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r.ok() && r->exit.exited && r->exit.code == 0)
        << mode << ": " << (r.ok() ? r->output : "");
    return r.ok() ? r->output : std::string();
  };
  auto restart_count = [&] {
    if (!fs::Exists(restarts)) return size_t{0};
    std::vector<std::string> lines = absl::StrSplit(Slurp(restarts), '\n', absl::SkipEmpty());
    return lines.size();
  };

  restart_kubelet();
  ASSERT_EQ(kubelet_endpoint(), containerd);
  auto before = RunPod("node-a", "before-setup", {});
  ASSERT_TRUE(before.ok()) << before.status();

  // Install: convert.
  EXPECT_THAT(configure_kubelet("convert"), HasSubstr(absl::StrCat(containerd, " -> ", shim)));
  EXPECT_EQ(kubelet_endpoint(), shim);
  EXPECT_EQ(Slurp(state), containerd + "\n") << "the replaced endpoint is kept for the restore";
  EXPECT_EQ(restart_count(), 1u);
  EXPECT_EQ(Slurp(restarts), "systemctl restart kubelet\n");
  restart_kubelet();
  EXPECT_TRUE(Running("node-a", before->ctr_id))
      << "kubelet finds the running pod through the shim";
  // Every pod start runs it again: nothing changes, no restart.
  EXPECT_THAT(configure_kubelet("convert"), HasSubstr("already uses the shim"));
  EXPECT_EQ(restart_count(), 1u);

  // A pod opted in after the conversion: cryo-init wraps it and its stop is checkpointed.
  auto opted = RunPod("node-a", "after-setup", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(opted.ok()) << opted.status();
  ASSERT_TRUE(WaitTicks(*opted, 3));
  auto managed = RuntimeStatus("node-a", opted->ctr_id);
  ASSERT_TRUE(managed.ok()) << managed.status();
  EXPECT_EQ(managed->status().annotations().count("cryo.dev/managed"), 1u);
  ASSERT_STOPPED(Shim("node-a").StopContainer(opted->ctr_id, 30));
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u) << "the stop through kubelet's new endpoint left no checkpoint";
  EXPECT_EQ(list[0].labels().at("cryo.dev/reason"), "stop");

  // Uninstall: restore. The config is as it was, byte for byte; kubelet is on containerd again.
  EXPECT_THAT(configure_kubelet("restore"), HasSubstr(absl::StrCat(shim, " -> ", containerd)));
  EXPECT_EQ(Slurp(config), original);
  EXPECT_FALSE(fs::Exists(state));
  EXPECT_EQ(restart_count(), 2u);
  restart_kubelet();
  EXPECT_TRUE(Running("node-a", before->ctr_id)) << "kubelet finds the pod on containerd again";
  EXPECT_THAT(configure_kubelet("restore"), HasSubstr("nothing to restore"));
  EXPECT_EQ(restart_count(), 2u);
  clients_.erase("node-a");  // the other tests' kubelet talks to the shim
}

TEST_F(ContainerModeE2e, APodThatAsksForTheGpuFastPathGetsTheLibraryPreloaded) {
#ifndef CRYO_FASTPATH_LIBRARY
  GTEST_SKIP() << "the fast-path library is not built here (no cuda.h)";
#else
  auto p = RunPod("node-a", "fastpath",
                  {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/gpu-fast-path", "true"}});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitTicks(*p, 3));
  auto status = Shim("node-a").ContainerStatus(p->ctr_id);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->annotations().at("cryo.dev/gpu-fast-path"), "true");
  // cryo-init (PID 1 of the container) started the job with the library first in its preload,
  // mounted where the preload says.
  auto resp = RuntimeStatus("node-a", p->ctr_id);
  ASSERT_TRUE(resp.ok()) << resp.status();
  const int init = nlohmann::json::parse(resp->info().at("info"))["pid"].get<int>();
  std::ifstream kids(absl::StrCat("/proc/", init, "/task/", init, "/children"));
  int job = 0;
  kids >> job;
  ASSERT_GT(job, 0) << "cryo-init has no child";
  std::ifstream envf(absl::StrCat("/proc/", job, "/environ"));
  std::string environ((std::istreambuf_iterator<char>(envf)), std::istreambuf_iterator<char>());
  std::vector<std::string> vars = absl::StrSplit(environ, '\0');
  EXPECT_THAT(vars, Contains("LD_PRELOAD=/.cryo/libcryo_gpu_fastpath.so"));
  EXPECT_THAT(vars, Not(Contains(::testing::StartsWith("CRYO_INIT_PRELOAD="))));
  struct stat in_container, built;
  ASSERT_EQ(::stat(absl::StrCat("/proc/", job, "/root/.cryo/libcryo_gpu_fastpath.so").c_str(),
                   &in_container),
            0);
  ASSERT_EQ(::stat(CRYO_FASTPATH_LIBRARY, &built), 0);
  EXPECT_EQ(in_container.st_size, built.st_size);
  // A value that is neither true nor false is refused at creation, naming the annotation.
  auto bad = RunPod("node-a", "fastpath-bad",
                    {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/gpu-fast-path", "yes"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cryo.dev/gpu-fast-path"));
#endif
}

#if defined(CRYO_FASTPATH_LIBRARY) && defined(CRYO_FAKEGPU_BIN)
// GPU pods over the fake CUDA driver (issue 36, the flows CI can run). The job, its libraries
// and the fake driver come in read-only from the host (the busybox image has no libc); the shim
// preloads the fast-path library (cryo.dev/gpu-fast-path).
class FakeGpuPodE2e : public ContainerModeE2e {
 protected:
  void SetUp() override {
    ContainerModeE2e::SetUp();
    container_tweak_ = [](cri::ContainerConfig* c) {
      MountHostDirs(c, {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                        CRYO_FAKE_CUDA_DIR, CRYO_FAKEGPU_DIR});
      cri::KeyValue* env = c->add_envs();
      env->set_key("LD_LIBRARY_PATH");
      env->set_value(CRYO_FAKE_CUDA_DIR);
    };
  }

  // 48 MiB of "device" memory in 8 MiB cudaMalloc chunks and 16 MiB mapped as PyTorch's
  // expandable segments map it; every step a kernel checks one chunk and rewrites it.
  static std::vector<std::string> Job(std::vector<std::string> extra = {}) {
    std::vector<std::string> job = {
        CRYO_FAKEGPU_BIN, "--status", "/tmp/status",   "--mib", "48", "--chunk-mib", "8",
        "--vmm-mib",      "16",       "--interval-ms", "50"};
    job.insert(job.end(), extra.begin(), extra.end());
    return job;
  }

  // The status's `what` (its kernels' steps; "peer_steps": the importer's count, which reaches
  // the status only through the memory the two share) went past `n`.
  bool RunsPast(const std::string& node, const std::string& ctr, uint64_t n,
                const char* what = "main") {
    return StatusPast(node, ctr, what, n, absl::Seconds(60));
  }

  // Every word its kernels checked was as they left it.
  void ExpectIntact(const std::string& node, const std::string& ctr) {
    const nlohmann::json st = Status(node, ctr);
    EXPECT_EQ(U(st, "mismatches"), 0u) << st.dump();
    EXPECT_EQ(U(st, "peer_mismatches"), 0u) << st.dump();
    EXPECT_EQ(st["verified"], true) << st.dump();
    EXPECT_EQ(st["api"], "ok") << st.dump();
  }

  // Stops the pod on node A (a 30 s grace): it must leave a checkpoint and end with the
  // checkpointed exit code.
  void StopWithCheckpoint(const Pod& a, size_t checkpoints) {
    ASSERT_TRUE(Shim("node-a").StopContainer(a.ctr_id, 30).ok());
    auto stopped = ExitedStatus("node-a", a.ctr_id);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    EXPECT_EQ(stopped->exit_code(), 75) << "shim log:\n"
                                        << TailOf(world().shim("node-a").log_file());
    ASSERT_EQ(Checkpoints(kWorkload).size(), checkpoints) << "cryod log:\n"
                                                          << TailOf(world().cryod("node-a").log());
  }
};

// Checkpointed at its stop, the pod resumes in its replacement on node B, its kernels finding
// every word of its memory as they left it.
TEST_F(FakeGpuPodE2e, AGpuPodResumesOnAnotherNodeWithEveryWordOfItsMemory) {
  auto a = RunPod("node-a", "fakegpu-1", GpuOptIn(true, false), Job());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(RunsPast("node-a", a->ctr_id, 20)) << Status("node-a", a->ctr_id).dump() << "\n"
                                                 << TailOf(a->log_path);
  StopWithCheckpoint(*a, 1);
  EXPECT_EQ(Checkpoints(kWorkload)[0].gpu_fastpath_bytes(), 64 * (uint64_t{1} << 20))
      << "the 48 MiB of chunks and the 16 MiB mapped, out through the library";

  auto b = RunPod("node-b", "fakegpu-2", GpuOptIn(true, true), Job());
  ASSERT_TRUE(b.ok()) << b.status() << "\nnode B's cryod:\n"
                      << TailOf(world().cryod("node-b").log());
  const uint64_t from = U(Status("node-b", b->ctr_id), "main");
  EXPECT_GT(from, 20u) << "the restored job did not go on from its checkpoint";
  ASSERT_TRUE(RunsPast("node-b", b->ctr_id, from + 20))
      << Status("node-b", b->ctr_id).dump() << "\n"
      << TailOf(b->log_path);
  ExpectIntact("node-b", b->ctr_id);
}

// kubelet's CheckpointContainer of a GPU pod becomes a checkpoint image (its GPU data inside,
// whole), imported into node B's containerd; a pod on B whose image it is resumes the job with
// every word of its memory, with no checkpoint in the store.
TEST_F(FakeGpuPodE2e, AGpuPodsCheckpointImageResumesOnAnotherNodeWithEveryWordOfItsMemory) {
  auto a = RunPod("node-a", "fakegpu-img-a", GpuOptIn(true, false), Job());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(RunsPast("node-a", a->ctr_id, 20)) << TailOf(a->log_path);
  const std::string archive = absl::StrCat(world().dir(), "/kubelet/checkpoints/fakegpu-img.tar");
  grpc::Status st = KubeletCheckpoint("node-a", a->ctr_id, archive);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << TailOf(world().cryod("node-a").log());
  auto names = container::ListArchive(archive);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, Contains(::testing::StartsWith("cryo/gpu/")))
      << "the archive lacks the GPU data";
  const uint64_t at_checkpoint = U(Status("node-a", a->ctr_id), "main");
  (void)Shim("node-a").StopContainer(a->ctr_id, 0);
  const std::string image = "localhost/cryo-e2e/fakegpu-checkpoint:1";
  absl::Status built = BuildAndImport(archive, image, "node-b");
  ASSERT_TRUE(built.ok()) << built;
  DeleteAllCheckpoints();

  auto b = RunImagePod("node-b", "fakegpu-img-b", image, {{"cryo.dev/gpu-fast-path", "true"}});
  ASSERT_TRUE(b.ok()) << b.status() << "\nnode B's cryod:\n"
                      << TailOf(world().cryod("node-b").log());
  const uint64_t from = U(Status("node-b", b->ctr_id), "main");
  EXPECT_GT(from, 20u) << "the restored job did not go on from its checkpoint";
  EXPECT_LE(from, at_checkpoint + 1) << "resumed from later than the archive";
  ASSERT_TRUE(RunsPast("node-b", b->ctr_id, from + 20)) << TailOf(b->log_path);
  ExpectIntact("node-b", b->ctr_id);
}

// Two processes of a GPU pod sharing 8 MiB as PyTorch shares a CUDA tensor (legacy CUDA IPC): a
// leave-running checkpoint through kubelet's CheckpointContainer, after which both run on still
// sharing; then a stop, and the replacement on node B, where the importer's count still reaches
// the exporter through the memory they share and no word of it is wrong.
TEST_F(FakeGpuPodE2e, TwoProcessesSharingGpuMemoryRunOnAfterACheckpointAndResumeOnAnotherNode) {
  const std::vector<std::string> job = Job({"--share-mib", "8", "--share-ipc"});
  auto a = RunPod("node-a", "fakegpu-share-1", GpuOptIn(true, false), job);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(RunsPast("node-a", a->ctr_id, 10, "peer_steps"))
      << Status("node-a", a->ctr_id).dump() << "\n"
      << TailOf(a->log_path);

  grpc::Status st = KubeletCheckpoint(
      "node-a", a->ctr_id, absl::StrCat(world().dir(), "/kubelet/checkpoints/fakegpu-share.tar"));
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << TailOf(world().cryod("node-a").log());
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].leave_running());
  EXPECT_EQ(list[0].gpu_fastpath_bytes(), 72 * (uint64_t{1} << 20))
      << "the exporter's 64 MiB and the shared 8";
  const uint64_t peer = U(Status("node-a", a->ctr_id), "peer_steps");
  ASSERT_TRUE(RunsPast("node-a", a->ctr_id, peer + 10, "peer_steps"))
      << "the importer does not run on: " << Status("node-a", a->ctr_id).dump();
  ExpectIntact("node-a", a->ctr_id);

  StopWithCheckpoint(*a, 2);
  auto b = RunPod("node-b", "fakegpu-share-2", GpuOptIn(true, true), job);
  ASSERT_TRUE(b.ok()) << b.status() << "\nnode B's cryod:\n"
                      << TailOf(world().cryod("node-b").log());
  const uint64_t from = U(Status("node-b", b->ctr_id), "peer_steps");
  EXPECT_GT(from, peer) << "the importer did not go on from the checkpoint";
  ASSERT_TRUE(RunsPast("node-b", b->ctr_id, from + 10, "peer_steps"))
      << Status("node-b", b->ctr_id).dump() << "\n"
      << TailOf(b->log_path);
  ExpectIntact("node-b", b->ctr_id);
}
#else
TEST(FakeGpuPodE2e, Skipped) {
  GTEST_SKIP() << "the fast-path library or the fake CUDA driver is not built here (no cuda.h)";
}
#endif

#if defined(CRYO_GPU_TESTLOAD)
// GPU pods on real NVIDIA GPUs (issue 36): kubelet's calls, in kubelet's order, for pods given
// GPUs as the NVIDIA device plugin and container toolkit give them (the GPU's device files, the
// driver's libraries mounted, NVIDIA_VISIBLE_DEVICES). The GPU suite runs them on a GPU machine
// (e2e/gpu/pods.sh: CRYO_GPU_PARTS=pods); elsewhere (CI) they skip, saying so.
class GpuPodE2e : public ContainerModeE2e {
 protected:
  struct Gpu {
    int minor = -1;
    std::string uuid;
  };

  // The node's GPUs, from the kernel module's per-GPU information, in minor order.
  static std::vector<Gpu> NodeGpus() {
    std::map<int, Gpu> by_minor;
    const std::string dir = "/proc/driver/nvidia/gpus";
    std::error_code ec;
    for (const auto& bus : std::filesystem::directory_iterator(dir, ec)) {
      Gpu g;
      const std::string info = Slurp(bus.path().string() + "/information");
      for (absl::string_view line : absl::StrSplit(info, '\n')) {
        std::vector<absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits(':', 1));
        if (kv.size() != 2) continue;
        absl::string_view k = absl::StripAsciiWhitespace(kv[0]);
        absl::string_view v = absl::StripAsciiWhitespace(kv[1]);
        if (k == "GPU UUID") g.uuid = std::string(v);
        if (k == "Device Minor") (void)absl::SimpleAtoi(v, &g.minor);
      }
      if (g.minor >= 0 && !g.uuid.empty()) by_minor[g.minor] = g;
    }
    std::vector<Gpu> out;
    for (const auto& [m, g] : by_minor) out.push_back(g);
    return out;
  }

  static std::string NoGpuReason() {
    if (::access("/dev/nvidiactl", F_OK) != 0) return "no /dev/nvidiactl";
    if (NodeGpus().empty()) return "no GPU in /proc/driver/nvidia/gpus";
    if (DriverLibDir().empty()) return "no libcuda.so.1";
    if (CdiSpec().is_null())
      return "no CDI spec: pods.sh writes one (cdi.sh) into CRYO_GPU_POD_CDI_SPEC";
    return "";
  }

  // Where the driver's libcuda.so.1 is: the directory the toolkit would mount into pods.
  static std::string DriverLibDir() {
    for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64", "/usr/lib64",
                          "/usr/local/nvidia/lib", "/lib/x86_64-linux-gnu"}) {
      if (::access(absl::StrCat(d, "/libcuda.so.1").c_str(), F_OK) == 0) return d;
    }
    return "";
  }

  static void SetUpTestSuite() {
    if (NoGpuReason().empty()) ContainerdE2e::SetUpTestSuite();
  }

  void SetUp() override {
    if (std::string why = NoGpuReason(); !why.empty()) {
      GTEST_SKIP() << "no NVIDIA GPU here (" << why
                   << "): the GPU suite runs these on a GPU machine (CRYO_GPU_PARTS=pods)";
    }
    ContainerModeE2e::SetUp();
    gpus_ = NodeGpus();
  }

  void TearDown() override {
    if (IsSkipped()) return;
    ContainerModeE2e::TearDown();
    for (const std::string& m : shm_mounts_) ::umount2(m.c_str(), MNT_DETACH);
  }

  // The GPU a node's pods get: node A the first, node B the second when there is one.
  const Gpu& GpuOf(const std::string& node) {
    return gpus_[node == "node-b" && gpus_.size() > 1 ? 1 : 0];
  }

  // The machine's CDI spec for its NVIDIA GPUs (e2e/gpu/cdi.sh), null without one.
  static nlohmann::json CdiSpec() {
    const char* path = getenv("CRYO_GPU_POD_CDI_SPEC");
    if (path == nullptr) return nullptr;
    nlohmann::json spec = nlohmann::json::parse(Slurp(path), nullptr, false);
    return spec.is_object() && spec.value("kind", "") == "nvidia.com/gpu" ? spec : nullptr;
  }

  // CDI's container edits applied to a CRI container config, as containerd >= 1.7 applies the
  // edits of the CDI devices kubelet names: device nodes, mounts, environment.
  static void ApplyCdiEdits(const nlohmann::json& edits, cri::ContainerConfig* c) {
    for (const auto& n : edits.value("deviceNodes", nlohmann::json::array())) {
      const std::string path = n.value("path", "");
      cri::Device* d = c->add_devices();
      d->set_container_path(path);
      d->set_host_path(n.value("hostPath", path));
      d->set_permissions(n.value("permissions", "rwm"));
    }
    for (const auto& m : edits.value("mounts", nlohmann::json::array())) {
      cri::Mount* mount = c->add_mounts();
      mount->set_container_path(m.value("containerPath", ""));
      mount->set_host_path(m.value("hostPath", ""));
      const auto opts = m.value("options", std::vector<std::string>{});
      mount->set_readonly(std::find(opts.begin(), opts.end(), "ro") != opts.end());
    }
    for (const auto& e : edits.value("env", std::vector<std::string>{})) {
      std::vector<std::string> kv = absl::StrSplit(e, absl::MaxSplits('=', 1));
      cri::KeyValue* env = c->add_envs();
      env->set_key(kv[0]);
      env->set_value(kv.size() > 1 ? kv[1] : "");
    }
  }

  // The next pod gets `gpus` as the device plugin and toolkit give them: the edits of the
  // machine's CDI spec for those GPUs (nvidia.com/gpu=<uuid>: their device files; for any GPU
  // the control devices and the driver's files), NVIDIA_VISIBLE_DEVICES as the device plugin
  // sets it, and the host's libc (the busybox image has none), read-only.
  void GiveGpus(std::vector<Gpu> gpus) {
    container_tweak_ = [gpus, nccl_ifname = nccl_ifname_](cri::ContainerConfig* c) {
      const nlohmann::json spec = CdiSpec();
      if (!gpus.empty()) {
        for (const Gpu& g : gpus) {
          for (const auto& d : spec["devices"]) {
            if (d.value("name", "") == g.uuid) ApplyCdiEdits(d["containerEdits"], c);
          }
        }
        ApplyCdiEdits(spec["containerEdits"], c);
      } else {
        // A pod given no GPU still sees the control devices (a toolkit with
        // NVIDIA_VISIBLE_DEVICES=void gives those), never a GPU's.
        nlohmann::json control = spec["containerEdits"];
        control.erase("mounts");
        ApplyCdiEdits(control, c);
      }
      std::set<std::string> dirs = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                                    DriverLibDir(), Dirname(Testload())};
      // The machine's PyTorch, as a read-only hostPath volume (pods.sh names its directories).
      if (const char* more = getenv("CRYO_GPU_POD_MOUNTS"); more != nullptr) {
        for (absl::string_view d : absl::StrSplit(more, ':', absl::SkipEmpty())) dirs.emplace(d);
      }
      MountHostDirs(c, dirs);
      std::vector<std::string> uuids;
      for (const Gpu& g : gpus) uuids.push_back(g.uuid);
      for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
               {"NVIDIA_VISIBLE_DEVICES", uuids.empty() ? "void" : absl::StrJoin(uuids, ",")},
               {"LD_LIBRARY_PATH", DriverLibDir()},
               // The machine's GPUs are shared: NVLink multicast stays off. NCCL talks over
               // loopback and not InfiniBand, as the suite's process-mode DDP runs do.
               {"NCCL_NVLS_ENABLE", "0"},
               {"NCCL_IB_DISABLE", "1"},
               {"NCCL_SOCKET_IFNAME", nccl_ifname}}) {
        cri::KeyValue* e = c->add_envs();
        e->set_key(k);
        e->set_value(v);
      }
    };
  }

  // GiveGpus, and a tmpfs of its own at /dev/shm (NCCL wants more than the runtime's 64 MiB;
  // users mount a memory emptyDir there).
  void GiveGpusAndShm(const std::vector<Gpu>& gpus, const std::string& shm) {
    GiveGpus(gpus);
    std::filesystem::create_directories(shm);
    ASSERT_EQ(::mount("tmpfs", shm.c_str(), "tmpfs", 0, "size=8g,mode=1777"), 0)
        << shm << ": " << strerror(errno);
    shm_mounts_.push_back(shm);
    auto gpu_tweak = container_tweak_;
    container_tweak_ = [gpu_tweak, shm](cri::ContainerConfig* c) {
      gpu_tweak(c);
      cri::Mount* m = c->add_mounts();
      m->set_container_path("/dev/shm");
      m->set_host_path(shm);
    };
  }

  // The lines of a pod's log that say what went wrong (a training job's traceback ends in its
  // launcher's summary, which a tail shows instead), at most `most` of them.
  static std::string TroubleIn(const std::string& path, size_t most = 80) {
    std::vector<std::string> hits;
    for (absl::string_view l : absl::StrSplit(Slurp(path), '\n')) {
      const std::string low = absl::AsciiStrToLower(l);
      for (const char* w : {"error", "warn", "exception", "abort", "nccl", "timeout", "refused"}) {
        if (absl::StrContains(low, w)) {
          hits.emplace_back(l.substr(0, 400));
          break;
        }
      }
    }
    if (hits.size() > most) hits.erase(hits.begin() + most / 2, hits.end() - most / 2);
    return absl::StrJoin(hits, "\n");
  }

  // The two-node torchrun DDP job of issue 37 (pods.sh makes its reference without cryo): two
  // pods on the pod network, one per node, one rank each; the pods' hostnames tell NCCL they are
  // two hosts, so it talks over its socket transport between them, as between machines.
  struct TwoNodeJob {
    std::string script, ref;
    int steps = 0;
    std::string env, args;  // CRYO_GPU_POD_JOB_ENV ("K=V ...") and _ARGS ("--backend gloo")
    bool fastpath = true;   // CRYO_GPU_POD_JOB_FASTPATH=0: the driver's path
    int step_ms = 20;       // pacing only: the losses do not depend on it
  };
  // The job as this machine's reference has it; nullopt with `*skip` saying why not.
  std::optional<TwoNodeJob> TwoNodeJobHere(std::string* skip) {
    const char* script = getenv("CRYO_GPU_POD_JOB_SCRIPT");
    const char* ref_path = getenv("CRYO_GPU_POD_JOB_REF");
    if (script == nullptr || ref_path == nullptr || Python().empty()) {
      *skip =
          "no two-node reference: pods.sh sets CRYO_GPU_POD_JOB_SCRIPT and "
          "CRYO_GPU_POD_JOB_REF (a run without cryo) on a machine with PyTorch";
      return std::nullopt;
    }
    if (!std::filesystem::exists(world().dir() + "/node-a/cni/conf/10-cryo-e2e.conflist")) {
      *skip =
          "the nodes have no pod network (no CNI plugins: bundle.sh carries Debian's "
          "containernetworking-plugins)";
      return std::nullopt;
    }
    TwoNodeJob j;
    j.script = script;
    j.ref = Slurp(ref_path);
    j.steps = static_cast<int>(std::count(j.ref.begin(), j.ref.end(), '\n')) - 1;
    if (const char* e = getenv("CRYO_GPU_POD_JOB_ENV"); e != nullptr) j.env = e;
    if (const char* a = getenv("CRYO_GPU_POD_JOB_ARGS"); a != nullptr) j.args = a;
    const char* fp = getenv("CRYO_GPU_POD_JOB_FASTPATH");
    j.fastpath = fp == nullptr || std::string(fp) != "0";
    pod_network_ = true;
    nccl_ifname_ = "eth0";
    return j;
  }
  // Node `node_rank`'s launcher; it writes its exit status to /tmp/exit and the pod stays.
  static std::vector<std::string> TwoNodeCmd(const TwoNodeJob& j, int node_rank,
                                             const std::string& master) {
    return {
        "sh", "-c",
        absl::StrCat("NCCL_DEBUG=WARN ", j.env, " ", Python(),
                     " -m torch.distributed.run --nnodes=2 --node-rank=", node_rank,
                     " --nproc-per-node=1 --master-addr=", master, " --master-port=29561 ",
                     j.script, " --same-gpu ", j.args, " --steps ", j.steps, " --step-ms ",
                     j.step_ms, " --out /tmp/losses.txt; echo $? >/tmp/exit; exec sleep 100000")};
  }
  static std::map<std::string, std::string> TwoNodeAnnotations(const TwoNodeJob& j,
                                                               const std::string& member,
                                                               bool resume) {
    std::map<std::string, std::string> a = GpuOptIn(j.fastpath, resume);
    a["cryo.dev/job"] = "ddp2";
    a["cryo.dev/job-size"] = "2";
    a["cryo.dev/job-member"] = member;
    a["cryo.dev/criu-tcp-established"] = "true";
    return a;
  }
  // Rank 0's losses so far ("done" last once it ended).
  std::string LossesIn(const std::string& node, const std::string& ctr) {
    auto r = Exec(node, ctr, "cat /tmp/losses.txt 2>/dev/null");
    return r.ok() ? r->stdout() : std::string();
  }
  static int64_t Lines(const std::string& t) { return std::count(t.begin(), t.end(), '\n'); }
  // Whether the pod's launcher has ended (or the pod has).
  bool LauncherEnded(const std::string& node, const std::string& ctr) {
    auto r = Exec(node, ctr, "cat /tmp/exit 2>/dev/null");
    return !Running(node, ctr) || (r.ok() && !r->stdout().empty());
  }
  // Until both launchers end, and well: a job that hangs at its end (a launcher or NCCL dialling
  // an address of the old pods) never completes its Job. Where it hangs, if it does: each
  // pod's TCP table (a SYN_SENT to an old address) and its threads' syscalls. How long after the
  // first the second ended.
  double ExpectBothLaunchersEndWell(const std::vector<std::pair<std::string, std::string>>& pods,
                                    const std::string& old_ip) {
    auto any = [&] {
      for (const auto& [node, ctr] : pods) {
        if (LauncherEnded(node, ctr)) return true;
      }
      return false;
    };
    WaitUntil(any, absl::Minutes(5));
    const absl::Time t_first = absl::Now();
    const bool all = WaitUntil(
        [&] {
          for (const auto& [node, ctr] : pods) {
            if (!LauncherEnded(node, ctr)) return false;
          }
          return true;
        },
        absl::Minutes(2));
    for (const auto& [node, ctr] : pods) {
      auto ex = Exec(node, ctr, "cat /tmp/exit 2>/dev/null");
      EXPECT_EQ(ex.ok() ? std::string(absl::StripAsciiWhitespace(ex->stdout())) : "", "0")
          << node << "'s launcher did not end with 0 (old pod " << old_ip << ")";
      if (all) continue;
      auto where = Exec(node, ctr,
                        "cat /proc/net/tcp; for t in /proc/[0-9]*/task/*; do echo \"$t "
                        "$(cat $t/comm) $(cut -d' ' -f1-3 $t/syscall)\"; done 2>/dev/null");
      ADD_FAILURE() << node << ": the job has not ended 2 min after its first launcher did:\n"
                    << (where.ok() ? where->stdout() : where.status().ToString());
    }
    return Secs(t_first);
  }
  // Rank 0's losses (`*got`) once the job ended: all of them ("done" last), and the reference's.
  void ExpectReferenceLosses(const TwoNodeJob& j, const std::string& node0, const Pod& rank0,
                             const Pod& rank1, std::string* got) {
    *got = LossesIn(node0, rank0.ctr_id);
    ASSERT_TRUE(absl::EndsWith(*got, "done\n")) << "rank 0:\n"
                                                << TroubleIn(rank0.log_path) << "\nrank 1:\n"
                                                << TroubleIn(rank1.log_path) << "\n"
                                                << TailOf(world().cryod(node0).log());
    EXPECT_EQ(*got, j.ref) << "losses differ from the run without cryo";
  }

  static std::string Dirname(const std::string& p) { return p.substr(0, p.rfind('/')); }

  // The test program where it really is: a bundle links the build's paths to its own copy, and
  // a link would not resolve inside the pod.
  static std::string Testload() {
    std::error_code ec;
    std::filesystem::path real = std::filesystem::canonical(CRYO_GPU_TESTLOAD, ec);
    return ec ? std::string(CRYO_GPU_TESTLOAD) : real.string();
  }

  static std::vector<std::string> Job(double gib) {
    return {Testload(), "--gib", absl::StrCat(gib), "--status", "/tmp/status", "--busy-us", "500"};
  }

  // Whether the job's steps went past `n`; false at once when its container no longer runs.
  bool StepsPast(const std::string& node, const std::string& ctr, uint64_t n,
                 absl::Duration timeout = absl::Minutes(3)) {
    return StatusPast(node, ctr, "steps", n, timeout);
  }

  // A full pass from now: every chunk verified once more, none wrong.
  void ExpectEveryWordIntact(const std::string& node, const std::string& ctr) {
    const nlohmann::json st = Status(node, ctr);
    ASSERT_TRUE(StepsPast(node, ctr, U(st, "steps") + U(st, "chunks") + 1))
        << "the job did not run on: " << Status(node, ctr).dump();
    const nlohmann::json after = Status(node, ctr);
    EXPECT_EQ(U(after, "mismatches"), 0u) << after.dump();
    EXPECT_EQ(after["verified"], true) << after.dump();
  }

  static void Report(const std::string& line) { std::cout << "[gpu-pods] " << line << std::endl; }

  // One pod's way from node A's GPU to node B's: a stop with a 30 s grace (the checkpoint),
  // the replacement created and started (the restore), the job's next step. Returns the
  // replacement.
  void PreemptAndResume(const std::string& name, bool fastpath, double gib) {
    GiveGpus({GpuOf("node-a")});
    auto a = RunPod("node-a", name + "-a", GpuOptIn(fastpath, false), Job(gib));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(StepsPast("node-a", a->ctr_id, 5)) << Status("node-a", a->ctr_id).dump() << "\n"
                                                   << TailOf(a->log_path);
    const uint64_t chunks = U(Status("node-a", a->ctr_id), "chunks");
    absl::Time t0 = absl::Now();
    ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
    const double stop_s = Secs(t0);
    auto stopped = ExitedStatus("node-a", a->ctr_id);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    ASSERT_EQ(stopped->exit_code(), 75) << TailOf(world().shim("node-a").log_file());
    auto list = Checkpoints(kWorkload);
    ASSERT_EQ(list.size(), 1u) << TailOf(world().cryod("node-a").log());
    EXPECT_EQ(list[0].gpu_fastpath_bytes() > 0, fastpath);

    GiveGpus({GpuOf("node-b")});
    absl::Time t1 = absl::Now();
    auto b = RunPod("node-b", name + "-b", GpuOptIn(fastpath, true), Job(gib));
    ASSERT_TRUE(b.ok()) << b.status() << "\n" << TailOf(world().cryod("node-b").log());
    const double restore_s = Secs(t1);
    const nlohmann::json first = Status("node-b", b->ctr_id);
    EXPECT_GT(U(first, "steps"), 5u)
        << "the job did not go on from its checkpoint: " << first.dump();
    ASSERT_TRUE(StepsPast("node-b", b->ctr_id, U(first, "steps")));
    const double step_s = Secs(t1);
    // The stop's checkpoint by cryod's stages, and the restore's from node B's cryod log.
    std::vector<std::string> stages;
    for (const auto& [k, v] : list[0].stage_ms()) stages.push_back(absl::StrCat(k, " ", v));
    std::sort(stages.begin(), stages.end());
    std::string restored;
    for (absl::string_view l : absl::StrSplit(Slurp(world().cryod("node-b").log()), '\n')) {
      if (absl::StrContains(l, absl::StrCat("restored checkpoint ", list[0].checkpoint_id()))) {
        restored = std::string(l.substr(l.find("stages (ms): ") == absl::string_view::npos
                                            ? l.size()
                                            : l.find("stages (ms): ") + 13));
      }
    }
    Report(absl::StrCat(
        name, ": ", gib, " GiB (", chunks, " chunks), ", fastpath ? "fast path" : "driver's path",
        ", GPU ", GpuOf("node-a").uuid, " -> ", GpuOf("node-b").uuid,
        ": StopContainer (checkpoint) ", stop_s, " s, ", list[0].size_bytes() >> 20,
        " MiB; replacement created and started (restore) ", restore_s, " s; its next step ", step_s,
        " s after its creation; preemption to step ", stop_s + step_s,
        " s; checkpoint stages (ms): ", absl::StrJoin(stages, ", "),
        "; restore stages (ms): ", restored.empty() ? std::string("not logged") : restored));
    ExpectEveryWordIntact("node-b", b->ctr_id);
  }

  static std::string Python() {
    const char* py = getenv("CRYO_GPU_POD_PYTHON");
    return py == nullptr ? std::string() : std::string(py);
  }

  // Which GPU each of the pod's GPU processes runs on, by the pid it has inside the pod (the
  // host's pids change with a restore, those do not), from nvidia-smi on the node.
  static std::map<pid_t, std::string> GpuOfPodPids() {
    std::map<pid_t, std::string> out;
    FILE* f = ::popen("nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader", "r");
    if (f == nullptr) return out;
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    ::pclose(f);
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<std::string> kv = absl::StrSplit(line, absl::MaxSplits(',', 1));
      pid_t host = 0;
      if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &host)) continue;
      // NSpid's last field is the pid in the process's own (the pod's) namespace.
      for (absl::string_view l :
           absl::StrSplit(Slurp(absl::StrCat("/proc/", host, "/status")), '\n')) {
        if (!absl::ConsumePrefix(&l, "NSpid:")) continue;
        std::vector<absl::string_view> pids =
            absl::StrSplit(l, absl::ByAnyChar(" \t"), absl::SkipEmpty());
        pid_t inner = 0;
        if (!pids.empty() && absl::SimpleAtoi(pids.back(), &inner)) {
          out[inner] = std::string(absl::StripAsciiWhitespace(kv[1]));
        }
      }
    }
    return out;
  }

  static std::string Placement(const std::map<pid_t, std::string>& m) {
    std::vector<std::string> parts;
    for (const auto& [pid, uuid] : m) parts.push_back(absl::StrCat(pid, "@", uuid));
    return parts.empty() ? std::string("none") : absl::StrJoin(parts, " ");
  }

  // A training pod (`python args... --steps N --out /tmp/losses.txt`, N from the reference run)
  // with the fast path: started on node A given `from`, stopped with a 30 s grace after a third
  // of its steps, its replacement on node B given `to`; the replacement must go on from where it
  // stopped and write the reference's losses, bit for bit. The pod gets its own tmpfs at
  // /dev/shm (NCCL wants more than the runtime's 64 MiB; users mount a memory emptyDir there).
  void TrainStopAndResume(const std::string& name, const std::vector<std::string>& args,
                          const std::string& ref_path, const std::vector<Gpu>& from,
                          const std::vector<Gpu>& to,
                          const std::map<std::string, std::string>& more_annotations) {
    const std::string ref = Slurp(ref_path);
    const int steps = static_cast<int>(std::count(ref.begin(), ref.end(), '\n')) - 1;
    ASSERT_GT(steps, 50) << "the reference run " << ref_path << " is too short";
    // The pod stays up after the last step, so that its losses can be read.
    const std::vector<std::string> job = {
        "sh", "-c",
        absl::StrCat(Python(), " ", absl::StrJoin(args, " "), " --steps ", steps,
                     " --step-ms 20 --out /tmp/losses.txt; exec sleep 100000")};
    auto lines = [&](const std::string& node, const std::string& ctr) {
      auto r = Exec(node, ctr, "cat /tmp/losses.txt 2>/dev/null");
      return r.ok() ? r->stdout() : std::string();
    };
    auto count = [](const std::string& t) { return std::count(t.begin(), t.end(), '\n'); };
    auto give = [&](const std::vector<Gpu>& gpus, const std::string& shm) {
      GiveGpusAndShm(gpus, shm);
    };
    std::map<std::string, std::string> annotations = GpuOptIn(true, false);
    annotations.insert(more_annotations.begin(), more_annotations.end());

    give(from, absl::StrCat(world().dir(), "/", name, "-shm-a"));
    auto a = RunPod("node-a", name + "-a", annotations, job);
    ASSERT_TRUE(a.ok()) << a.status();
    WaitUntil(
        [&] {
          return count(lines("node-a", a->ctr_id)) >= steps / 3 || !Running("node-a", a->ctr_id);
        },
        absl::Minutes(5));
    ASSERT_GE(count(lines("node-a", a->ctr_id)), steps / 3) << TailOf(a->log_path);
    const std::map<pid_t, std::string> before = GpuOfPodPids();
    absl::Time t0 = absl::Now();
    ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
    const double stop_s = Secs(t0);
    auto stopped = ExitedStatus("node-a", a->ctr_id);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    ASSERT_EQ(stopped->exit_code(), 75) << TailOf(world().shim("node-a").log_file()) << "\n"
                                        << TailOf(world().cryod("node-a").log());
    auto list = Checkpoints(kWorkload);
    ASSERT_EQ(list.size(), 1u);
    EXPECT_GT(list[0].gpu_fastpath_bytes(), 0u);

    annotations["cryo.dev/resume"] = "auto";
    give(to, absl::StrCat(world().dir(), "/", name, "-shm-b"));
    absl::Time t1 = absl::Now();
    auto b = RunPod("node-b", name + "-b", annotations, job);
    ASSERT_TRUE(b.ok()) << b.status() << "\n" << TailOf(world().cryod("node-b").log());
    const double restore_s = Secs(t1);
    const std::map<pid_t, std::string> after = GpuOfPodPids();
    const std::string at_resume = lines("node-b", b->ctr_id);
    EXPECT_GE(count(at_resume), steps / 3) << "the replacement started over";
    // Every GPU process came back, each on one of the GPUs the new pod was given.
    std::set<std::string> given;
    for (const Gpu& g : to) given.insert(g.uuid);
    EXPECT_EQ(after.size(), before.size()) << Placement(before) << " -> " << Placement(after);
    for (const auto& [pid, uuid] : after) EXPECT_TRUE(given.count(uuid)) << pid << " on " << uuid;
    WaitUntil(
        [&] {
          return absl::EndsWith(lines("node-b", b->ctr_id), "done\n") ||
                 !Running("node-b", b->ctr_id);
        },
        absl::Minutes(5));
    ASSERT_TRUE(absl::EndsWith(lines("node-b", b->ctr_id), "done\n")) << TailOf(b->log_path);
    const std::string got = lines("node-b", b->ctr_id);
    EXPECT_EQ(got, ref) << "losses differ from the run without cryo";
    auto names = [](const std::vector<Gpu>& gs) {
      std::vector<std::string> u;
      for (const Gpu& g : gs) u.push_back(g.uuid);
      return absl::StrJoin(u, ",");
    };
    Report(absl::StrCat(name, ": ", steps, " steps, stopped after step ", count(at_resume) - 1,
                        " on ", names(from), ", resumed on ", names(to),
                        ": StopContainer (checkpoint) ", stop_s, " s, ", list[0].size_bytes() >> 20,
                        " MiB (fast path ", list[0].gpu_fastpath_bytes() >> 20,
                        " MiB); replacement created and started (restore) ", restore_s,
                        " s; GPU processes (pod pid@GPU) before ", Placement(before), ", after ",
                        Placement(after), "; losses ", got == ref ? "bit-identical" : "DIFFERENT"));
  }

  std::vector<std::string> shm_mounts_;
  std::vector<Gpu> gpus_;
  std::string nccl_ifname_ = "lo";  // NCCL's interface in the pods GiveGpus makes
};

// The product's path with the fast path: a GPU pod stopped (a preemption) is checkpointed, and
// its replacement on node B, given the other GPU, goes on with every word of its memory.
TEST_F(GpuPodE2e, AFastPathGpuPodResumesOnTheOtherGpuOfAnotherNode) {
  double gib = 4;
  if (const char* g = getenv("CRYO_GPU_POD_GIB"); g != nullptr) (void)absl::SimpleAtod(g, &gib);
  PreemptAndResume("gpu-fast", true, gib);
}

// The driver's path (no fast path): the driver checkpoints the GPU state, CRIU the process,
// and the restore pairs the checkpointed GPU with the one the new pod's device files give it.
TEST_F(GpuPodE2e, AGpuPodOnTheDriversPathResumesOnTheOtherGpuOfAnotherNode) {
  PreemptAndResume("gpu-driver", false, 1);
}

// kubelet's CheckpointContainer on a GPU pod: the archive, and the job runs on. Then the
// archive as a checkpoint image (as Kubernetes documents it), imported into node B's
// containerd: a pod on B whose image is that checkpoint image, given B's GPU, resumes the job
// with every word of its GPU memory, with no checkpoint left in the store.
TEST_F(GpuPodE2e, KubeletsCheckpointOfAGpuPodLeavesItRunningAndItsImageResumesOnNodeB) {
  GiveGpus({GpuOf("node-a")});
  auto a = RunPod("node-a", "gpu-ckpt", GpuOptIn(true, false), Job(1));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(StepsPast("node-a", a->ctr_id, 5)) << TailOf(a->log_path);
  const std::string archive = absl::StrCat(world().dir(), "/kubelet/checkpoints/gpu-ckpt.tar");
  absl::Time t0 = absl::Now();
  grpc::Status st = KubeletCheckpoint("node-a", a->ctr_id, archive, absl::Minutes(5));
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << TailOf(world().cryod("node-a").log());
  Report(
      absl::StrCat("gpu-ckpt: kubelet's CheckpointContainer of a 1 GiB GPU pod ", Secs(t0), " s"));
  auto names = container::ListArchive(archive);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, Contains("cryo-manifest.json"));
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].leave_running());
  ExpectEveryWordIntact("node-a", a->ctr_id);
  const uint64_t steps_at_stop = U(Status("node-a", a->ctr_id), "steps");

  // The source pod is gone before the image is used, as after a node loss.
  (void)Shim("node-a").StopContainer(a->ctr_id, 0);
  const std::string image = "localhost/cryo-e2e/gpu-checkpoint:1";
  absl::Time t1 = absl::Now();
  absl::Status built = BuildAndImport(archive, image, "node-b");
  ASSERT_TRUE(built.ok()) << built;
  const double build_s = Secs(t1);
  DeleteAllCheckpoints();
  ASSERT_TRUE(world().cryod("node-a").List().empty());
  GiveGpus({GpuOf("node-b")});
  absl::Time t2 = absl::Now();
  // A GPU pod asks for the fast path (the library the job mapped is mounted where it was).
  auto b = RunImagePod("node-b", "gpu-img-b", image, {{"cryo.dev/gpu-fast-path", "true"}});
  ASSERT_TRUE(b.ok()) << b.status() << "\n" << TailOf(world().cryod("node-b").log());
  const double restore_s = Secs(t2);
  auto running = Shim("node-b").ContainerStatus(b->ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->annotations().at("cryo.dev/checkpoint-image"), image);
  const nlohmann::json first = Status("node-b", b->ctr_id);
  EXPECT_GT(U(first, "steps"), 5u) << "the job did not go on from its checkpoint: " << first.dump();
  EXPECT_LE(U(first, "steps"), steps_at_stop) << "resumed from later than the archive";
  Report(absl::StrCat("gpu-ckpt: its checkpoint image built and imported into node B ", build_s,
                      " s; a pod of that image on node B (GPU ", GpuOf("node-b").uuid,
                      ") created and started (import and restore) ", restore_s, " s"));
  ExpectEveryWordIntact("node-b", b->ctr_id);
}

// A PyTorch training pod (a small transformer, AdamW, seeded data; e2e/gpu/train_losses.py)
// with the fast path: stopped mid-run on node A's GPU, resumed by its replacement on node B's,
// it writes the same losses, bit for bit, as a run that was never stopped.
TEST_F(GpuPodE2e, ATrainingPodResumesOnTheOtherGpuWithTheSameLosses) {
  const char* script = getenv("CRYO_GPU_POD_TORCH_SCRIPT");
  const char* ref = getenv("CRYO_GPU_POD_TORCH_REF");
  if (script == nullptr || ref == nullptr || Python().empty()) {
    GTEST_SKIP() << "no PyTorch given: pods.sh sets CRYO_GPU_POD_PYTHON, CRYO_GPU_POD_TORCH_SCRIPT "
                    "and CRYO_GPU_POD_TORCH_REF (a run without cryo) when python3 has torch";
  }
  TrainStopAndResume("torch", {script}, ref, {GpuOf("node-a")}, {GpuOf("node-b")}, {});
}

// A torchrun DDP pod holding both GPUs (NCCL at its defaults, NVLink multicast off; the agent
// and two ranks, talking over loopback TCP and sharing GPU memory through NCCL's P2P), stopped
// as a preemption stops it; its replacement on node B is given the same two GPUs in the other
// order and goes on to the same losses, bit for bit, as a run that was never stopped.
TEST_F(GpuPodE2e, ATorchrunDdpPodResumesOnItsGpusInTheOtherOrderWithTheSameLosses) {
  const char* script = getenv("CRYO_GPU_POD_DDP_SCRIPT");
  const char* ref = getenv("CRYO_GPU_POD_DDP_REF");
  if (script == nullptr || ref == nullptr || Python().empty()) {
    GTEST_SKIP()
        << "no DDP reference: pods.sh sets CRYO_GPU_POD_DDP_SCRIPT and CRYO_GPU_POD_DDP_REF "
           "(a run without cryo) on a machine with two GPUs and PyTorch";
  }
  ASSERT_GE(gpus_.size(), 2u) << "pods.sh made a DDP reference on a machine with one GPU";
  // The pod's TCP connections (the ranks' store, NCCL's bootstrap) are carried with the job.
  TrainStopAndResume(
      "ddp", {"-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", script}, ref,
      {gpus_[0], gpus_[1]}, {gpus_[1], gpus_[0]}, {{"cryo.dev/criu-tcp-established", "true"}});
}

// A training job across two nodes (issue 37, the suite's multi-node test): two pods on the pod
// network, one per node, each one node of a two-node torchrun DDP job (one rank each; the pods'
// hostnames tell NCCL they are two hosts, so it talks over its socket transport between the
// pods, as between machines; on a one-GPU machine both pods share the GPU). Node A's pod is
// stopped (a preemption): the job is checkpointed as one, its two members' GPU work held at one
// cut over the Peer service; the replacements on the swapped nodes, with new addresses, resume
// together (every connection between the pods rewritten) and rank 0 writes the losses of a run
// without cryo, bit for bit.
TEST_F(GpuPodE2e, ATwoNodeTorchrunJobResumesOnTheSwappedNodesWithTheSameLosses) {
  std::string skip;
  const std::optional<TwoNodeJob> job = TwoNodeJobHere(&skip);
  if (!job) GTEST_SKIP() << skip;
  const int steps = job->steps;
  ASSERT_GT(steps, 50) << "the reference run is too short";
  const bool fastpath = job->fastpath;
  const std::string shm = world().dir() + "/ddp2-shm-";

  GiveGpusAndShm({GpuOf("node-a")}, shm + "a");
  auto r0 = RunPod("node-a", "ddp2-0", TwoNodeAnnotations(*job, "0", false),
                   TwoNodeCmd(*job, 0, "127.0.0.1"));
  ASSERT_TRUE(r0.ok()) << r0.status();
  const std::string ip0 = PodIp("node-a", r0->pod_id);
  ASSERT_FALSE(ip0.empty());
  GiveGpusAndShm({GpuOf("node-b")}, shm + "b");
  auto r1 =
      RunPod("node-b", "ddp2-1", TwoNodeAnnotations(*job, "1", false), TwoNodeCmd(*job, 1, ip0));
  ASSERT_TRUE(r1.ok()) << r1.status();
  WaitUntil(
      [&] {
        return Lines(LossesIn("node-a", r0->ctr_id)) >= steps / 3 ||
               !Running("node-a", r0->ctr_id) || !Running("node-b", r1->ctr_id);
      },
      absl::Minutes(5));
  ASSERT_GE(Lines(LossesIn("node-a", r0->ctr_id)), steps / 3) << TailOf(r0->log_path) << "\n"
                                                              << TailOf(r1->log_path);

  absl::Time t0 = absl::Now();
  ASSERT_STOPPED(Shim("node-a").StopContainer(r0->ctr_id, 30));
  const double stop_s = Secs(t0);
  for (const auto& [node, ctr] : {std::pair{"node-a", r0->ctr_id}, {"node-b", r1->ctr_id}}) {
    auto st = ExitedStatus(node, ctr);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->exit_code(), 75)
        << node << " not checkpointed: " << TailOf(world().cryod(node).log());
  }
  // Both members' GPU memory left through the fast path, each node's held with the other's.
  for (const char* node : {"node-a", "node-b"}) {
    if (!fastpath) break;
    EXPECT_THAT(Slurp(world().cryod(node).log()),
                HasSubstr("held at one cut with the job's other members"))
        << node;
  }
  uint64_t fast_bytes = 0;
  int parts = 0;
  for (const auto& c : world().cryod("node-a").List()) {
    if (c.job_checkpoint().empty()) continue;
    ++parts;
    EXPECT_EQ(c.gpu_fastpath_bytes() > 0, fastpath) << c.checkpoint_id();
    fast_bytes += c.gpu_fastpath_bytes();
  }
  EXPECT_EQ(parts, 2) << "the job checkpoint's parts in the store";
  // The cut's skew (the first member's dump to the last's), as the driving cryod logs the commit.
  std::string skew = "?";
  {
    const std::string log = Slurp(world().cryod("node-a").log());
    const size_t at = log.rfind("cut skew ");
    if (at != std::string::npos) skew = log.substr(at + 9, log.find(' ', at + 9) - at - 9);
  }

  // The replacements, on the swapped nodes: new pods, new addresses, started together.
  GiveGpusAndShm({GpuOf("node-b")}, shm + "a2");
  auto s0 = RunPod("node-b", "ddp2-0-2", TwoNodeAnnotations(*job, "0", true),
                   TwoNodeCmd(*job, 0, "127.0.0.1"), /*start=*/false);
  ASSERT_TRUE(s0.ok()) << s0.status();
  GiveGpusAndShm({GpuOf("node-a")}, shm + "b2");
  auto s1 = RunPod("node-a", "ddp2-1-2", TwoNodeAnnotations(*job, "1", true),
                   TwoNodeCmd(*job, 1, ip0), /*start=*/false);
  ASSERT_TRUE(s1.ok()) << s1.status();
  absl::Time t1 = absl::Now();
  absl::Status started = StartTogether({{"node-b", &*s0}, {"node-a", &*s1}});
  ASSERT_TRUE(started.ok()) << started << "\nnode-b's cryod:\n"
                            << TailOf(world().cryod("node-b").log()) << "\nnode-a's cryod:\n"
                            << TailOf(world().cryod("node-a").log());
  const double restore_s = Secs(t1);
  EXPECT_NE(PodIp("node-b", s0->pod_id), ip0);
  const std::string at_resume = LossesIn("node-b", s0->ctr_id);
  EXPECT_GE(Lines(at_resume), steps / 3) << "the job started over";
  // Until both launchers end (rank 0 writes "done" before its launcher ends).
  const double end_s =
      ExpectBothLaunchersEndWell({{"node-b", s0->ctr_id}, {"node-a", s1->ctr_id}}, ip0);
  std::string got;
  ExpectReferenceLosses(*job, "node-b", *s0, *s1, &got);
  if (HasFatalFailure()) return;
  Report(absl::StrCat(
      "ddp2 (two nodes, one rank each, ", absl::StrContains(job->args, "gloo") ? "gloo" : "NCCL",
      " over TCP between the pods): ", steps, " steps, stopped after step ", Lines(at_resume) - 1,
      ": StopContainer (job checkpoint, both members) ", stop_s, " s, cut skew ", skew,
      " ms, fast path ", fast_bytes >> 20, " MiB; replacements started together (restore) ",
      restore_s, " s; losses ", got == job->ref ? "bit-identical" : "DIFFERENT",
      "; the second launcher ended ", end_s, " s after the first"));
}

// The baseline of the two-node job's numbers (issue 37: a job checkpoint against one member
// alone, in the same run): one member's work as a job of one node, the same script and model as
// one torchrun rank in one pod on node A's GPU, stopped and resumed by its replacement on node
// B's; it goes on to the losses of its own run without cryo, bit for bit.
TEST_F(GpuPodE2e, AOneNodeTorchrunJobAloneIsTheTwoNodeJobsBaseline) {
  const char* script = getenv("CRYO_GPU_POD_JOB_SCRIPT");
  const char* ref = getenv("CRYO_GPU_POD_JOB1_REF");
  if (script == nullptr || ref == nullptr || Python().empty()) {
    GTEST_SKIP() << "no one-node reference: pods.sh sets CRYO_GPU_POD_JOB_SCRIPT and "
                    "CRYO_GPU_POD_JOB1_REF (a run without cryo) on a machine with PyTorch";
  }
  TrainStopAndResume(
      "ddp1", {"-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", script}, ref,
      {GpuOf("node-a")}, {GpuOf("node-b")}, {{"cryo.dev/criu-tcp-established", "true"}});
}

// The two-node job's periodic job checkpoints (issue 37, must 6, on GPUs): with checkpoint-every
// the job is checkpointed in the background, both members at one GPU cut, and runs on; then
// both pods are lost (plain stops: no checkpoint at them) and their replacements, on the
// swapped nodes, resume the newest committed job checkpoint together: rank 0's losses are those
// of the run without cryo, bit for bit, and both launchers end well.
TEST_F(GpuPodE2e, ATwoNodeTorchrunJobLostWholeResumesFromItsPeriodicJobCheckpoint) {
  std::string skip;
  std::optional<TwoNodeJob> job = TwoNodeJobHere(&skip);
  if (!job) GTEST_SKIP() << skip;
  ASSERT_GT(job->steps, 50) << "the reference run is too short";
  // Paced to about 75 s of steps, long enough for two periodic job checkpoints mid-run.
  job->step_ms = std::max(20, 75000 / job->steps);
  auto ann = [&](const std::string& member, bool resume) {
    std::map<std::string, std::string> a = TwoNodeAnnotations(*job, member, resume);
    a["cryo.dev/checkpoint-every"] = "12s";
    a["cryo.dev/checkpoint-on-stop"] = "false";
    return a;
  };
  // The job checkpoints committed with both parts.
  auto committed = [&] {
    std::map<std::string, int> parts;
    for (const auto& c : world().cryod("node-a").List()) {
      if (!c.job_checkpoint().empty() && c.job_uncommitted().empty()) ++parts[c.job_checkpoint()];
    }
    std::set<std::string> whole;
    for (const auto& [id, n] : parts) {
      if (n == 2) whole.insert(id);
    }
    return whole;
  };
  const std::string shm = world().dir() + "/ddp2p-shm-";
  GiveGpusAndShm({GpuOf("node-a")}, shm + "a");
  auto r0 = RunPod("node-a", "ddp2p-0", ann("0", false), TwoNodeCmd(*job, 0, "127.0.0.1"));
  ASSERT_TRUE(r0.ok()) << r0.status();
  const std::string ip0 = PodIp("node-a", r0->pod_id);
  ASSERT_FALSE(ip0.empty());
  GiveGpusAndShm({GpuOf("node-b")}, shm + "b");
  auto r1 = RunPod("node-b", "ddp2p-1", ann("1", false), TwoNodeCmd(*job, 1, ip0));
  ASSERT_TRUE(r1.ok()) << r1.status();
  // A job checkpoint begun once the job trains (the first tick may come while PyTorch starts,
  // and one in flight then may commit after): the second committed after that.
  const int64_t mid = job->steps / 5;
  WaitUntil(
      [&] {
        return Lines(LossesIn("node-a", r0->ctr_id)) >= mid || !Running("node-a", r0->ctr_id);
      },
      absl::Minutes(5));
  ASSERT_GE(Lines(LossesIn("node-a", r0->ctr_id)), mid) << TroubleIn(r0->log_path);
  const std::set<std::string> early = committed();
  auto later = [&] {
    int n = 0;
    for (const std::string& id : committed()) n += early.count(id) ? 0 : 1;
    return n >= 2;
  };
  WaitUntil([&] { return later() || !Running("node-a", r0->ctr_id); }, absl::Minutes(3));
  ASSERT_TRUE(later()) << "no periodic job checkpoint once it trained; node-a's cryod:\n"
                       << TailOf(world().cryod("node-a").log()) << "\nrank 0:\n"
                       << TroubleIn(r0->log_path);
  const int64_t at_stop = Lines(LossesIn("node-a", r0->ctr_id));
  ASSERT_LT(at_stop, job->steps) << "the job ended before it was lost: pace it slower";
  ASSERT_STOPPED(Shim("node-a").StopContainer(r0->ctr_id, 30));
  ASSERT_STOPPED(Shim("node-b").StopContainer(r1->ctr_id, 30));
  // One in flight at the stops commits or not within moments: the replacements come once the
  // job checkpoints have stayed the same for a second.
  std::set<std::string> before = committed();
  int same = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::SleepFor(absl::Milliseconds(250));
        std::set<std::string> now = committed();
        same = now == before ? same + 1 : 0;
        before = std::move(now);
        return same >= 4;
      },
      absl::Seconds(60)));

  GiveGpusAndShm({GpuOf("node-b")}, shm + "a2");
  auto s0 = RunPod("node-b", "ddp2p-0-2", ann("0", true), TwoNodeCmd(*job, 0, "127.0.0.1"),
                   /*start=*/false);
  ASSERT_TRUE(s0.ok()) << s0.status();
  GiveGpusAndShm({GpuOf("node-a")}, shm + "b2");
  auto s1 =
      RunPod("node-a", "ddp2p-1-2", ann("1", true), TwoNodeCmd(*job, 1, ip0), /*start=*/false);
  ASSERT_TRUE(s1.ok()) << s1.status();
  const absl::Time t1 = absl::Now();
  absl::Status started = StartTogether({{"node-b", &*s0}, {"node-a", &*s1}});
  ASSERT_TRUE(started.ok()) << started << "\nnode-b's cryod:\n"
                            << TailOf(world().cryod("node-b").log()) << "\nnode-a's cryod:\n"
                            << TailOf(world().cryod("node-a").log());
  const double restore_s = Secs(t1);
  const int64_t at_resume = Lines(LossesIn("node-b", s0->ctr_id));
  EXPECT_GE(at_resume, mid) << "resumed from before the job trained";
  // Both from one of the job checkpoints committed before the replacements came.
  std::set<std::string> from;
  for (const auto& [node, ctr] : {std::pair{"node-b", s0->ctr_id}, {"node-a", s1->ctr_id}}) {
    auto st = RuntimeStatus(node, ctr);
    ASSERT_TRUE(st.ok()) << st.status();
    const std::string id = st->status().annotations().at("cryo.dev/resume-from");
    from.insert(id.substr(0, id.rfind('.')));
  }
  ASSERT_EQ(from.size(), 1u) << "the members resumed different cuts";
  EXPECT_TRUE(before.count(*from.begin())) << *from.begin();
  const double end_s =
      ExpectBothLaunchersEndWell({{"node-b", s0->ctr_id}, {"node-a", s1->ctr_id}}, ip0);
  std::string got;
  ExpectReferenceLosses(*job, "node-b", *s0, *s1, &got);
  if (HasFatalFailure()) return;
  Report(absl::StrCat(
      "ddp2 periodic (two nodes, one rank each): ", job->steps, " steps at ", job->step_ms, " ms, ",
      before.size(), " committed job checkpoint(s) kept; lost after step ", at_stop - 1,
      ", resumed after step ", at_resume - 1, "; replacements started together (restore) ",
      restore_s, " s; losses ", got == job->ref ? "bit-identical" : "DIFFERENT",
      "; the second launcher ended ", end_s, " s after the first"));
}

// A GPU pod checkpointed in the background (checkpoint-every, the fast path): the job runs on
// after each, the second writes only what changed; then a stop whose grace is too short for a
// new checkpoint: the pod ends with the work lost named, and its replacement on node B's GPU
// resumes from the newest periodic one with every word of its memory as that one saved it.
TEST_F(GpuPodE2e, APeriodicGpuPodStoppedWithTooShortAGraceResumesFromItsNewestPeriodicOne) {
  double gib = 4;
  if (const char* g = getenv("CRYO_GPU_POD_GIB"); g != nullptr) (void)absl::SimpleAtod(g, &gib);
  GiveGpus({GpuOf("node-a")});
  std::map<std::string, std::string> annotations = GpuOptIn(true, false);
  annotations["cryo.dev/checkpoint-every"] = "20s";
  auto a = RunPod("node-a", "gpu-periodic-a", annotations, Job(gib));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(StepsPast("node-a", a->ctr_id, 5)) << TailOf(a->log_path);
  ASSERT_TRUE(WaitUntil([&] { return Checkpoints(kWorkload).size() >= 2; }, absl::Minutes(4)))
      << TailOf(world().cryod("node-a").log());
  for (const v1::CheckpointInfo& c : Checkpoints(kWorkload)) {
    EXPECT_TRUE(c.leave_running());
    std::vector<std::string> stages;
    for (const auto& [k, v] : c.stage_ms()) stages.push_back(absl::StrCat(k, " ", v));
    std::sort(stages.begin(), stages.end());
    Report(absl::StrCat(
        "gpu-periodic: ", gib, " GiB, ", c.checkpoint_id(), ": ", c.size_bytes() >> 20,
        " MiB, of which ", c.referenced_bytes() >> 20,
        " MiB referred to in an earlier one; stages (ms): ", absl::StrJoin(stages, ", ")));
  }
  ExpectEveryWordIntact("node-a", a->ctr_id);

  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 3));
  auto stopped = ExitedStatus("node-a", a->ctr_id);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->exit_code(), 75);
  const std::string message = Slurp(a->termination_log);
  Report(absl::StrCat("gpu-periodic: the stop with a 3 s grace: ", message));
  EXPECT_THAT(message, HasSubstr("(that work is lost)"));
  auto list = Checkpoints(kWorkload);
  ASSERT_GE(list.size(), 2u);
  std::string newest = list[0].checkpoint_id();
  for (const auto& c : list) newest = std::max(newest, c.checkpoint_id());

  GiveGpus({GpuOf("node-b")});
  absl::Time t0 = absl::Now();
  auto b = RunPod("node-b", "gpu-periodic-b", GpuOptIn(true, true), Job(gib));
  ASSERT_TRUE(b.ok()) << b.status() << "\n" << TailOf(world().cryod("node-b").log());
  Report(absl::StrCat("gpu-periodic: replacement on node B created and started (restore from ",
                      newest, ") ", Secs(t0), " s"));
  auto running = Shim("node-b").ContainerStatus(b->ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->annotations().at("cryo.dev/resume-from"), newest);
  ExpectEveryWordIntact("node-b", b->ctr_id);
}

// A replacement pod given no GPU cannot take a GPU job: refused before anything starts, naming
// the GPU the checkpoint ran on and the pod's device files; the checkpoint stays.
TEST_F(GpuPodE2e, AReplacementGivenNoGpuIsRefusedNamingBothLists) {
  GiveGpus({GpuOf("node-a")});
  auto a = RunPod("node-a", "gpu-refuse-a", GpuOptIn(false, false), Job(0.25));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(StepsPast("node-a", a->ctr_id, 5)) << TailOf(a->log_path);
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  ASSERT_EQ(Checkpoints(kWorkload).size(), 1u) << TailOf(world().cryod("node-a").log());

  GiveGpus({});
  auto b = RunPod("node-b", "gpu-refuse-b", GpuOptIn(false, true), Job(0.25));
  ASSERT_FALSE(b.ok()) << "a pod without a GPU resumed a GPU job";
  Report(absl::StrCat("gpu-refuse: ", b.status().ToString()));
  EXPECT_THAT(std::string(b.status().message()),
              ::testing::AllOf(HasSubstr(GpuOf("node-a").uuid), HasSubstr("no GPU")));
  EXPECT_EQ(Checkpoints(kWorkload).size(), 1u) << "the refused restore took the checkpoint";
}
#endif

// The shim's metrics reach Prometheus through cryod's port, as the chart sets them up
// (metrics.shim.enabled): the shim writes them to a file (--metrics-file), cryod serves it at
// /metrics/shim. A checkpoint at a stop shows in its series there.
TEST_F(ContainerModeE2e, TheShimsMetricsAreScrapedThroughCryod) {
  const int port = world().cryod("node-a").metrics_port();
  ASSERT_GT(port, 0);
  const std::string series =
      "cryo_shim_container_operations_total{op=\"checkpoint_on_stop\",result=\"ok\"} ";
  auto value = [&]() -> int {
    const std::string text = HttpGetLocal(port, "/metrics/shim");
    if (!absl::StrContains(text, " 200 ")) return -1;
    size_t at = text.find(series);
    int v = -1;
    if (at != std::string::npos) {
      absl::string_view rest = absl::string_view(text).substr(at + series.size());
      (void)absl::SimpleAtoi(rest.substr(0, rest.find('\n')), &v);
    }
    return v;
  };
  int before = -1;
  ASSERT_TRUE(WaitUntil([&] { return (before = value()) >= 0; }, absl::Seconds(10)))
      << HttpGetLocal(port, "/metrics/shim");
  auto p = RunPod("node-a", "scraped", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitTicks(*p, 3));
  ASSERT_STOPPED(Shim("node-a").StopContainer(p->ctr_id, 30));
  EXPECT_TRUE(WaitUntil([&] { return value() == before + 1; }, absl::Seconds(10)))
      << "before " << before << ":\n"
      << HttpGetLocal(port, "/metrics/shim");
  // The same text as the shim's own endpoint would serve: Prometheus' format, with its types.
  EXPECT_THAT(HttpGetLocal(port, "/metrics/shim"),
              HasSubstr("# TYPE cryo_shim_container_operations_total counter"));
}

TEST_F(ContainerModeE2e, StopWhoseCheckpointMissesTheGracePeriodPublishesNothingAndStops) {
  auto p = RunPod("node-a", "late-stop", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitTicks(*p, 3));
  // cryod stops after the dump, before the publish, until released.
  const std::string hooks = world().HookDir("node-a");
  std::ofstream(hooks + "/before-publish.enable") << "1";
  auto stop =
      std::async(std::launch::async, [&] { return Shim("node-a").StopContainer(p->ctr_id, 3); });
  bool reached = false;
  for (int i = 0; i < 600 && !reached; ++i) {
    reached = ::access((hooks + "/before-publish.reached").c_str(), F_OK) == 0;
    if (!reached) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(reached) << "the stop did not start a checkpoint";
  // The shim waits the grace period less a second (2 s here), then the stop goes on.
  absl::SleepFor(absl::Milliseconds(2500));
  std::ofstream(hooks + "/before-publish.release") << "1";
  ASSERT_TRUE(stop.get().ok());
  auto done = Shim("node-a").WaitContainer(
      p->ctr_id, [](const cri::ContainerStatus& s) { return s.state() == cri::CONTAINER_EXITED; },
      absl::Seconds(30));
  ASSERT_TRUE(done.ok()) << done.status();
  // Too late to be published: nothing is, and the container's log says why.
  bool refused = false;
  for (int i = 0; i < 600 && !refused; ++i) {
    refused = absl::StrContains(Slurp(world().cryod("node-a").log()), "not published");
    if (!refused) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(refused) << Slurp(world().cryod("node-a").log());
  EXPECT_TRUE(Checkpoints(kWorkload).empty()) << "a checkpoint finished after the grace period";
  auto log = ReadCriLog(p->log_path);
  ASSERT_TRUE(log.ok());
  std::string all;
  for (const auto& l : *log) all += l.text + "\n";
  EXPECT_THAT(all, HasSubstr("cryo: checkpoint before stop failed"));
}

TEST_F(ContainerModeE2e, CheckpointContainerRefusesUnknownAndExitedContainers) {
  CriClient& shim = Shim("node-a");
  auto call = [&](const std::string& id) {
    return KubeletCheckpoint("node-a", id, absl::StrCat(world().dir(), "/unused.tar"),
                             absl::Seconds(30));
  };
  grpc::Status st = call("");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = call("no-such-container");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();

  auto p =
      RunPod("node-a", "exited", {{"cryo.dev/checkpoint-on-stop", "true"}}, {"sh", "-c", "exit 3"});
  ASSERT_TRUE(p.ok()) << p.status();
  auto done = shim.WaitContainer(
      p->ctr_id, [](const cri::ContainerStatus& s) { return s.state() == cri::CONTAINER_EXITED; });
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->exit_code(), 3) << "cryo-init must pass the job's exit code on";
  st = call(p->ctr_id);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("not running"));
  // Stopping an exited container checkpoints nothing.
  EXPECT_TRUE(shim.StopContainer(p->ctr_id, 10).ok());
  EXPECT_TRUE(Checkpoints(kWorkload).empty());
  EXPECT_NE(::access(absl::StrCat(world().dir(), "/unused.tar").c_str(), F_OK), 0)
      << "a refused checkpoint must not leave an archive";
}

TEST_F(ContainerModeE2e, ResumeFromAMissingCheckpointFailsTheCreateWithTheReason) {
  auto p = RunPod("node-b", "resume-missing", {{"cryo.dev/resume", "no-such-checkpoint"}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("'no-such-checkpoint'"));
  EXPECT_THAT(p.status().message(), HasSubstr("not in the checkpoint store"));
  // The node goes on as before.
  auto q = RunPod("node-b", "after-missing", {});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(WaitTicks(*q, 2));
}

TEST_F(ContainerModeE2e, ResumeFromADamagedCheckpointFailsTheStartAndSaysWhichFile) {
  auto a = RunPod("node-a", "damaged-src", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitTicks(*a, 3));
  // An older, good checkpoint of the same workload, taken while it runs (kubelet's API).
  {
    grpc::Status st = KubeletCheckpoint("node-a", a->ctr_id, "");
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  auto first = Checkpoints(kWorkload);
  ASSERT_EQ(first.size(), 1u);
  const std::string older = first[0].checkpoint_id();
  absl::SleepFor(absl::Milliseconds(1100));  // the list is ordered by creation time
  ASSERT_TRUE(WaitTicks(*a, Ticks(a->log_path).size() + 3));
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  const int last_a = Ticks(a->log_path).back();
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 2u);
  const std::string id = list[0].checkpoint_id();
  ASSERT_NE(id, older) << "the stop's checkpoint is the newest";
  // Flip one byte of the memory image in the shared store.
  const std::string pages =
      absl::StrCat(world().store(), "/checkpoints/", id, "/images/pages-1.img");
  {
    std::fstream f(pages, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << pages;
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(100);
    f.write(&c, 1);
  }

  auto b = RunPod("node-b", "damaged-dst", {{"cryo.dev/resume", id}}, kCounter, /*start=*/false);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::Status started = Shim("node-b").StartContainer(b->ctr_id);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.code(), absl::StatusCode::kDataLoss) << started;
  EXPECT_THAT(started.message(), HasSubstr("pages-1.img"));
  // The container ends with cryo-init's code and the reason is in its log.
  auto done = Shim("node-b").WaitContainer(
      b->ctr_id, [](const cri::ContainerStatus& s) { return s.state() == cri::CONTAINER_EXITED; });
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->exit_code(), 125);
  auto log = ReadCriLog(b->log_path);
  ASSERT_TRUE(log.ok());
  std::string all;
  for (const auto& l : *log) all += l.text + "\n";
  EXPECT_THAT(all, HasSubstr(absl::StrCat("cryo: restore of checkpoint ", id, " failed")));
  EXPECT_THAT(all, HasSubstr("pages-1.img"));
  EXPECT_EQ(Ticks(b->log_path).size(), 0u) << "a failed restore must not start the job afresh";
  // The refusal is remembered: the checkpoint is marked damaged (restores still verify), and
  // an automatic resume passes over it to the older, good one.
  list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].checkpoint_id(), id);
  EXPECT_THAT(list[0].damaged(), HasSubstr("pages-1.img"));
  EXPECT_EQ(list[1].damaged(), "");
  auto c = RunPod("node-b", "damaged-auto", {{"cryo.dev/resume", "auto"}});
  ASSERT_TRUE(c.ok()) << c.status();
  auto resumed = Shim("node-b").ContainerStatus(c->ctr_id);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->annotations().at("cryo.dev/resume-from"), older);
  ASSERT_TRUE(WaitTicks(*c, 2));
  const std::vector<int> ct = Ticks(c->log_path);
  EXPECT_GT(ct.front(), 1) << "started afresh instead of resuming";
  EXPECT_LE(ct.front(), last_a) << "resumed from the damaged checkpoint's moment";
  // Nothing else broke: node-b still runs pods.
  auto q = RunPod("node-b", "after-damaged", {});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(WaitTicks(*q, 2));
}

TEST_F(ContainerModeE2e, TerminationNoticeCheckpointsOptedInContainersAndTheyRunOn) {
  auto opted = RunPod("node-a", "notice", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(opted.ok()) << opted.status();
  auto plain = RunPod("node-a", "notice-plain", {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(WaitTicks(*opted, 3));

  // GCE's metadata server, as the node sees it before and after the preemption notice.
  std::atomic<bool> preempted{false};
  auto gce = termination::TestHttpServer::Start([&](const termination::TestRequest& r) {
    termination::TestResponse resp;
    if (r.Header("metadata-flavor") != "Google") {
      resp.status = 403;
      return resp;
    }
    if (r.Path() == "/computeMetadata/v1/instance/preempted") {
      resp.body = preempted ? "TRUE" : "FALSE";
    } else if (r.Path() == "/computeMetadata/v1/instance/maintenance-event") {
      resp.body = "NONE";
    } else {
      resp.status = 404;
    }
    return resp;
  });
  ASSERT_NE(gce, nullptr);
  auto watcher = Cryod::Start(
      absl::StrCat(world().dir(), "/node-a"), world().store(), "node-a-watch",
      {"--runtime-endpoint", absl::StrCat("unix://", world().NodeSocket("node-a")),
       "--termination-providers", "gce", "--termination-poll-ms", "100", "--termination-gce-url",
       absl::StrCat(gce->base(), "/computeMetadata/v1/instance/")});
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  ASSERT_TRUE(WaitUntil([&] { return gce->requests() >= 6; }, absl::Seconds(30)));
  EXPECT_TRUE(Checkpoints(kWorkload).empty()) << "checkpointed without a notice";

  preempted = true;
  ASSERT_TRUE(WaitUntil([&] { return !Checkpoints(kWorkload).empty(); }, absl::Seconds(60)))
      << "no checkpoint after the notice; cryod log:\n"
      << (*watcher)->log();
  auto list = Checkpoints(kWorkload);
  ASSERT_EQ(list.size(), 1u) << "only the opted-in container is checkpointed";
  EXPECT_EQ(list[0].labels().at("cryo.dev/reason"), "termination-notice");
  EXPECT_EQ(list[0].labels().at("io.kubernetes.pod.name"), "notice");
  EXPECT_EQ(list[0].node_name(), "node-a-watch");
  EXPECT_TRUE(list[0].leave_running());
  // The notice may be withdrawn: the job runs on until kubelet stops it.
  const size_t ticks = Ticks(opted->log_path).size();
  EXPECT_TRUE(WaitTicks(*opted, ticks + 5));
}

// Found on 2026-11-24 under a real kubelet: a re-created Job of the same name resumed the deleted
// Job's state. The workload key follows the Job's uid: replacements of the same Job resume, a
// new Job starts fresh.
TEST_F(ContainerModeE2e, ARecreatedJobStartsFreshWhileReplacementsOfTheSameJobResume) {
  auto a = RunPod("node-a", "trainer-1", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitTicks(*a, 10));
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  ASSERT_EQ(Checkpoints(kWorkload).size(), 1u);
  const int last = Ticks(a->log_path).back();

  // A new Job of the same name (another uid): nothing to resume, it starts at 1.
  const std::string other_uid = "9a8b7c6d-0000-4000-8000-000000000002";
  auto fresh = RunPod("node-b", "trainer-new", {{"cryo.dev/resume", "auto"}}, kCounter,
                      /*start=*/true, other_uid);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(WaitTicks(*fresh, 3));
  EXPECT_EQ(Ticks(fresh->log_path).front(), 1) << "a new Job resumed another Job's state";

  // A replacement pod of the first Job resumes where it stopped.
  auto again = RunPod("node-b", "trainer-2", {{"cryo.dev/resume", "auto"}});
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(WaitTicks(*again, 3));
  EXPECT_EQ(Ticks(again->log_path).front(), last + 1);
}

// kubelet never asks for less than 2 s: a force delete is a 2 s stop. A pod that asks for a
// minimum of 3 s is not checkpointed by one (and ends as a plain stop), one that does not is.
TEST_F(ContainerModeE2e, AForceDeleteIsCheckpointedUnlessThePodAsksForMoreGrace) {
  auto skip = RunPod("node-a", "forced",
                     {{"cryo.dev/checkpoint-on-stop", "true"},
                      {"cryo.dev/checkpoint-min-grace-seconds", "3"},
                      {"cryo.dev/checkpointed-exit-code", "99"}});
  ASSERT_TRUE(skip.ok()) << skip.status();
  ASSERT_TRUE(WaitTicks(*skip, 3));
  ASSERT_STOPPED(Shim("node-a").StopContainer(skip->ctr_id, 2));
  EXPECT_TRUE(Checkpoints(kWorkload).empty()) << "a 2 s stop below the pod's 3 s minimum";
  auto st = ExitedStatus("node-a", skip->ctr_id);
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->exit_code(), 99) << "not checkpointed: not the checkpointed exit code";
  {
    std::string all;
    auto log = ReadCriLog(skip->log_path);
    ASSERT_TRUE(log.ok());
    for (const auto& l : *log) all += l.text + "\n";
    EXPECT_THAT(all, HasSubstr("below the pod's minimum")) << "kubectl logs --previous says why";
  }

  // One that does not ask is checkpointed at a 2 s stop, within 1 s of it (the shim keeps the
  // other for the stop). Whether a checkpoint fits in 1 s is the machine's speed, not the
  // contract (CI's 2-core machine missed it three times in a row on 2026-11-29): each try ends
  // either checkpointed, or stopped plainly with the reason in its log and nothing published.
  // Tries until one is checkpointed (3 at most) and checks whichever it was.
  int checkpointed = 0;
  for (int attempt = 0; attempt < 3 && checkpointed == 0; ++attempt) {
    auto kept = RunPod(
        "node-a", absl::StrCat("forced-", attempt + 2),
        {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/checkpointed-exit-code", "99"}});
    ASSERT_TRUE(kept.ok()) << kept.status();
    ASSERT_TRUE(WaitTicks(*kept, 3));
    ASSERT_STOPPED(Shim("node-a").StopContainer(kept->ctr_id, 2));
    st = ExitedStatus("node-a", kept->ctr_id);
    ASSERT_TRUE(st.ok());
    const auto list = Checkpoints(kWorkload);
    ASSERT_LE(list.size(), 1u);
    if (list.size() == 1) {
      checkpointed = 1;
      EXPECT_EQ(list[0].labels().at("cryo.dev/stop-grace"), "minimum")
          << "kubelet's 2 s floor, below the pod's 30 s: a force delete or a hard eviction";
      EXPECT_EQ(list[0].labels().at("io.kubernetes.pod.name"),
                absl::StrCat("forced-", attempt + 2));
      EXPECT_EQ(st->exit_code(), 99) << "the pod's checkpointed exit code";
      continue;
    }
    // Missed the second: a plain stop that says so, the job not left frozen.
    EXPECT_NE(st->exit_code(), 99) << "ended as checkpointed, and no checkpoint was published";
    std::string all;
    auto log = ReadCriLog(kept->log_path);
    ASSERT_TRUE(log.ok());
    for (const auto& l : *log) all += l.text + "\n";
    EXPECT_THAT(all, HasSubstr("cryo: checkpoint before stop failed"))
        << "a stop above the pod's minimum was not checkpointed, and its log does not say why; "
           "the shim's log:\n"
        << TailOf(world().shim("node-a").log_file()) << "\ncryod's:\n"
        << TailOf(world().cryod("node-a").log());
  }
  // A bad value is refused when the container is created, not at the stop.
  auto bad =
      RunPod("node-a", "bad-code",
             {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/checkpointed-exit-code", "137"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("checkpointed-exit-code"), std::string::npos)
      << bad.status();
}

// Which pods form a job (lib/contract/job.h): decided at the container's creation, kept on its
// annotations for cryod; a job without a usable size is refused then, not at a checkpoint.
TEST_F(ContainerModeE2e, AJobsMembershipIsCheckedAtCreationAndKeptOnTheContainer) {
  auto member = RunPod("node-a", "sum-left",
                       {{"cryo.dev/checkpoint-on-stop", "true"},
                        {"cryo.dev/job", "sum"},
                        {"cryo.dev/job-size", "2"}},
                       kCounter, /*start=*/false);
  ASSERT_TRUE(member.ok()) << member.status();
  auto st = RuntimeStatus("node-a", member->ctr_id);
  ASSERT_TRUE(st.ok()) << st.status();
  const auto& ann = st->status().annotations();
  EXPECT_EQ(ann.at("cryo.dev/job"), "sum");
  EXPECT_EQ(ann.at("cryo.dev/job-size"), "2");
  EXPECT_EQ(ann.at("cryo.dev/job-member"), "sum-left") << "a bare pod is a member by its name";
  EXPECT_EQ(ann.at("cryo.dev/job-source"), "annotation");
  auto bad = RunPod("node-a", "sum-bad",
                    {{"cryo.dev/checkpoint-on-stop", "true"},
                     {"cryo.dev/job", "sum"},
                     {"cryo.dev/job-size", "two"}},
                    kCounter, /*start=*/false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("cryo.dev/job-size"), std::string::npos) << bad.status();
}

// A job of two pods on two nodes (issue 37): kubelet stopping one member checkpoints both at
// one cut through the nodes' cryods (their `peers`), one record commits it, and both members
// end. The replacements, on the swapped nodes, resume each its own part (the members of one Job
// share its workload key) and count on exactly.
TEST_F(ContainerModeE2e, AMembersStopCheckpointsTheWholeJobAndTheReplacementsResumeTheirParts) {
  auto member = [&](const std::string& node, const std::string& pod, const std::string& name,
                    const std::string& resume) {
    std::map<std::string, std::string> ann = {{"cryo.dev/checkpoint-on-stop", "true"},
                                              {"cryo.dev/checkpointed-exit-code", "99"},
                                              {"cryo.dev/job", "pair"},
                                              {"cryo.dev/job-size", "2"},
                                              {"cryo.dev/job-member", name}};
    if (!resume.empty()) ann["cryo.dev/resume"] = resume;
    return RunPod(node, pod, ann, kCounter, /*start=*/resume.empty());
  };
  auto left = member("node-a", "pair-left", "left", "");
  ASSERT_TRUE(left.ok()) << left.status();
  auto right = member("node-b", "pair-right", "right", "");
  ASSERT_TRUE(right.ok()) << right.status();
  ASSERT_TRUE(WaitTicks(*left, 5));
  ASSERT_TRUE(WaitTicks(*right, 5));

  // kubelet's checkpoint of one member (kubectl cryo checkpoint) takes the job, both running
  // on; its archive is that member's part.
  const std::string archive = absl::StrCat(world().dir(), "/kubelet/checkpoints/pair-right.tar");
  grpc::Status api = KubeletCheckpoint("node-b", right->ctr_id, archive);
  ASSERT_TRUE(api.ok()) << api.error_message();
  std::set<std::string> copy_of;
  std::string api_cut;
  for (const auto& c : Checkpoints(kWorkload)) {
    copy_of.insert(c.job_member());
    api_cut = c.job_checkpoint();
    EXPECT_EQ(c.labels().at("cryo.dev/reason"), "checkpoint-api");
    EXPECT_TRUE(c.leave_running());
  }
  EXPECT_EQ(copy_of, (std::set<std::string>{"left", "right"}));
  auto in_archive = container::ReadArchiveFile(archive, "cryo-manifest.json");
  ASSERT_TRUE(in_archive.ok()) << in_archive.status();
  EXPECT_THAT(*in_archive, HasSubstr("\"member\": \"right\"")) << "the calling member's part";
  EXPECT_FALSE(std::filesystem::exists(world().dir() + "/kubelet/checkpoints/pair-left.tar"));
  const size_t ran = Ticks(left->log_path).size();
  ASSERT_TRUE(WaitTicks(*left, ran + 3)) << "the other member runs on";

  ASSERT_STOPPED(Shim("node-a").StopContainer(left->ctr_id, 30));
  auto st = ExitedStatus("node-a", left->ctr_id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->exit_code(), 99) << "checkpointed: " << TailOf(world().shim("node-a").log_file());
  // The other member was checkpointed at the same cut and ended with the job.
  st = ExitedStatus("node-b", right->ctr_id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->exit_code(), 99) << TailOf(world().cryod("node-b").log());
  std::vector<v1::CheckpointInfo> parts;  // the stop's job checkpoint, not kubelet's
  for (const auto& c : Checkpoints(kWorkload)) {
    if (c.job_checkpoint() != api_cut) parts.push_back(c);
  }
  ASSERT_EQ(parts.size(), 2u) << "one part per member; node-a's cryod:\n"
                              << TailOf(world().cryod("node-a").log());
  std::map<std::string, v1::CheckpointInfo> by_member;
  for (const auto& p : parts) by_member[p.job_member()] = p;
  ASSERT_EQ(by_member.count("left"), 1u);
  ASSERT_EQ(by_member.count("right"), 1u);
  EXPECT_EQ(by_member["left"].job_checkpoint(), by_member["right"].job_checkpoint());
  for (const auto& [name, p] : by_member) {
    EXPECT_EQ(p.job(), "cryo-e2e/pair");
    EXPECT_TRUE(p.job_uncommitted().empty()) << name << ": " << p.job_uncommitted();
    EXPECT_EQ(p.checkpoint_id(), absl::StrCat(p.job_checkpoint(), ".", name));
    EXPECT_EQ(p.labels().at("io.kubernetes.pod.name"), absl::StrCat("pair-", name))
        << "each part names its own pod";
    EXPECT_EQ(p.labels().at("cryo.dev/reason"), "stop");
  }
  EXPECT_EQ(by_member["left"].node_name(), "node-a");
  EXPECT_EQ(by_member["right"].node_name(), "node-b");
  const int last_left = Ticks(left->log_path).back();
  const int last_right = Ticks(right->log_path).back();

  // A replacement alone waits for the other's, then fails its start naming the missing
  // member; nothing is restored (its log says so too).
  auto alone = member("node-b", "pair-left-alone", "left", "auto");
  ASSERT_TRUE(alone.ok()) << alone.status();
  absl::Status lone = Shim("node-b").StartContainer(alone->ctr_id);
  ASSERT_FALSE(lone.ok());
  EXPECT_THAT(std::string(lone.message()),
              HasSubstr("waiting for the replacements of member(s) right of job cryo-e2e/pair"))
      << lone;
  EXPECT_TRUE(Ticks(alone->log_path).empty()) << "a member resumed without the other";

  // The replacements, on the swapped nodes, started together: each resumes its own part.
  auto left2 = member("node-b", "pair-left-2", "left", "auto");
  ASSERT_TRUE(left2.ok()) << left2.status();
  auto right2 = member("node-a", "pair-right-2", "right", "auto");
  ASSERT_TRUE(right2.ok()) << right2.status();
  absl::Status started = StartTogether({{"node-b", &*left2}, {"node-a", &*right2}});
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(WaitTicks(*left2, 3));
  ASSERT_TRUE(WaitTicks(*right2, 3));
  EXPECT_EQ(Ticks(left2->log_path).front(), last_left + 1);
  EXPECT_EQ(Ticks(right2->log_path).front(), last_right + 1);
}

// A job's members on a real pod network (issue 37): the bridge CNI gives each pod its node's
// address, and the two members keep a running sum over TCP both ways across the nodes. A
// member's stop checkpoints both at one cut; the replacements land on the swapped nodes with
// new addresses, and the connection between them is restored with both ends rewritten and held
// until both are back: the sums go on exactly (the workload itself stops with ok 0 at a byte
// lost, duplicated or reordered). A new connection the job opens to an address it remembers
// reaches the member where it is now, also after a second move.
TEST_F(ContainerModeE2e, AJobsConnectionMovesWithItsPodsToNewAddressesAndTheSumsGoOn) {
  SumpairPods();
  auto member = [&](const std::string& node, const std::string& pod, const std::string& name,
                    const std::string& where, bool resume) {
    std::map<std::string, std::string> ann = {{"cryo.dev/checkpoint-on-stop", "true"},
                                              {"cryo.dev/checkpointed-exit-code", "99"},
                                              {"cryo.dev/job", "sums"},
                                              {"cryo.dev/job-size", "2"},
                                              {"cryo.dev/job-member", name}};
    if (resume) ann["cryo.dev/resume"] = "auto";
    const std::vector<std::string> cmd = {"/opt/cryo/cryo-sumpair",
                                          "--status",
                                          "/tmp/status",
                                          name == "left" ? "--listen" : "--connect",
                                          where,
                                          "--redial",
                                          "/tmp/redial"};
    return RunPod(node, pod, ann, cmd, /*start=*/!resume);
  };
  // Right dials left again by the address it was started with (as a launcher or NCCL dials
  // what it remembers); the number of such dials that worked, or the errno of one that failed.
  auto redial = [&](const std::string& node, const std::string& ctr) -> nlohmann::json {
    const uint64_t before = U(Status(node, ctr), "redials");
    auto r = Exec(node, ctr, "touch /tmp/redial");
    if (!r.ok()) return {{"exec", r.status().ToString()}};
    WaitUntil(
        [&] {
          const nlohmann::json st = Status(node, ctr);
          return U(st, "redials") > before || U(st, "redial_errno") != 0;
        },
        absl::Seconds(60));
    return Status(node, ctr);
  };
  auto left = member("node-a", "sums-left", "left", "0.0.0.0:7300", false);
  ASSERT_TRUE(left.ok()) << left.status();
  const std::string left_ip = PodIp("node-a", left->pod_id);
  ASSERT_FALSE(left_ip.empty()) << "no pod address: "
                                << TailOf(world().dir() + "/node-a/containerd.log");
  auto right = member("node-b", "sums-right", "right", left_ip + ":7300", false);
  ASSERT_TRUE(right.ok()) << right.status();
  const std::string right_ip = PodIp("node-b", right->pod_id);
  ASSERT_NE(right_ip, left_ip);
  ASSERT_TRUE(StatusPast("node-a", left->ctr_id, "main", 20, absl::Seconds(60)))
      << Status("node-a", left->ctr_id).dump();
  ASSERT_TRUE(StatusPast("node-b", right->ctr_id, "main", 20, absl::Seconds(60)));
  const uint64_t before = U(Status("node-a", left->ctr_id), "main");
  nlohmann::json dialled = redial("node-b", right->ctr_id);
  ASSERT_EQ(U(dialled, "redials"), 1u) << dialled.dump();

  ASSERT_STOPPED(Shim("node-a").StopContainer(left->ctr_id, 30));
  for (const auto& [node, ctr] : {std::pair{"node-a", left->ctr_id}, {"node-b", right->ctr_id}}) {
    auto st = ExitedStatus(node, ctr);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->exit_code(), 99)
        << node << " not checkpointed: " << TailOf(world().cryod(node).log());
  }

  // The replacements, on the swapped nodes: new pods, new addresses.
  auto left2 = member("node-b", "sums-left-2", "left", "0.0.0.0:7300", true);
  ASSERT_TRUE(left2.ok()) << left2.status();
  auto right2 = member("node-a", "sums-right-2", "right", left_ip + ":7300", true);
  ASSERT_TRUE(right2.ok()) << right2.status();
  const std::string left2_ip = PodIp("node-b", left2->pod_id);
  const std::string right2_ip = PodIp("node-a", right2->pod_id);
  EXPECT_NE(left2_ip, left_ip);
  EXPECT_NE(right2_ip, right_ip);
  absl::Status started = StartTogether({{"node-b", &*left2}, {"node-a", &*right2}});
  ASSERT_TRUE(started.ok()) << started << "\nnode-b's cryod:\n"
                            << TailOf(world().cryod("node-b").log());
  const nlohmann::json first = Status("node-b", left2->ctr_id);
  EXPECT_GE(U(first, "main"), before)
      << "the job went back before its checkpoint: " << first.dump();
  for (const auto& [node, ctr] : {std::pair{"node-b", left2->ctr_id}, {"node-a", right2->ctr_id}}) {
    const uint64_t from = U(Status(node, ctr), "main");
    EXPECT_TRUE(StatusPast(node, ctr, "main", from + 20, absl::Seconds(60)))
        << node << ": the sums did not go on: " << Status(node, ctr).dump() << "\n"
        << TailOf(world().cryod(node).log());
    const nlohmann::json now = Status(node, ctr);
    const uint64_t n = U(now, "main");
    EXPECT_EQ(U(now, "ok"), 1u) << node << ": " << now.dump();
    EXPECT_EQ(U(now, "sum"), n * (n + 1) / 2) << node << ": " << now.dump();
  }
  // A new connection to left's old address (all right knows) reaches left where it is now.
  dialled = redial("node-a", right2->ctr_id);
  EXPECT_EQ(U(dialled, "redial_errno"), 0u)
      << "dialling left's old address " << left_ip << ": " << dialled.dump();
  EXPECT_EQ(U(dialled, "redials"), 2u) << dialled.dump();
  // Each side talks to the other's new address: the connection was rewritten, not reopened.
  auto conns = Exec("node-a", right2->ctr_id, "cat /proc/net/tcp");
  ASSERT_TRUE(conns.ok()) << conns.status();
  auto hex = [](const std::string& ip) {
    unsigned a, b, c, d;
    if (std::sscanf(ip.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) != 4) return std::string();
    return absl::StrFormat("%02X%02X%02X%02X", d, c, b, a);  // /proc/net/tcp: host order
  };
  EXPECT_THAT(conns->stdout(), HasSubstr(absl::StrCat(hex(right2_ip), ":")));
  EXPECT_THAT(conns->stdout(), HasSubstr(absl::StrCat(hex(left2_ip), ":1C84")))
      << "right's connection goes to left's new address, port 7300";

  // Moved again (a spot node taken twice), back to the first nodes with third addresses: the
  // first address is still all right knows, and still reaches left (the record of the first
  // move went with the checkpoint).
  ASSERT_STOPPED(Shim("node-b").StopContainer(left2->ctr_id, 30));
  for (const auto& [node, ctr] : {std::pair{"node-b", left2->ctr_id}, {"node-a", right2->ctr_id}}) {
    auto st = ExitedStatus(node, ctr);
    ASSERT_TRUE(st.ok());
    ASSERT_EQ(st->exit_code(), 99) << node << ": " << TailOf(world().cryod(node).log());
  }
  auto left3 = member("node-a", "sums-left-3", "left", "0.0.0.0:7300", true);
  ASSERT_TRUE(left3.ok()) << left3.status();
  auto right3 = member("node-b", "sums-right-3", "right", left_ip + ":7300", true);
  ASSERT_TRUE(right3.ok()) << right3.status();
  const std::string left3_ip = PodIp("node-a", left3->pod_id);
  EXPECT_NE(left3_ip, left_ip);
  EXPECT_NE(left3_ip, left2_ip);
  started = StartTogether({{"node-a", &*left3}, {"node-b", &*right3}});
  ASSERT_TRUE(started.ok()) << started << "\nnode-a's cryod:\n"
                            << TailOf(world().cryod("node-a").log());
  const uint64_t from = U(Status("node-b", right3->ctr_id), "main");
  EXPECT_TRUE(StatusPast("node-b", right3->ctr_id, "main", from + 20, absl::Seconds(60)))
      << Status("node-b", right3->ctr_id).dump();
  dialled = redial("node-b", right3->ctr_id);
  EXPECT_EQ(U(dialled, "redial_errno"), 0u)
      << "dialling left's first address " << left_ip << " after two moves: " << dialled.dump();
  EXPECT_EQ(U(dialled, "redials"), 3u) << dialled.dump();
  EXPECT_EQ(U(Status("node-b", right3->ctr_id), "ok"), 1u);
}

// Benchmark, not a test (gtest runs no DISABLED_ test unless asked; scripts/bench-job-pods.sh
// asks): a job of two pods against one pod alone, on the container path, in the same run. Each
// repetition: one pod (cryo-sumpair listening, no job) stopped with its checkpoint on node A and
// its replacement started on node B; then a two-pod job (the running sums over TCP across the
// nodes) whose member on node A is stopped, both checkpointed at one cut, and whose
// replacements on the swapped nodes are started together. Times are the CRI calls' as kubelet
// would see them (StopContainer; StartContainer of the replacement(s), created beforehand), and
// the cut's skew from the job checkpoint's record. Medians of CRYO_BENCH_REPS (default 3).
TEST_F(ContainerModeE2e, DISABLED_BenchJobPodsAgainstOnePodAlone) {
  SumpairPods();
  int reps = 3;
  if (const char* r = getenv("CRYO_BENCH_REPS"); r != nullptr) (void)absl::SimpleAtoi(r, &reps);
  auto ann = [](const std::string& job, const std::string& member, bool resume) {
    std::map<std::string, std::string> a = {{"cryo.dev/checkpoint-on-stop", "true"},
                                            {"cryo.dev/checkpointed-exit-code", "99"}};
    if (!job.empty()) {
      a["cryo.dev/job"] = job;
      a["cryo.dev/job-size"] = "2";
      a["cryo.dev/job-member"] = member;
    } else {
      a["cryo.dev/workload"] = member;
    }
    if (resume) a["cryo.dev/resume"] = "auto";
    return a;
  };
  auto sumpair = [](const std::string& how, const std::string& where) {
    return std::vector<std::string>{"/opt/cryo/cryo-sumpair", "--status", "/tmp/status", how,
                                    where};
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> one_stop, one_start, job_stop, job_start, skew;
  for (int rep = 0; rep < reps; ++rep) {
    const std::string n = std::to_string(rep);
    // One pod doing a member's work alone: both ends of the running sums, over loopback.
    const std::vector<std::string> alone = {
        "sh", "-c",
        "/opt/cryo/cryo-sumpair --status /tmp/peer --listen 127.0.0.1:7301 & exec "
        "/opt/cryo/cryo-sumpair --status /tmp/status --connect 127.0.0.1:7301"};
    auto solo = RunPod("node-a", "solo-" + n, ann("", "solo-" + n, false), alone);
    ASSERT_TRUE(solo.ok()) << solo.status();
    ASSERT_TRUE(StatusPast("node-a", solo->ctr_id, "main", 20, absl::Seconds(60)));
    absl::Time t = absl::Now();
    ASSERT_STOPPED(Shim("node-a").StopContainer(solo->ctr_id, 30));
    one_stop.push_back(Secs(t));
    auto solo2 = RunPod("node-b", "solo-" + n + "-2", ann("", "solo-" + n, true), alone,
                        /*start=*/false);
    ASSERT_TRUE(solo2.ok()) << solo2.status();
    t = absl::Now();
    ASSERT_TRUE(Shim("node-b").StartContainer(solo2->ctr_id).ok());
    one_start.push_back(Secs(t));
    EXPECT_GT(U(Status("node-b", solo2->ctr_id), "main"), 20u) << "the pod started over";

    const std::string job = "bench" + n;
    auto left = RunPod("node-a", job + "-left", ann(job, "left", false),
                       sumpair("--listen", "0.0.0.0:7300"));
    ASSERT_TRUE(left.ok()) << left.status();
    const std::string left_ip = PodIp("node-a", left->pod_id);
    auto right = RunPod("node-b", job + "-right", ann(job, "right", false),
                        sumpair("--connect", left_ip + ":7300"));
    ASSERT_TRUE(right.ok()) << right.status();
    ASSERT_TRUE(StatusPast("node-b", right->ctr_id, "main", 20, absl::Seconds(60)));
    t = absl::Now();
    ASSERT_STOPPED(Shim("node-a").StopContainer(left->ctr_id, 30));
    job_stop.push_back(Secs(t));
    ASSERT_EQ(ExitedStatus("node-b", right->ctr_id)->exit_code(), 99);
    auto left2 = RunPod("node-b", job + "-left-2", ann(job, "left", true),
                        sumpair("--listen", "0.0.0.0:7300"), false);
    auto right2 = RunPod("node-a", job + "-right-2", ann(job, "right", true),
                         sumpair("--connect", left_ip + ":7300"), false);
    ASSERT_TRUE(left2.ok() && right2.ok());
    t = absl::Now();
    ASSERT_TRUE(StartTogether({{"node-b", &*left2}, {"node-a", &*right2}}).ok());
    job_start.push_back(Secs(t));
    ASSERT_TRUE(StatusPast("node-b", left2->ctr_id, "main",
                           U(Status("node-b", left2->ctr_id), "main") + 5, absl::Seconds(60)));
    EXPECT_EQ(U(Status("node-b", left2->ctr_id), "ok"), 1u);
    for (const auto& e : std::filesystem::directory_iterator(world().store() + "/jobs")) {
      const std::string name = e.path().filename().string();
      if (!absl::StartsWith(name, "cryo-e2e+" + job + "+") || !absl::EndsWith(name, ".json"))
        continue;
      auto rec = nlohmann::json::parse(Slurp(e.path().string()), nullptr, false);
      if (rec.is_object() && rec.contains("cut_ms")) skew.push_back(U(rec["cut_ms"], "cut_skew"));
    }
  }
  ASSERT_FALSE(skew.empty()) << "no job checkpoint record";
  const double os = median(one_stop), js = median(job_stop);
  const double ob = median(one_start), jb = median(job_start);
  std::cout << absl::StrFormat(
                   "[bench] container path, medians of %d: one pod's stop checkpoint %.3f s "
                   "(1.00), a job of two pods on two nodes %.3f s (%.2f), cut skew %.0f ms; one "
                   "pod's resume (StartContainer) %.3f s (1.00), the job's two resumed together "
                   "%.3f s (%.2f)",
                   reps, os, js, js / os, median(skew), ob, jb, jb / ob)
            << std::endl;
}

// Periodic job checkpoints (issue 37): a job whose pods ask for checkpoint-every is
// checkpointed in the background as a job, every member at one cut, driven by the node of its
// first member; both run on, retention keeps the job's newest three job checkpoints whole, and
// after both members are lost the replacements resume one of them, the same one.
TEST_F(ContainerModeE2e, PeriodicJobCheckpointsTakeEveryMemberAtOneCutAndTheReplacementsResume) {
  auto member = [&](const std::string& node, const std::string& pod, const std::string& name,
                    bool resume) {
    std::map<std::string, std::string> ann = {{"cryo.dev/checkpoint-every", "1s"},
                                              {"cryo.dev/checkpoint-on-stop", "false"},
                                              {"cryo.dev/job", "every"},
                                              {"cryo.dev/job-size", "2"},
                                              {"cryo.dev/job-member", name}};
    if (resume) ann["cryo.dev/resume"] = "auto";
    return RunPod(node, pod, ann, kCounter, /*start=*/!resume);
  };
  // The first member by name runs on node-b: node-b drives, node-a's scheduler lets it.
  auto a = member("node-a", "every-b", "b", false);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = member("node-b", "every-a", "a", false);
  ASSERT_TRUE(b.ok()) << b.status();
  // Job checkpoints by id: the parts of each, once committed.
  auto committed = [&] {
    std::map<std::string, std::vector<v1::CheckpointInfo>> out;
    for (const auto& c : Checkpoints(kWorkload)) {
      if (c.job_uncommitted().empty()) out[c.job_checkpoint()].push_back(c);
    }
    return out;
  };
  std::set<std::string> seen;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const auto& [id, parts] : committed()) seen.insert(id);
        return seen.size() >= 5;
      },
      absl::Seconds(90)))
      << "job checkpoints seen: " << seen.size() << "; node-b's cryod:\n"
      << TailOf(world().cryod("node-b").log());
  for (const auto& [id, parts] : committed()) {
    ASSERT_FALSE(id.empty()) << "a periodic checkpoint of a member alone";
    ASSERT_EQ(parts.size(), 2u) << id;
    std::set<std::string> members;
    for (const auto& p : parts) {
      members.insert(p.job_member());
      EXPECT_EQ(p.labels().at("cryo.dev/reason"), "periodic");
      EXPECT_TRUE(p.leave_running());
      EXPECT_EQ(p.labels().at("io.kubernetes.pod.name"), absl::StrCat("every-", p.job_member()))
          << "each part names its own pod";
    }
    EXPECT_EQ(members, (std::set<std::string>{"a", "b"})) << id;
  }
  // Retention: the job's newest three job checkpoints stay, whole.
  ASSERT_TRUE(WaitUntil([&] { return committed().size() <= 3; }, absl::Seconds(30)))
      << committed().size();
  {
    // Every committed one whole; besides them at most the parts of the one in flight.
    const auto all = Checkpoints(kWorkload);
    const auto now = committed();
    size_t whole = 0;
    for (const auto& [id, parts] : now) {
      EXPECT_EQ(parts.size(), 2u) << id;
      whole += parts.size();
    }
    EXPECT_LE(all.size() - whole, 2u) << "parts of deleted job checkpoints left behind";
  }
  // Both ran on through every checkpoint, counting without a gap.
  for (const Pod* p : {&*a, &*b}) {
    const auto ticks = Ticks(p->log_path);
    ASSERT_GT(ticks.size(), 5u);
    for (size_t i = 0; i < ticks.size(); ++i) ASSERT_EQ(ticks[i], static_cast<int>(i) + 1);
  }
  EXPECT_THAT(Slurp(world().cryod("node-b").log()), HasSubstr("periodic job checkpoint"));
  EXPECT_THAT(Slurp(world().cryod("node-a").log()), Not(HasSubstr("periodic job checkpoint")))
      << "node-a, which runs the second member by name, drove the job's checkpoints";

  // Both members lost (a plain stop: checkpoint-on-stop "false"); the replacements, swapped,
  // resume the job's newest job checkpoint, each its own part of it.
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  ASSERT_STOPPED(Shim("node-b").StopContainer(b->ctr_id, 30));
  // One in flight at the stops commits or not within moments: the replacements are created
  // once the job's checkpoints have stayed the same for a second.
  std::map<std::string, std::vector<v1::CheckpointInfo>> before = committed();
  int same = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::SleepFor(absl::Milliseconds(250));
        auto now = committed();
        same = now.size() == before.size() &&
                       std::equal(now.begin(), now.end(), before.begin(),
                                  [](const auto& x, const auto& y) { return x.first == y.first; })
                   ? same + 1
                   : 0;
        before = std::move(now);
        return same >= 4;
      },
      absl::Seconds(30)));
  ASSERT_FALSE(before.empty());
  auto a2 = member("node-b", "every-b-2", "b", true);
  ASSERT_TRUE(a2.ok()) << a2.status();
  auto b2 = member("node-a", "every-a-2", "a", true);
  ASSERT_TRUE(b2.ok()) << b2.status();
  absl::Status started = StartTogether({{"node-b", &*a2}, {"node-a", &*b2}});
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(WaitTicks(*a2, 3));
  ASSERT_TRUE(WaitTicks(*b2, 3));
  for (const auto& [pod, was] : {std::pair{&*a2, &*a}, std::pair{&*b2, &*b}}) {
    const int first = Ticks(pod->log_path).front();
    EXPECT_GT(first, 1) << "started over";
    EXPECT_LE(first, Ticks(was->log_path).back() + 1);
  }
  auto st = RuntimeStatus("node-b", a2->ctr_id);
  ASSERT_TRUE(st.ok());
  auto st2 = RuntimeStatus("node-a", b2->ctr_id);
  ASSERT_TRUE(st2.ok());
  const std::string from_a = st->status().annotations().at("cryo.dev/resume-from");
  const std::string from_b = st2->status().annotations().at("cryo.dev/resume-from");
  EXPECT_EQ(from_a.substr(0, from_a.rfind('.')), from_b.substr(0, from_b.rfind('.')))
      << "the members resumed different cuts: " << from_a << " and " << from_b;
  EXPECT_EQ(from_a.substr(from_a.rfind('.') + 1), "b");
  EXPECT_EQ(from_b.substr(from_b.rfind('.') + 1), "a");
}

// A member's stop when the job is not whole (a member missing): no job checkpoint of part of a
// job, a plain stop, and the container's log says why.
TEST_F(ContainerModeE2e, AJobWithAMemberMissingIsNotCheckpointedAtAMembersStop) {
  auto lone = RunPod("node-a", "trio-0",
                     {{"cryo.dev/checkpoint-on-stop", "true"},
                      {"cryo.dev/checkpointed-exit-code", "99"},
                      {"cryo.dev/job", "trio"},
                      {"cryo.dev/job-size", "3"}});
  ASSERT_TRUE(lone.ok()) << lone.status();
  ASSERT_TRUE(WaitTicks(*lone, 3));
  ASSERT_STOPPED(Shim("node-a").StopContainer(lone->ctr_id, 30));
  auto st = ExitedStatus("node-a", lone->ctr_id);
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->exit_code(), 99);
  EXPECT_TRUE(Checkpoints(kWorkload).empty());
  auto log = ReadCriLog(lone->log_path);
  ASSERT_TRUE(log.ok());
  std::string all;
  for (const auto& l : *log) all += l.text + "\n";
  EXPECT_THAT(all, HasSubstr("has 3 members, and 1 run (trio-0@node-a)")) << all;
}

// Periodic checkpoints (docs/operations.md): a pod that asks (the period alone opts it in) is
// checkpointed in the background every period while it runs on, a whole period between the
// publish of one and the start of the next, and retention keeps the newest few (3 on these
// nodes). Stopped, it is checkpointed at the stop too, as a checkpoint-on-stop pod is.
TEST_F(ContainerModeE2e, PeriodicCheckpointsRunInTheBackgroundAndTheNewestAreKept) {
  const std::string workload = "cryo-e2e.periodic-e2e.counter";
  auto a = RunPod("node-a", "periodic",
                  {{"cryo.dev/workload", "periodic-e2e"}, {"cryo.dev/checkpoint-every", "1s"}});
  ASSERT_TRUE(a.ok()) << a.status();
  std::set<std::string> seen;
  // Each one's start and the end of its stages up to the publish.
  std::map<absl::Time, absl::Time> spans;
  size_t most = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto list = Checkpoints(workload);
        for (const auto& c : list) {
          seen.insert(c.checkpoint_id());
          EXPECT_EQ(c.labels().at("cryo.dev/reason"), "periodic");
          EXPECT_TRUE(c.leave_running());
          absl::Time start;
          std::string err;
          EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, c.created_at(), &start, &err)) << err;
          uint64_t ms = 0;
          for (const auto& [stage, t] : c.stage_ms()) ms += t;
          spans[start] = start + absl::Milliseconds(ms);
        }
        most = std::max(most, list.size());
        return seen.size() >= 5;
      },
      absl::Seconds(120)))
      << "periodic checkpoints seen: " << seen.size() << "; cryod log:\n"
      << TailOf(world().cryod("node-a").log());
  // Retention runs right after each publish: at most one more than it keeps, for a moment.
  EXPECT_LE(most, 4u);
  // What each held the job for (docs/benchmarks.md quotes these; no assertion on time).
  for (absl::string_view line :
       absl::StrSplit(Slurp(world().cryod("node-a").log()), '\n', absl::SkipEmpty())) {
    if (absl::StrContains(line, "the job stalled")) std::cout << line << "\n";
  }
  ASSERT_TRUE(WaitUntil([&] { return Checkpoints(workload).size() <= 3; }, absl::Seconds(30)));
  // A whole period (1 s) from the end of each to the start of the next; printed, for the docs.
  for (auto it = spans.begin(); std::next(it) != spans.end(); ++it) {
    const absl::Duration gap = std::next(it)->first - it->second;
    std::cout << "periodic: " << absl::FormatDuration(gap) << " from a publish to the next start\n";
    EXPECT_GE(gap, absl::Seconds(1)) << "the next started before its period was over";
  }
  // The job ran on the whole time: one counter, never restarted, nothing skipped.
  std::vector<int> ticks = Ticks(a->log_path);
  ASSERT_GT(ticks.size(), 5u);
  for (size_t i = 0; i < ticks.size(); ++i) ASSERT_EQ(ticks[i], static_cast<int>(i) + 1);
  auto st = Shim("node-a").ContainerStatus(a->ctr_id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), cri::CONTAINER_RUNNING);
  // The period alone opted it in to a checkpoint at its stop (issue 42).
  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 30));
  st = ExitedStatus("node-a", a->ctr_id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->exit_code(), 75) << "stopped after a checkpoint";
  bool at_stop = false;
  for (const auto& c : Checkpoints(workload)) {
    at_stop |= c.labels().at("cryo.dev/reason") == "stop" && !c.leave_running();
  }
  EXPECT_TRUE(at_stop) << "no checkpoint at the stop; shim log:\n"
                       << TailOf(world().shim("node-a").log_file());
  // A period that is not one is refused when the container is created.
  auto bad =
      RunPod("node-a", "periodic-bad",
             {{"cryo.dev/workload", "periodic-bad"}, {"cryo.dev/checkpoint-every", "twenty"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("checkpoint-every"));
}

// The plan at a stop: this job's checkpoints take about 4 s on node A (its periodic one was held
// that long before its publish, as a slow store would), and the stop gives 3 s (2 s to cryod).
// No doomed checkpoint is taken: the job ends at once with the checkpointed exit code and a
// termination message naming the work lost, and its replacement on node B resumes from the
// periodic checkpoint.
TEST_F(ContainerModeE2e, AStopThatCouldNotCheckpointInTimeResumesFromTheNewestPeriodicOne) {
  const std::string workload = "cryo-e2e.plan-e2e.counter";
  const std::string hooks = world().HookDir("node-a");
  auto hook = [&](const char* what) { return absl::StrCat(hooks, "/before-publish.", what); };
  for (const char* f : {"enable", "reached", "release"}) ::unlink(hook(f).c_str());
  std::ofstream(hook("enable")) << "1";
  auto a = RunPod("node-a", "plan-1",
                  {{"cryo.dev/checkpoint-on-stop", "true"},
                   {"cryo.dev/workload", "plan-e2e"},
                   {"cryo.dev/checkpoint-every", "4s"}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(
      WaitUntil([&] { return ::access(hook("reached").c_str(), F_OK) == 0; }, absl::Seconds(60)))
      << "no periodic checkpoint started; cryod log:\n"
      << TailOf(world().cryod("node-a").log());
  absl::SleepFor(absl::Seconds(4));
  ::unlink(hook("enable").c_str());
  std::ofstream(hook("release")) << "1";
  ASSERT_TRUE(WaitUntil([&] { return Checkpoints(workload).size() == 1; }, absl::Seconds(30)));
  const v1::CheckpointInfo periodic = Checkpoints(workload)[0];
  EXPECT_EQ(periodic.labels().at("cryo.dev/reason"), "periodic");

  ASSERT_STOPPED(Shim("node-a").StopContainer(a->ctr_id, 3));
  auto stopped = ExitedStatus("node-a", a->ctr_id);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->state(), cri::CONTAINER_EXITED);
  EXPECT_EQ(stopped->exit_code(), 75) << "a stop the replacement resumes from: not a failure";
  const std::string message = Slurp(a->termination_log);
  EXPECT_THAT(message, HasSubstr("not checkpointed at this stop"));
  EXPECT_THAT(message, HasSubstr("s before the stop (that work is lost)"));
  auto list = Checkpoints(workload);
  ASSERT_EQ(list.size(), 1u) << "no checkpoint taken at the stop";
  EXPECT_EQ(list[0].checkpoint_id(), periodic.checkpoint_id());
  EXPECT_THAT(Slurp(world().cryod("node-a").log()),
              HasSubstr(absl::StrCat("the replacement resumes from ", periodic.checkpoint_id())));
  auto log = ReadCriLog(a->log_path);
  ASSERT_TRUE(log.ok());
  std::string all;
  for (const auto& l : *log) all += l.text + "\n";
  EXPECT_THAT(all, HasSubstr("cryo: not checkpointed at this stop"));
  const std::vector<int> old_ticks = Ticks(a->log_path);
  ASSERT_FALSE(old_ticks.empty());

  auto b = RunPod("node-b", "plan-2",
                  {{"cryo.dev/checkpoint-on-stop", "true"},
                   {"cryo.dev/workload", "plan-e2e"},
                   {"cryo.dev/resume", "auto"}});
  ASSERT_TRUE(b.ok()) << b.status();
  auto running = Shim("node-b").ContainerStatus(b->ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->annotations().at("cryo.dev/resume-from"), periodic.checkpoint_id());
  ASSERT_TRUE(WaitTicks(*b, 5));
  const std::vector<int> new_ticks = Ticks(b->log_path);
  // From where the periodic checkpoint cut it: past the start, before the stop.
  EXPECT_GT(new_ticks.front(), 1);
  EXPECT_LE(new_ticks.front(), old_ticks.back()) << "the work since the periodic one is lost";
  for (size_t i = 1; i < new_ticks.size(); ++i) EXPECT_EQ(new_ticks[i], new_ticks[i - 1] + 1);
  ::unlink(hook("release").c_str());
  ::unlink(hook("reached").c_str());
}

// A periodic checkpoint that fails (here CRIU refuses the job's deleted 2 MiB file, above the
// pod's 1 MiB ghost limit) publishes nothing, and the job runs on untouched.
TEST_F(ContainerModeE2e, APeriodicCheckpointThatFailsPublishesNothingAndTheJobRunsOn) {
  const std::string workload = "cryo-e2e.periodic-fails.counter";
  auto a = RunPod("node-a", "periodic-fails",
                  {{"cryo.dev/checkpoint-on-stop", "true"},
                   {"cryo.dev/workload", "periodic-fails"},
                   {"cryo.dev/criu-ghost-limit", "1Mi"},
                   {"cryo.dev/checkpoint-every", "1s"}},
                  {"sh", "-c",
                   "head -c 2097152 /dev/zero > /tmp/big; exec 4</tmp/big; rm /tmp/big; i=0; "
                   "while :; do i=$((i+1)); echo \"tick $i\"; sleep 0.1; done"});
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string failed = absl::StrCat("periodic checkpoint of ", workload, " failed");
  ASSERT_TRUE(
      WaitUntil([&] { return absl::StrContains(Slurp(world().cryod("node-a").log()), failed); },
                absl::Seconds(60)))
      << TailOf(world().cryod("node-a").log());
  EXPECT_TRUE(Checkpoints(workload).empty()) << "a failed checkpoint is never published";
  const size_t ticks = Ticks(a->log_path).size();
  ASSERT_TRUE(WaitTicks(*a, ticks + 10)) << "the job runs on";
  std::vector<int> all = Ticks(a->log_path);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int>(i) + 1);
}

// Found on 2026-11-24: after a cryod restart the shim took ~28 s (gRPC's reconnect backoff) to
// reach it again, failing replacement pods meanwhile.
TEST_F(ContainerModeE2e, TheShimReachesARestartedCryodWithinASecondOrTwo) {
  auto a = RunPod("node-a", "reconnect", {{"cryo.dev/checkpoint-on-stop", "true"}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitTicks(*a, 3));
  auto checkpoint = [&] {
    cri::CheckpointContainerRequest req;
    req.set_container_id(a->ctr_id);
    req.set_timeout(30);
    cri::CheckpointContainerResponse resp;
    return FromGrpc(Shim("node-a").Call(
        Shim("node-a").runtime(), &cri::RuntimeService::Stub::CheckpointContainer, req, &resp));
  };
  // Calls during a 10 s outage fail and set the shim's channel backing off (gRPC's default
  // backoff had grown to several seconds by then), as kubelet's replacement pods did.
  auto down = [&] {
    for (int i = 0; i < 10; ++i) {
      absl::Status s = checkpoint();
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      absl::SleepFor(absl::Seconds(1));
    }
  };
  ASSERT_TRUE(world().RestartCryod("node-a", down).ok());
  const absl::Time t0 = absl::Now();
  absl::Status last;
  ASSERT_TRUE(WaitUntil(
      [&] {
        last = checkpoint();
        return last.ok();
      },
      absl::Seconds(30)))
      << last;
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(2500))
      << "the shim took this long to see cryod again";
}

// Kubernetes' restore-from-image flow: kubelet's checkpoint archive of a counter on node A
// becomes an OCI image (buildah, as Kubernetes documents it), is imported into node B's
// containerd (as a pull from a registry would put it there), and a plain pod on B whose image is
// that checkpoint image resumes the counter. No shared store: the checkpoint is gone from the
// store before B sees the image.
class CheckpointImageE2e : public ContainerModeE2e {
 protected:
  // The numbers of the counter's /tmp/ticks, a line each.
  static absl::StatusOr<std::vector<int>> TicksFile(absl::string_view text) {
    std::vector<int> out;
    for (absl::string_view l : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      int n = 0;
      if (!absl::SimpleAtoi(l, &n)) return absl::DataLossError(absl::StrCat("tick '", l, "'"));
      out.push_back(n);
    }
    return out;
  }

  // Checkpoints a running counter on node-a through kubelet's API into `archive`; returns the
  // last tick it had written to its writable layer at the checkpoint.
  absl::StatusOr<int> ArchiveACounter(const std::string& pod, const std::string& archive) {
    auto p = RunPod("node-a", pod, {{"cryo.dev/checkpoint-on-stop", "true"}});
    if (!p.ok()) return p.status();
    if (!WaitTicks(*p, 5)) return absl::DeadlineExceededError("the counter does not count");
    grpc::Status st = KubeletCheckpoint("node-a", p->ctr_id, archive);
    if (!st.ok()) return FromGrpc(st);
    CriClient& shim = Shim("node-a");
    // The source pod is gone before the image is used, as after a node loss.
    (void)shim.StopContainer(p->ctr_id, 0);
    auto diff = container::ReadArchiveFile(archive, "rootfs-diff.tar");
    if (!diff.ok()) return diff.status();
    const std::string diff_path = absl::StrCat(archive, ".rootfs-diff.tar");
    std::ofstream(diff_path, std::ios::binary) << *diff;
    auto text = container::ReadArchiveFile(diff_path, "tmp/ticks");
    if (!text.ok()) return text.status();
    auto ticks = TicksFile(*text);
    if (!ticks.ok()) return ticks.status();
    return ticks->empty() ? 0 : ticks->back();
  }

  // `last` is the last line of the archive's /tmp/ticks. The counter logs i, then appends it to
  // the file: frozen between the two, it resumes by appending `last`+1 and logs `last`+2 next
  // (with a sleep put between them this test failed so; CI failed here once, 2026-12-02). Either
  // way the file on B is every tick from 1 without a gap, and holds every tick B logged.
  void ExpectResumedFrom(const Pod& b, int last) {
    std::vector<int> ticks = Ticks(b.log_path);
    ASSERT_FALSE(ticks.empty());
    EXPECT_TRUE(ticks.front() == last + 1 || ticks.front() == last + 2)
        << "resumed at " << ticks.front() << " from a checkpoint whose file ends at " << last;
    for (size_t i = 1; i < ticks.size(); ++i) EXPECT_EQ(ticks[i], ticks[i - 1] + 1);
    auto file = Exec("node-b", b.ctr_id, "cat /tmp/ticks");
    ASSERT_TRUE(file.ok()) << file.status();
    auto in_file = TicksFile(file->stdout());
    ASSERT_TRUE(in_file.ok()) << in_file.status();
    for (size_t i = 0; i < in_file->size(); ++i) {
      ASSERT_EQ((*in_file)[i], static_cast<int>(i) + 1)
          << "the writable layer and the memory disagree";
    }
    EXPECT_GE(static_cast<int>(in_file->size()), ticks.back()) << "the file lacks ticks B logged";
  }
};

TEST_F(CheckpointImageE2e, APodWhoseImageIsACheckpointImageResumesTheCounterWithoutTheStore) {
  const std::string archive = absl::StrCat(world().dir(), "/kubelet/checkpoints/img-src.tar");
  auto last = ArchiveACounter("img-src", archive);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_GE(*last, 4) << "5 ticks logged, the 5th maybe not yet in the file";
  const std::string image = "localhost/cryo-e2e/counter-checkpoint:1";
  absl::Status built = BuildAndImport(archive, image, "node-b");
  ASSERT_TRUE(built.ok()) << built;
  DeleteAllCheckpoints();
  ASSERT_TRUE(world().cryod("node-a").List().empty());

  auto b = RunImagePod("node-b", "img-restored", image);
  ASSERT_TRUE(b.ok()) << b.status();
  auto running = Shim("node-b").ContainerStatus(b->ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->state(), cri::CONTAINER_RUNNING);
  // Created from the image the checkpoint was taken in, resuming the imported checkpoint.
  EXPECT_EQ(running->image().image(), kBusyboxImage);
  EXPECT_EQ(running->annotations().at("cryo.dev/checkpoint-image"), image);
  const std::string id = running->annotations().at("cryo.dev/resume-from");
  EXPECT_EQ(id.rfind("image-", 0), 0u) << id;
  ASSERT_TRUE(WaitTicks(*b, 5));
  // The counter went on from its checkpoint, and its writable layer came along in the image.
  ExpectResumedFrom(*b, *last);
  // The imported checkpoint is in the store, marked with where it came from.
  auto list = world().cryod("node-b").List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].checkpoint_id(), id);
  EXPECT_EQ(list[0].labels().at("cryo.dev/source-image"), image);
}

// Device access comes from the new pod's spec, never from the checkpoint (issue 36): a
// checkpoint image whose OCI spec grants /dev/mem and whose annotations ask for every GPU
// resumes in a pod that asked for neither, and the pod has neither.
TEST_F(CheckpointImageE2e, DevicesACheckpointImageNamesAreNotGivenToItsPod) {
  const std::string archive = absl::StrCat(world().dir(), "/kubelet/checkpoints/img-dev.tar");
  auto last = ArchiveACounter("img-dev-src", archive);
  ASSERT_TRUE(last.ok()) << last.status();
  auto spec_text = container::ReadArchiveFile(archive, contract::archive::kSpecDump);
  ASSERT_TRUE(spec_text.ok()) << spec_text.status();
  nlohmann::json spec = nlohmann::json::parse(*spec_text);
  spec["linux"]["devices"].push_back({{"path", "/dev/mem"},
                                      {"type", "c"},
                                      {"major", 1},
                                      {"minor", 1},
                                      {"fileMode", 438},
                                      {"uid", 0},
                                      {"gid", 0}});
  spec["linux"]["resources"]["devices"].push_back(
      {{"allow", true}, {"type", "c"}, {"major", 1}, {"minor", 1}, {"access", "rwm"}});
  spec["annotations"]["cdi.k8s.io/cryo-e2e"] = "nvidia.com/gpu=all";
  // Rewritten as checkpoint-image.sh rewrites one: its own names, no "./" prefix.
  const std::string work = absl::StrCat(archive, ".d");
  ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  auto x = RunCapture({"tar", "-C", work, "-xf", archive}, absl::Minutes(1));
  ASSERT_TRUE(x.ok() && x->exit.exited && x->exit.code == 0) << (x.ok() ? x->output : "");
  std::ofstream(absl::StrCat(work, "/", contract::archive::kSpecDump)) << spec.dump(2);
  auto c =
      RunCapture({"/bin/sh", "-c", absl::StrCat("cd '", work, "' && tar -cf '", archive, "' -- *")},
                 absl::Minutes(1));
  ASSERT_TRUE(c.ok() && c->exit.exited && c->exit.code == 0) << (c.ok() ? c->output : "");
  const std::string image = "localhost/cryo-e2e/counter-checkpoint:devices";
  // This one is built by oci_archive.py, as on the GPU machine (no buildah there).
  setenv("CRYO_OCI_WRITER", "python", 1);
  absl::Status built = BuildAndImport(archive, image, "node-b");
  unsetenv("CRYO_OCI_WRITER");
  ASSERT_TRUE(built.ok()) << built;
  DeleteAllCheckpoints();

  auto b = RunImagePod("node-b", "img-dev", image);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(WaitTicks(*b, 3));
  ExpectResumedFrom(*b, *last);
  auto dev = Exec("node-b", b->ctr_id, "test -e /dev/mem && echo present || echo absent");
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(absl::StripAsciiWhitespace(dev->stdout()), "absent");
  // Nor does the runtime's spec of the new container grant it.
  auto resp = RuntimeStatus("node-b", b->ctr_id);
  ASSERT_TRUE(resp.ok()) << resp.status();
  const nlohmann::json info = nlohmann::json::parse(resp->info().at("info"));
  EXPECT_EQ(info["runtimeSpec"]["linux"]
                .value("devices", nlohmann::json::array())
                .dump()
                .find("/dev/mem"),
            std::string::npos);
  EXPECT_FALSE(info["runtimeSpec"]
                   .value("annotations", nlohmann::json::object())
                   .contains("cdi.k8s.io/cryo-e2e"));
}

TEST_F(CheckpointImageE2e, ADamagedCheckpointImageIsRefusedAndNothingStarts) {
  const std::string archive = absl::StrCat(world().dir(), "/kubelet/checkpoints/img-bad.tar");
  ASSERT_TRUE(ArchiveACounter("img-bad-src", archive).ok());
  auto pages = container::ListArchive(archive);
  ASSERT_TRUE(pages.ok());
  std::string victim;
  for (const auto& n : *pages) {
    if (absl::StartsWith(n, "checkpoint/pages-")) victim = n;
  }
  ASSERT_FALSE(victim.empty());
  const std::string image = "localhost/cryo-e2e/counter-checkpoint:tampered";
  absl::Status built = BuildAndImport(archive, image, "node-b", victim);
  ASSERT_TRUE(built.ok()) << built;
  DeleteAllCheckpoints();

  auto b = RunImagePod("node-b", "img-tampered", image);
  ASSERT_FALSE(b.ok()) << "a tampered checkpoint image was restored";
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("is a checkpoint image"));
  EXPECT_THAT(b.status().message(), HasSubstr(victim.substr(std::string("checkpoint/").size())));
  // Nothing was created in the pod, and nothing was published.
  cri::ListContainersRequest req;
  req.mutable_filter()->set_pod_sandbox_id(pods_.back().second);
  cri::ListContainersResponse resp;
  CriClient& shim = Shim("node-b");
  ASSERT_TRUE(
      shim.Call(shim.runtime(), &cri::RuntimeService::Stub::ListContainers, req, &resp).ok());
  EXPECT_EQ(resp.containers_size(), 0);
  EXPECT_TRUE(world().cryod("node-b").List().empty());
}

}  // namespace
}  // namespace cryo::e2e
