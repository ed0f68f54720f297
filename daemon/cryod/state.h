#pragma once

// What cryod's start-up steps share (main.cc): the state they build, one step's shape, and the
// two adapters the HTTP API and the job checkpoints read the engine and the Kubernetes API
// through. Only main.cc includes it.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/container/runtime.h"
#include "daemon/criu/criu.h"
#include "daemon/criu/pages_pool.h"
#include "daemon/cryod/config.h"
#include "daemon/cryod/unix_server.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/job_peers.h"
#include "daemon/engine/operation_runner.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/host_copy_pool.h"
#include "daemon/journal/journal.h"
#include "daemon/kube/api_client.h"
#include "daemon/kube/job_members.h"
#include "daemon/metrics/http_server.h"
#include "daemon/metrics/metrics.h"
#include "daemon/periodic/scheduler.h"
#include "daemon/service/convert.h"
#include "daemon/service/grpc_service.h"
#include "daemon/service/peer_client.h"
#include "daemon/service/peer_service.h"
#include "daemon/store/store.h"
#include "daemon/termination/watcher.h"
#include "lib/base/fd.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"

namespace cryo::cryod {

// What the read-only HTTP API reads: the engine's checkpoints as API messages.
struct ApiView {
  engine::Engine* engine;
  absl::StatusOr<std::vector<v1::CheckpointInfo>> List(const std::string& workload) {
    auto r = engine->List(workload);
    if (!r.ok()) return r.status();
    std::vector<v1::CheckpointInfo> out;
    for (const auto& c : *r) out.push_back(service::ToProto(c, /*with_files=*/false));
    return out;
  }
  absl::StatusOr<v1::CheckpointInfo> Get(const std::string& id) {
    auto r = engine->Get(id);
    if (!r.ok()) return r.status();
    return service::ToProto(*r, /*with_files=*/true);
  }
};

// A job's members as the Kubernetes API lists its running pods (engine::JobDirectory).
class ApiJobDirectory final : public engine::JobDirectory {
 public:
  ApiJobDirectory(const kube::ApiClient* api, std::string prefix)
      : api_(api), prefix_(std::move(prefix)) {}
  absl::StatusOr<std::vector<engine::JobCheckpointRequest::Member>> Members(
      const std::string& ns, const std::string& job) override {
    CRYO_ASSIGN_OR_RETURN(auto pods, kube::ListJobMembers(*api_, prefix_, ns, job));
    std::vector<engine::JobCheckpointRequest::Member> out;
    for (const auto& p : pods) {
      engine::JobCheckpointRequest::Member m;
      m.member = p.member;
      m.node = p.node;
      m.req.container_id = p.container_id;
      out.push_back(std::move(m));
    }
    return out;
  }

 private:
  const kube::ApiClient* api_;
  std::string prefix_;
};

struct State {
  int argc;
  char** argv;
  Config config;
  std::unique_ptr<criu::Criu> criu;
  std::unique_ptr<store::CheckpointStore> store;
  std::unique_ptr<journal::Journal> journal;
  std::string signing_key;
  std::unique_ptr<gpu::GpuManager> gpu;
  std::unique_ptr<gpu::Fastpath> fastpath;
  UniqueFd host_copy_fs;     // the huge-page tmpfs of leave-running drains (host_copy.h)
  UniqueFd dump_staging_fs;  // the tmpfs of leave-running dumps (engine/dump_staging.h)
  std::unique_ptr<criu::PagesPool> pages_pool;  // in it (dump_pages_pool_mib)
  std::unique_ptr<gpu::HostCopyPool> staging;   // gpu_staging_mib (in host_copy_fs)
  std::unique_ptr<runtime::ContainerRuntime> runtime;
  std::unique_ptr<metrics::Metrics> metrics;
  std::unique_ptr<metrics::HttpServer> http;
  proc::ProcReader proc;
  std::unique_ptr<engine::Engine> engine;
  // The engine as the HTTP API thread sees it: set once it has recovered.
  std::unique_ptr<ApiView> api_view;
  std::atomic<ApiView*> api_engine{nullptr};
  engine::OperationRegistry ops;
  std::unique_ptr<engine::OperationRunner> runner;
  std::unique_ptr<service::CryoService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<UnixListener> listener;
  // Job checkpoints across nodes: the Kubernetes API (in a pod), a job's members through it, the
  // token, the other nodes' cryods, this one's Peer service.
  std::unique_ptr<kube::ApiClient> kube;
  std::unique_ptr<ApiJobDirectory> job_directory;
  std::string peer_token;
  std::optional<service::PeerTls> peer_tls;
  std::unique_ptr<service::GrpcJobPeers> peers;
  std::unique_ptr<service::PeerService> peer_service;
  std::unique_ptr<grpc::Server> peer_server;
  std::unique_ptr<termination::TerminationWatcher> termination;
  std::unique_ptr<periodic::Scheduler> periodic;
  // Collects incomplete checkpoints (other nodes' abandoned stages too) while cryod runs.
  std::thread collector;
  absl::Mutex collector_mu;
  bool collector_stop ABSL_GUARDED_BY(collector_mu) = false;
  sigset_t signals;
};

enum class Result { kOk, kStop, kFatal };

// One step of cryod's start-up, and what undoes it at shutdown (nullptr: nothing).
struct Step {
  const char* name;
  Result (*run)(State&);
  void (*teardown)(State&);
};

}  // namespace cryo::cryod
