// End-to-end tests of cryo-cri-shim against real containerd 1.6 + runc: two private nodes, a
// shim in front of each, a CRI client doing what kubelet does. Needs root.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "e2e/containerd/cri_client.h"
#include "e2e/containerd/e2e_world.h"
#include "e2e/containerd/fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cryo::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// absl::Status back into gRPC's shape for RunLifecycle's records.
grpc::Status FromGrpcBack(const absl::Status& st) {
  return st.ok()
             ? grpc::Status::OK
             : grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

// Runs one pod through kubelet's lifecycle and records every answer with ids, timestamps and
// the log directory masked, so that two runs can be compared answer by answer.
std::vector<std::string> RunLifecycle(CriClient& client, const std::string& log_dir,
                                      const std::string& cgroup_parent) {
  std::vector<std::string> record;
  std::string pod_id;
  std::string ctr_id;
  auto mask = [&](std::string s) {
    if (!ctr_id.empty()) s = absl::StrReplaceAll(s, {{ctr_id, "<ctr>"}});
    if (!pod_id.empty()) s = absl::StrReplaceAll(s, {{pod_id, "<pod>"}});
    return absl::StrReplaceAll(s, {{log_dir, "<logdir>"}});
  };
  auto note = [&](const std::string& step, const grpc::Status& st, const std::string& what = "") {
    record.push_back(mask(absl::StrCat(step, ": ", st.error_code(), " ", st.error_message(),
                                       what.empty() ? "" : " | ", what)));
  };

  cri::VersionRequest vreq;
  vreq.set_version("v1");
  cri::VersionResponse vresp;
  grpc::Status vst =
      client.Call(client.runtime(), &cri::RuntimeService::Stub::Version, vreq, &vresp);
  note("Version", vst, vresp.ShortDebugString());

  cri::ImageStatusRequest ireq;
  ireq.mutable_image()->set_image(kBusyboxImage);
  cri::ImageStatusResponse iresp;
  grpc::Status ist =
      client.Call(client.images(), &cri::ImageService::Stub::ImageStatus, ireq, &iresp);
  note("ImageStatus", ist, absl::StrCat(iresp.image().id(), " ", iresp.image().size()));

  cri::PodSandboxConfig pod = MakePodConfig("lifecycle", "uid-lifecycle", log_dir, cgroup_parent);
  {
    cri::RunPodSandboxRequest req;
    *req.mutable_config() = pod;
    cri::RunPodSandboxResponse resp;
    grpc::Status st = client.Call(client.runtime(), &cri::RuntimeService::Stub::RunPodSandbox, req,
                                  &resp, absl::Minutes(1));
    pod_id = resp.pod_sandbox_id();
    note("RunPodSandbox", st, pod_id.empty() ? "no id" : "id");
  }
  {
    cri::PodSandboxStatusRequest req;
    req.set_pod_sandbox_id(pod_id);
    cri::PodSandboxStatusResponse resp;
    grpc::Status st =
        client.Call(client.runtime(), &cri::RuntimeService::Stub::PodSandboxStatus, req, &resp);
    cri::PodSandboxStatus s = resp.status();
    s.clear_created_at();
    note("PodSandboxStatus", st, s.ShortDebugString());
  }

  cri::ContainerConfig ctr =
      MakeContainerConfig("job", {"sh", "-c", "echo out; echo err >&2; exit 3"});
  {
    cri::CreateContainerRequest req;
    req.set_pod_sandbox_id(pod_id);
    *req.mutable_config() = ctr;
    *req.mutable_sandbox_config() = pod;
    cri::CreateContainerResponse resp;
    grpc::Status st = client.Call(client.runtime(), &cri::RuntimeService::Stub::CreateContainer,
                                  req, &resp, absl::Minutes(1));
    ctr_id = resp.container_id();
    note("CreateContainer", st, ctr_id.empty() ? "no id" : "id");
  }
  auto status_of = [&](const std::string& step) {
    cri::ContainerStatusRequest req;
    req.set_container_id(ctr_id);
    cri::ContainerStatusResponse resp;
    grpc::Status st =
        client.Call(client.runtime(), &cri::RuntimeService::Stub::ContainerStatus, req, &resp);
    cri::ContainerStatus s = resp.status();
    // Times differ between runs; whether they are set does not.
    std::string times =
        absl::StrCat("created=", s.created_at() > 0, " started=", s.started_at() > 0,
                     " finished=", s.finished_at() > 0);
    s.clear_created_at();
    s.clear_started_at();
    s.clear_finished_at();
    note(step, st, absl::StrCat(times, " ", s.ShortDebugString()));
  };
  status_of("ContainerStatus(created)");
  note("StartContainer", FromGrpcBack(client.StartContainer(ctr_id)));
  absl::StatusOr<cri::ContainerStatus> exited = client.WaitContainer(
      ctr_id, [](const cri::ContainerStatus& s) { return s.state() == cri::CONTAINER_EXITED; });
  record.push_back(absl::StrCat("exited: ", exited.ok()));
  status_of("ContainerStatus(exited)");

  absl::StatusOr<std::vector<LogLine>> log = ReadCriLog(absl::StrCat(log_dir, "/job.log"));
  std::string log_text = log.ok() ? "" : std::string(log.status().message());
  if (log.ok()) {
    // Per stream: stdout and stderr are separate pipes, their interleaving is not defined.
    for (const char* stream : {"stdout", "stderr"}) {
      absl::StrAppend(&log_text, stream, ":");
      for (const LogLine& l : *log) {
        if (l.stream == stream) absl::StrAppend(&log_text, l.text, ";");
      }
    }
  }
  record.push_back(mask(absl::StrCat("log: ", log_text)));

  {
    cri::ListContainersRequest req;
    req.mutable_filter()->set_pod_sandbox_id(pod_id);
    cri::ListContainersResponse resp;
    grpc::Status st =
        client.Call(client.runtime(), &cri::RuntimeService::Stub::ListContainers, req, &resp);
    for (cri::Container& c : *resp.mutable_containers()) c.clear_created_at();
    note("ListContainers", st, resp.ShortDebugString());
  }
  note("StopContainer(exited)", FromGrpcBack(client.StopContainer(ctr_id, 10)));
  note("StartContainer(unknown)", FromGrpcBack(client.StartContainer("no-such-container")));
  note("RemoveContainer", FromGrpcBack(client.RemoveContainer(ctr_id)));
  status_of("ContainerStatus(removed)");
  note("StopPodSandbox", FromGrpcBack(client.StopPodSandbox(pod_id)));
  note("RemovePodSandbox", FromGrpcBack(client.RemovePodSandbox(pod_id)));
  {
    cri::PodSandboxStatusRequest req;
    req.set_pod_sandbox_id(pod_id);
    cri::PodSandboxStatusResponse resp;
    note("PodSandboxStatus(removed)",
         client.Call(client.runtime(), &cri::RuntimeService::Stub::PodSandboxStatus, req, &resp));
  }
  RemovePodQuietly(client, pod_id);
  return record;
}

TEST_F(ContainerdE2e, PodLifecycleIsTheSameThroughTheShimAndDirectly) {
  CriClient direct(world().NodeSocket("node-a"));
  CriClient shim(world().ShimSocket("node-a"));
  std::string parent = world().CgroupParent("node-a");

  std::vector<std::string> without =
      RunLifecycle(direct, world().PodLogDir("node-a", "direct"), parent);
  std::vector<std::string> with = RunLifecycle(shim, world().PodLogDir("node-a", "shim"), parent);

  EXPECT_EQ(with, without);
  // And the runs did what the lifecycle means, not just the same thing twice.
  std::string all = absl::StrJoin(with, "\n");
  EXPECT_THAT(all, HasSubstr("runtime_name: \"containerd\""));
  EXPECT_THAT(all, HasSubstr("exited: 1"));
  EXPECT_THAT(all, HasSubstr("exit_code: 3"));
  EXPECT_THAT(all, HasSubstr("log: stdout:out;stderr:err;"));
  EXPECT_THAT(all, HasSubstr("RemoveContainer: 0"));
  EXPECT_THAT(all, HasSubstr("ContainerStatus(removed): 5 "));  // NOT_FOUND
  EXPECT_TRUE(world().shim("node-a").Alive());
}

TEST_F(ContainerdE2e, CounterContainerLogIsReadableThroughTheShim) {
  CriClient shim(world().ShimSocket("node-a"));
  std::string log_dir = world().PodLogDir("node-a", "counter");
  cri::PodSandboxConfig pod =
      MakePodConfig("counter", "uid-counter", log_dir, world().CgroupParent("node-a"));
  absl::StatusOr<std::string> pod_id = shim.RunPodSandbox(pod);
  ASSERT_TRUE(pod_id.ok()) << pod_id.status();
  absl::StatusOr<std::string> ctr_id = shim.CreateContainer(
      *pod_id,
      MakeContainerConfig("counter",
                          {"sh", "-c", "i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done"}),
      pod);
  ASSERT_TRUE(ctr_id.ok()) << ctr_id.status();
  ASSERT_TRUE(shim.StartContainer(*ctr_id).ok());

  std::vector<LogLine> lines;
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<std::vector<LogLine>> l = ReadCriLog(absl::StrCat(log_dir, "/counter.log"));
        if (l.ok()) lines = *l;
        return lines.size() >= 10;
      },
      absl::Seconds(30)))
      << "counter wrote " << lines.size() << " lines";
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].stream, "stdout");
    EXPECT_EQ(lines[i].text, std::to_string(i)) << "line " << i;
  }
  absl::StatusOr<cri::ContainerStatus> running = shim.ContainerStatus(*ctr_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->state(), cri::CONTAINER_RUNNING);

  ASSERT_TRUE(shim.StopContainer(*ctr_id, 0).ok());
  absl::StatusOr<cri::ContainerStatus> stopped = shim.ContainerStatus(*ctr_id);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->state(), cri::CONTAINER_EXITED);
  EXPECT_EQ(stopped->exit_code(), 128 + 9);  // PID 1 of its pid namespace: only KILL stops it
  EXPECT_TRUE(shim.RemoveContainer(*ctr_id).ok());
  EXPECT_TRUE(shim.StopPodSandbox(*pod_id).ok());
  EXPECT_TRUE(shim.RemovePodSandbox(*pod_id).ok());
}

// A running container on node-a for the exec tests; removed again at the end of the test.
class RunningContainer {
 public:
  RunningContainer(CriClient& client, E2eWorld& world, const std::string& name) : client_(client) {
    cri::PodSandboxConfig pod =
        MakePodConfig(name, absl::StrCat("uid-", name), world.PodLogDir("node-a", name),
                      world.CgroupParent("node-a"));
    absl::StatusOr<std::string> pod_id = client.RunPodSandbox(pod);
    if (!pod_id.ok()) {
      error_ = pod_id.status();
      return;
    }
    pod_id_ = *pod_id;
    absl::StatusOr<std::string> id =
        client.CreateContainer(pod_id_, MakeContainerConfig(name, {"sleep", "3600"}), pod);
    if (!id.ok()) {
      error_ = id.status();
      return;
    }
    id_ = *id;
    error_ = client.StartContainer(id_);
  }
  ~RunningContainer() {
    if (!id_.empty()) {
      (void)client_.StopContainer(id_, 0);
      (void)client_.RemoveContainer(id_);
    }
    RemovePodQuietly(client_, pod_id_);
  }
  const absl::Status& error() const { return error_; }
  const std::string& id() const { return id_; }
  const std::string& pod_id() const { return pod_id_; }

 private:
  CriClient& client_;
  absl::Status error_;
  std::string pod_id_;
  std::string id_;
};

TEST_F(ContainerdE2e, ExecSyncWorksThroughTheShim) {
  CriClient shim(world().ShimSocket("node-a"));
  CriClient direct(world().NodeSocket("node-a"));
  RunningContainer ctr(shim, world(), "execsync");
  ASSERT_TRUE(ctr.error().ok()) << ctr.error();

  cri::ExecSyncRequest req;
  req.set_container_id(ctr.id());
  for (const char* a : {"sh", "-c", "echo out; echo err >&2; exit 7"}) req.add_cmd(a);
  req.set_timeout(20);
  cri::ExecSyncResponse via_shim;
  grpc::Status st = shim.Call(shim.runtime(), &cri::RuntimeService::Stub::ExecSync, req, &via_shim);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(via_shim.stdout(), "out\n");
  EXPECT_EQ(via_shim.stderr(), "err\n");
  EXPECT_EQ(via_shim.exit_code(), 7);

  cri::ExecSyncResponse via_direct;
  ASSERT_TRUE(
      direct.Call(direct.runtime(), &cri::RuntimeService::Stub::ExecSync, req, &via_direct).ok());
  EXPECT_EQ(via_shim.SerializeAsString(), via_direct.SerializeAsString());
}

TEST_F(ContainerdE2e, StreamingCallsReturnTheRuntimesUrlThroughTheShim) {
  CriClient shim(world().ShimSocket("node-a"));
  CriClient direct(world().NodeSocket("node-a"));
  RunningContainer ctr(shim, world(), "streaming");
  ASSERT_TRUE(ctr.error().ok()) << ctr.error();

  // The URL points at containerd's own streaming server: same host and port either way, only
  // the one-time token differs.
  auto base = [](const std::string& url) { return url.substr(0, url.rfind('/')); };

  cri::ExecRequest exec;
  exec.set_container_id(ctr.id());
  exec.add_cmd("echo");
  exec.add_cmd("hi");
  exec.set_stdout(true);
  cri::ExecResponse exec_shim, exec_direct;
  ASSERT_TRUE(shim.Call(shim.runtime(), &cri::RuntimeService::Stub::Exec, exec, &exec_shim).ok());
  ASSERT_TRUE(
      direct.Call(direct.runtime(), &cri::RuntimeService::Stub::Exec, exec, &exec_direct).ok());
  EXPECT_THAT(exec_shim.url(), StartsWith("http://127.0.0.1:"));
  EXPECT_THAT(exec_shim.url(), HasSubstr("/exec/"));
  EXPECT_EQ(base(exec_shim.url()), base(exec_direct.url()));

  cri::AttachRequest attach;
  attach.set_container_id(ctr.id());
  attach.set_stdout(true);
  cri::AttachResponse attach_shim;
  ASSERT_TRUE(
      shim.Call(shim.runtime(), &cri::RuntimeService::Stub::Attach, attach, &attach_shim).ok());
  EXPECT_THAT(attach_shim.url(), HasSubstr("/attach/"));

  cri::PortForwardRequest pf;
  pf.set_pod_sandbox_id(ctr.pod_id());
  pf.add_port(8080);
  cri::PortForwardResponse pf_shim;
  ASSERT_TRUE(
      shim.Call(shim.runtime(), &cri::RuntimeService::Stub::PortForward, pf, &pf_shim).ok());
  EXPECT_THAT(pf_shim.url(), HasSubstr("/portforward/"));
}

TEST_F(ContainerdE2e, UnknownMethodsAreForwarded) {
  CriClient shim(world().ShimSocket("node-a"));
  CriClient direct(world().NodeSocket("node-a"));

  // A method nobody serves: containerd's own answer comes back, not one made up by the shim.
  auto [st_shim, out_shim] = shim.RawUnary("/runtime.v1.RuntimeService/NoSuchMethod", "");
  auto [st_direct, out_direct] = direct.RawUnary("/runtime.v1.RuntimeService/NoSuchMethod", "");
  EXPECT_EQ(st_shim.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(st_shim.error_code(), st_direct.error_code());
  EXPECT_EQ(st_shim.error_message(), st_direct.error_message());

  // A service the shim has no proto for at all: containerd 1.6 still serves CRI v1alpha2.
  cri::VersionRequest req;
  req.set_version("v1alpha2");
  auto [st_old, out_old] =
      shim.RawUnary("/runtime.v1alpha2.RuntimeService/Version", req.SerializeAsString());
  ASSERT_TRUE(st_old.ok()) << st_old.error_message();
  cri::VersionResponse resp;  // same wire shape in both versions
  ASSERT_TRUE(resp.ParseFromString(out_old));
  EXPECT_EQ(resp.runtime_name(), "containerd");
  EXPECT_EQ(resp.runtime_api_version(), "v1alpha2");
}

TEST_F(ContainerdE2e, RuntimeDownGivesUnavailableAndTheShimRecovers) {
  CriClient shim(world().ShimSocket("node-b"));
  cri::VersionRequest req;
  cri::VersionResponse resp;
  ASSERT_TRUE(shim.Call(shim.runtime(), &cri::RuntimeService::Stub::Version, req, &resp).ok());

  ASSERT_TRUE(world().StopNode("node-b").ok());
  grpc::Status st = shim.Call(shim.runtime(), &cri::RuntimeService::Stub::Version, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr("cryo-cri-shim: container runtime at unix://" +
                                            world().NodeSocket("node-b") + " is unavailable"));
  cri::ListContainersRequest lreq;
  cri::ListContainersResponse lresp;
  EXPECT_EQ(shim.Call(shim.runtime(), &cri::RuntimeService::Stub::ListContainers, lreq, &lresp)
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(world().shim("node-b").Alive());

  ASSERT_TRUE(world().StartNode("node-b").ok());
  grpc::Status last;
  EXPECT_TRUE(WaitUntil(
      [&] {
        last = shim.Call(shim.runtime(), &cri::RuntimeService::Stub::Version, req, &resp,
                         absl::Seconds(5));
        return last.ok();
      },
      absl::Seconds(30)))
      << "shim did not recover: " << last.error_message();
  EXPECT_EQ(resp.runtime_name(), "containerd");
  EXPECT_TRUE(world().shim("node-b").Alive());
}

TEST_F(ContainerdE2e, ShimShutsDownCleanlyOnSigterm) {
  std::string socket = absl::StrCat(world().dir(), "/extra-shim.sock");
  absl::StatusOr<std::unique_ptr<ShimProcess>> shim =
      ShimProcess::Start(CRYO_SHIM_BINARY_FOR_TESTS, socket, world().NodeSocket("node-a"),
                         absl::StrCat(world().dir(), "/extra-shim.log"));
  ASSERT_TRUE(shim.ok()) << shim.status();
  // kubelet keeps its connection open while the shim stops.
  CriClient client(socket);
  cri::VersionRequest req;
  cri::VersionResponse resp;
  ASSERT_TRUE(client.Call(client.runtime(), &cri::RuntimeService::Stub::Version, req, &resp).ok());

  absl::StatusOr<int> status = (*shim)->Stop();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "wait status " << *status;
  EXPECT_NE(access(socket.c_str(), F_OK), 0) << "socket left behind";
}

}  // namespace
}  // namespace cryo::e2e
