// cryod: the per-node checkpoint daemon. Startup is a list of small steps on one shared state;
// each returns ok, stop (clean exit) or fatal, and the teardown steps always run.

#include <grpcpp/grpcpp.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/api/http_api.h"
#include "daemon/container/container_checkpoint.h"
#include "daemon/container/runtime.h"
#include "daemon/criu/criu.h"
#include "daemon/cryod/config.h"
#include "daemon/cryod/health.h"
#include "daemon/cryod/state.h"
#include "daemon/cryod/unix_server.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/job_peers.h"
#include "daemon/engine/operation_runner.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/gpu_manager_factory.h"
#include "daemon/gpu/host_copy.h"
#include "daemon/gpu/host_copy_pool.h"
#include "daemon/journal/journal.h"
#include "daemon/kube/api_client.h"
#include "daemon/kube/job_members.h"
#include "daemon/metrics/http_server.h"
#include "daemon/metrics/metrics.h"
#include "daemon/metrics/shim_metrics.h"
#include "daemon/periodic/scheduler.h"
#include "daemon/service/convert.h"
#include "daemon/service/grpc_service.h"
#include "daemon/service/peer_client.h"
#include "daemon/service/peer_service.h"
#include "daemon/store/signature.h"
#include "daemon/store/store.h"
#include "daemon/termination/watcher.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"
#include "prometheus/text_serializer.h"

namespace cryo::cryod {
namespace {

// How often incomplete checkpoints are collected while cryod runs.
constexpr absl::Duration kCollectEvery = absl::Minutes(10);

// A helper binary installed beside cryod.
std::string SiblingBinary(const std::string& name) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return name;
  std::string self(buf, n);
  return self.substr(0, self.rfind('/') + 1) + name;
}

// Starts a leave-running checkpoint of a managed container as an operation of its own; the
// schedule's are kBackground (a stop's checkpoint cancels them) with ids beginning with
// engine::kPeriodicOpPrefix, the others kNormal with ids of the runner's making (empty prefix).
absl::StatusOr<std::shared_ptr<engine::Operation>> StartContainerCheckpoint(
    State& st, const container::OptedIn& c, const std::string& id_prefix) {
  engine::CheckpointRequest req;
  req.container_id = c.container_id;
  req.leave_running = true;
  req.workload = c.workload;
  req.labels = c.labels;
  req.criu = {c.criu.tcp_established, c.criu.tcp_close,   c.criu.skip_in_flight,
              c.criu.link_remap,      c.criu.ghost_limit, c.criu.ext_unix_sk};
  engine::Engine* e = st.engine.get();
  engine::OperationRunner::StartOptions opt;
  if (!id_prefix.empty()) opt.priority = engine::Priority::kBackground;
  if (!c.job.empty()) {
    // A member of a job of several pods: the job, every member at one cut (each with its own
    // container's workload key and pod labels), and every member runs on.
    engine::JobCheckpointRequest jr;
    jr.namespace_ = c.job_namespace;
    jr.job = c.job;
    jr.job_size = c.job_size;
    jr.member_defaults = req;
    jr.member_defaults.container_id.clear();
    jr.member_defaults.workload.clear();
    jr.member_defaults.labels.clear();
    for (const auto& [k, v] : c.labels) {
      if (k == contract::Key(st.config.annotation_prefix, contract::label::kReason)) {
        jr.member_defaults.labels[k] = v;
      }
    }
    return st.runner->Start(
        id_prefix.empty() ? "" : absl::StrCat(id_prefix, RandomHex(8)), "checkpoint-job",
        absl::StrCat("job ", c.job_namespace, "/", c.job),
        [e, jr](engine::Operation& op) -> absl::StatusOr<engine::OperationResult> {
          auto r = e->CheckpointJob(jr, op);
          if (!r.ok()) return r.status();
          return engine::OperationResult(*std::move(r));
        },
        opt);
  }
  return st.runner->Start(
      id_prefix.empty() ? "" : absl::StrCat(id_prefix, RandomHex(8)), "checkpoint",
      absl::StrCat("container ", c.container_id.substr(0, 13)),
      [e, req](engine::Operation& op) -> absl::StatusOr<engine::OperationResult> {
        auto r = e->Checkpoint(req, op);
        if (!r.ok()) return r.status();
        return engine::OperationResult(*std::move(r));
      },
      opt);
}

// Starts a checkpoint (leave running: a notice may be withdrawn, and kubelet's own stop, if it
// comes, checkpoints again) of every running container whose pod opted in to
// checkpoint-on-stop, each as its own operation; returns how many started.
absl::StatusOr<int> CheckpointOptedIn(State& st, const std::string& reason) {
  if (!st.runtime) {
    return absl::FailedPreconditionError("no container runtime configured (runtime_endpoint)");
  }
  auto opted = container::OptedInContainers(*st.runtime, st.config.annotation_prefix, reason);
  if (!opted.ok()) return opted.status();
  int started = 0;
  std::set<std::string> jobs;  // a job's members on this node: one job checkpoint
  for (const auto& c : *opted) {
    if (!c.checkpoint_on_stop) continue;
    if (!c.job.empty() && !jobs.insert(absl::StrCat(c.job_namespace, "/", c.job)).second) continue;
    auto op = StartContainerCheckpoint(st, c, "");
    // Containers already being checkpointed refuse a second one; that is fine.
    if (op.ok()) {
      ++started;
    } else {
      CRYO_LOG(Warning) << "checkpoint of container " << c.container_id << " (" << reason
                        << "): " << op.status();
    }
  }
  return started;
}

Result Fatal(const char* what, const absl::Status& s) {
  CRYO_LOG(Error) << what << ": " << s;
  return Result::kFatal;
}

Result StartConfig(State& st) {
  auto c = LoadConfig(st.argc, st.argv);
  if (absl::IsCancelled(c.status())) {
    std::cout << c.status().message();
    return Result::kStop;
  }
  if (!c.ok()) {
    std::cerr << "cryod: " << c.status().message() << "\n";
    return Result::kFatal;
  }
  st.config = *c;
  auto lvl = ParseLogLevel(st.config.log_level);
  if (!lvl.ok()) {
    std::cerr << "cryod: log_level: " << lvl.status().message() << "\n";
    return Result::kFatal;
  }
  SetLogProgram("cryod");
  SetLogLevel(*lvl);
  return Result::kOk;
}

Result StartPrivileges(State& st) {
  // Images and logs hold process memory: nothing cryod or CRIU creates is for others.
  ::umask(077);
  if (::geteuid() != 0) {
    CRYO_LOG(Error) << "cryod must run as root (CRIU needs CAP_SYS_ADMIN and ptrace)";
    return Result::kFatal;
  }
  // Block the signals we wait for, before any thread starts.
  sigemptyset(&st.signals);
  sigaddset(&st.signals, SIGTERM);
  sigaddset(&st.signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &st.signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return Result::kOk;
}

Result StartCriu(State& st) {
  criu::CriuConfig cc;
  cc.path = st.config.criu;
  cc.hw_breakpoints = st.config.criu_hw_breakpoints;
  auto c = criu::CreateCriuExec(cc);
  if (!c.ok()) return Fatal("CRIU", c.status());
  st.criu = std::move(*c);
  CRYO_LOG(Info) << "CRIU " << st.criu->version() << " at " << st.criu->path();
  if (!st.criu->check_error().empty()) {
    CRYO_LOG(Warning) << "criu check failed (checkpoints may fail): " << st.criu->check_error();
  }
  return Result::kOk;
}

// Every step of a checkpoint writes the journal; on the store's own disk, with checkpoints
// being written, each write waited 0.1-0.6 s (two jobs on two H200s, docs/benchmarks.md).
void WarnIfJournalSharesTheStoresDisk(const std::string& journal, const std::string& store) {
  struct stat js = {};
  struct stat ss = {};
  struct statfs jf = {};
  if (::stat(journal.c_str(), &js) != 0 || ::stat(store.c_str(), &ss) != 0 ||
      ::statfs(journal.c_str(), &jf) != 0) {
    return;
  }
  if (js.st_dev != ss.st_dev || jf.f_type == TMPFS_MAGIC || jf.f_type == RAMFS_MAGIC) return;
  CRYO_LOG(Warning) << "journal " << journal << " is on the store's filesystem: its writes wait "
                    << "behind the checkpoints being written, several jobs checkpointed at once "
                    << "vacate their GPUs slower; set journal_dir to a tmpfs such as "
                    << "/run/cryo/journal (docs/operations.md, Sizing)";
}

Result StartStore(State& st) {
  auto s = fs::MakeDirs(st.config.state_dir, 0700);
  if (!s.ok()) return Fatal("state dir", s);
  store::LocalStoreOptions o{st.config.store, st.config.node_name, st.config.store_fsync};
  auto store = store::CreateLocalStore(o);
  if (!store.ok()) return Fatal("store", store.status());
  st.store = std::move(*store);
  auto j = journal::Journal::Open(st.config.journal_dir);
  if (!j.ok()) return Fatal("journal", j.status());
  if (auto held = (*j)->HoldExclusively(); !held.ok()) return Fatal("journal", held);
  st.journal = std::move(*j);
  // Operations a cryod with the default journal_dir left in flight (an upgrade that moved it).
  const std::string former = fs::Join(st.config.state_dir, "journal");
  auto moved = st.journal->Adopt(former);
  if (!moved.ok()) return Fatal("journal", moved.status());
  if (*moved > 0) {
    CRYO_LOG(Warning) << "journal: took " << *moved << " entries from " << former
                      << " (its former place)";
  }
  WarnIfJournalSharesTheStoresDisk(st.config.journal_dir, st.config.store);
  auto key = store::LoadOrCreateSigningKey(st.config.signing_key_file);
  if (!key.ok()) return Fatal("signing key", key.status());
  st.signing_key = *std::move(key);
  CRYO_LOG(Info) << "store " << st.config.store << ", state " << st.config.state_dir << ", journal "
                 << st.config.journal_dir;
  return Result::kOk;
}

Result StartGpu(State& st) {
  gpu::GpuConfig gc;
  gc.plugin_dir = st.config.gpu_plugin_dir;
  gc.plugins = st.config.gpu_plugins;
  gc.thp_during_checkpoint = st.config.gpu_thp_during_checkpoint;
  // NCCL's shared memory: the engine decides, since the fast path can carry it (engine/
  // checkpoint.cc); a cuda plugin that does not know the option refuses it itself, as before.
  gc.plugin_options["cuda"]["report_nccl_ipc"] = true;
  auto g = gpu::CreateGpuManager(gc);
  if (!g.ok()) return Fatal("GPU plugins", g.status());
  st.gpu = std::move(*g);
  for (const auto& p : st.gpu->Plugins()) {
    CRYO_LOG(Info) << "GPU plugin " << p.name << " " << p.version << ": "
                   << (p.available ? "available" : "unavailable") << " (" << p.detail << ")";
  }
  return Result::kOk;
}

Result StartMetrics(State& st) {
  st.metrics = std::make_unique<metrics::Metrics>();
  if (st.config.metrics_address.empty()) return Result::kOk;
  auto registry = st.metrics->registry();
  store::CheckpointStore* store = st.store.get();
  metrics::HttpRoutes routes;
  routes.Exact("/metrics", [registry] {
    prometheus::TextSerializer ser;
    return metrics::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                                 ser.Serialize(registry->Collect())};
  });
  const criu::Criu* criu = st.criu.get();
  const uint64_t min_free = static_cast<uint64_t>(st.config.health_min_free_mb) << 20;
  // Not ready until the journal's interrupted operations are finished or undone (step
  // "recover"): the socket is not served before then either.
  const std::atomic<ApiView*>* ready = &st.api_engine;
  routes.Exact("/healthz", [store, criu, min_free, ready] {
    if (ready->load(std::memory_order_acquire) == nullptr) {
      return HealthResponse(
          absl::UnavailableError("cryod is recovering the operations its last run left in flight"));
    }
    return HealthResponse(CheckHealth(*store, *criu, min_free));
  });
  if (!st.config.shim_metrics_file.empty()) {
    routes.Exact("/metrics/shim", [path = st.config.shim_metrics_file] {
      return metrics::ShimMetricsResponse(path, absl::Now());
    });
  }
  // The engine comes later (step "recover"): the API answers 503 until then. It lists every
  // namespace's checkpoints: only to who shows the token, or on a loopback address.
  api::ApiAccess access;
  if (!st.config.http_api_token_file.empty()) {
    auto token = api::ReadApiToken(st.config.http_api_token_file);
    if (!token.ok()) return Fatal("http_api_token_file", token.status());
    access.token = *token;
  }
  access.open = metrics::IsLoopbackAddress(st.config.metrics_address);
  if (access.token.empty() && !access.open) {
    CRYO_LOG(Warning) << "the HTTP checkpoint API is off: " << st.config.metrics_address
                      << " is not a loopback address and no http_api_token_file is set";
  }
  api::AddCheckpointRoutes(api::ReaderOver(&st.api_engine), routes, access);
  metrics::HttpServerOptions ho;
  ho.max_connections = st.config.http_max_connections;
  ho.request_timeout = absl::Milliseconds(st.config.http_request_timeout_ms);
  auto http = metrics::HttpServer::Create(st.config.metrics_address, std::move(routes), ho);
  if (!http.ok()) return Fatal("metrics endpoint", http.status());
  st.http = std::move(*http);
  CRYO_LOG(Info) << "metrics on " << st.config.metrics_address << " (port " << st.http->port()
                 << ")";
  return Result::kOk;
}

Result StartRuntime(State& st) {
  if (st.config.runtime_endpoint.empty()) {
    CRYO_LOG(Info) << "no runtime_endpoint: container mode off";
    return Result::kOk;
  }
  auto rt = runtime::ConnectCri(st.config.runtime_endpoint, absl::Seconds(10));
  if (!rt.ok()) return Fatal("runtime_endpoint", rt.status());
  st.runtime = std::move(*rt);
  // The runtime may come up after cryod: its state is asked per operation.
  CRYO_LOG(Info) << "container runtime at " << st.runtime->endpoint() << ": " << st.runtime->name();
  return Result::kOk;
}

// What a node keeps available before memory cryod holds for speed (the staging memory, the
// pages pool) is let go: a sixteenth of it, at least 1 GiB.
uint64_t NodeLowWater() { return std::max<uint64_t>(1ull << 30, gpu::TotalHostMemory() / 16); }

// The staging memory (gpu_staging_mib): filled in the background, slot by slot, as the node's
// memory allows.
void StartStaging(State& st, engine::EngineConfig& ec) {
  const Config& c = st.config;
  if (c.gpu_staging_mib <= 0) return;
  gpu::HostCopyPool::Options o;
  o.slots = c.gpu_staging_slots;
  if (o.slots == 0) o.slots = std::max<int>(1, static_cast<int>(st.gpu->Devices().size()));
  // Whole huge pages per slot.
  constexpr uint64_t kHuge = 2ull << 20;
  const uint64_t total = uint64_t(c.gpu_staging_mib) << 20;
  o.slot_bytes = std::max(kHuge, (total / o.slots + kHuge - 1) / kHuge * kHuge);
  o.fs = st.host_copy_fs.get();
  o.threads = std::max(2, static_cast<int>(std::thread::hardware_concurrency() / 4));
  // A node short of memory gets the staging memory back first: slots are let go.
  o.low_water = NodeLowWater();
  if (metrics::Metrics* m = st.metrics.get()) {
    o.changed = [m](const gpu::HostCopyPool::Counts& c) {
      m->SetStagingSlots(c.ready, c.busy, c.released);
    };
  }
  st.staging = std::make_unique<gpu::HostCopyPool>(o);
  ec.fastpath.staging = st.staging.get();
  CRYO_LOG(Info) << "staging memory for drains: " << st.staging->Describe()
                 << ", filled in the background; let go while the node has under "
                 << (o.low_water >> 20) << " MiB available";
}

Result StartRecover(State& st) {
  engine::EngineConfig ec;
  ec.node_name = st.config.node_name;
  ec.state_dir = st.config.state_dir;
  ec.signing_key = st.signing_key;
  ec.pid_wait_timeout = absl::Milliseconds(st.config.pid_wait_timeout_ms);
  ec.gpu_lock_timeout = absl::Milliseconds(st.config.gpu_lock_timeout_ms);
  ec.incomplete_ttl = absl::Seconds(st.config.incomplete_ttl_s);
  ec.job_gather_timeout = absl::Seconds(std::max(1, st.config.job_gather_timeout_s));
  ec.retention_keep = st.config.retention_keep;
  ec.self_pid = ::getpid();
  ec.nsexec_path = st.config.nsexec.empty() ? SiblingBinary("cryo-nsexec") : st.config.nsexec;
  ec.annotation_prefix = st.config.annotation_prefix;
  ec.criu_defaults = st.config.criu_defaults;
  ec.fastpath.enabled = st.config.gpu_fast_path;
  if (st.config.gpu_fast_path_threads > 0) {
    ec.fastpath.threads = st.config.gpu_fast_path_threads;
  }
  ec.fastpath.writers = st.config.gpu_fast_path_writers;
  ec.dump_copy_threads = st.config.dump_copy_threads;
  ec.dump_pre_copy = st.config.dump_pre_copy;
  ec.dump_pre_copy_shared = st.config.dump_pre_copy_shared;
  ec.fastpath.in_memory = st.config.gpu_fast_path_in_memory;
  ec.fastpath.write_start = *engine::ParseGpuWriteStart(st.config.gpu_write_start);
  ec.fastpath.park = st.config.gpu_park;
  ec.fastpath.restore_into_gpu = st.config.gpu_restore_into_gpu;
  if (st.config.gpu_park || st.config.gpu_restore_into_gpu) {
    ec.fastpath.parker.binary =
        st.config.gpu_parker.empty() ? SiblingBinary("cryo-gpu-parker") : st.config.gpu_parker;
    ec.fastpath.parker.libcuda = st.config.gpu_parker_libcuda;
  }
  ec.fastpath.incremental = st.config.gpu_fast_path_incremental;
  if (ec.fastpath.in_memory) {
    auto hc = gpu::MountHostCopyFs(fs::Join(st.config.state_dir, "gpu-host-copy"));
    if (hc.ok()) {
      st.host_copy_fs = std::move(*hc);
      ec.fastpath.host_copy_fs = st.host_copy_fs.get();
    } else {
      CRYO_LOG(Warning) << "host copies of GPU data go into memfds (4 KiB pages, slower copies): "
                        << hc.status();
    }
    StartStaging(st, ec);
  }
  if (st.config.dump_in_memory) {
    auto ds = gpu::MountPrivateTmpfs(fs::Join(st.config.state_dir, "dump-staging"),
                                     "cryo-dump-staging", gpu::TmpfsHuge::kWithinSize);
    if (ds.ok()) {
      st.dump_staging_fs = std::move(*ds);
      ec.dump_staging_fs = st.dump_staging_fs.get();
      if (st.config.dump_pages_pool_mib > 0) {
        criu::PagesPool::Options po;
        po.dir = absl::StrCat("/proc/", ::getpid(), "/fd/", ec.dump_staging_fs, "/.pages-pool");
        po.cap = uint64_t(st.config.dump_pages_pool_mib) << 20;
        po.available = [] { return gpu::AvailableHostMemory(); };
        po.low_water = NodeLowWater();
        po.poll = absl::Seconds(1);
        st.pages_pool = std::make_unique<criu::PagesPool>(std::move(po));
        ec.pages_pool = st.pages_pool.get();
      }
    } else {
      CRYO_LOG(Warning) << "leave-running checkpoints dump into the store (the job is held until "
                        << "it is written): " << ds.status();
    }
  }
  ec.fastpath_library = st.config.gpu_fast_path_library;
  // Always there, even when off for new checkpoints: recovery may owe a job a refill.
  st.fastpath = gpu::NewFastpath(&st.proc);
  if (const char* h = ::getenv("CRYOD_TEST_HOOK_DIR")) ec.test_hook_dir = h;
  engine::EngineDeps deps{st.store.get(),   st.criu.get(), st.gpu.get(),     st.journal.get(),
                          st.metrics.get(), &st.proc,      st.runtime.get(), st.fastpath.get()};
  // Other nodes' cryods, for job checkpoints that span nodes: all share one token.
  if (!st.config.peer_listen.empty() || !st.config.peers.empty()) {
    if (st.config.peer_token_file.empty()) {
      return Fatal("peer_token_file",
                   absl::InvalidArgumentError("peer_listen and peers need the nodes' shared "
                                              "token (peer_token_file)"));
    }
    auto token = api::ReadApiToken(st.config.peer_token_file, "the peer token");
    if (!token.ok()) return Fatal("peer_token_file", token.status());
    st.peer_token = *token;
    if (!st.config.peer_tls_dir.empty()) {
      auto tls = service::ReadPeerTls(st.config.peer_tls_dir);
      if (!tls.ok()) return Fatal("peer_tls_dir", tls.status());
      st.peer_tls = *std::move(tls);
    } else {
      CRYO_LOG(Warning) << "no peer_tls_dir: other nodes' cryods are reached in plaintext, the "
                           "nodes' token readable on the network";
    }
    // In a pod: a job's members and the other nodes' cryods (the chart's pods, serving on this
    // node's peer port) come from the Kubernetes API; `peers` lists them otherwise.
    service::GrpcJobPeers::Lookup lookup;
    if (auto kc = kube::InClusterConfig(); kc.ok()) {
      auto api = kube::ApiClient::Create(*kc, absl::Seconds(10));
      if (!api.ok()) return Fatal("Kubernetes API", api.status());
      st.kube = std::move(*api);
      st.job_directory =
          std::make_unique<ApiJobDirectory>(st.kube.get(), st.config.annotation_prefix);
      deps.jobs = st.job_directory.get();
      const std::string own_ns = [] {
        auto n = fs::ReadFile(absl::StrCat(kube::kServiceAccountDir, "/namespace"));
        return n.ok() ? std::string(absl::StripAsciiWhitespace(*n)) : std::string("cryo-system");
      }();
      int port = 0;
      const size_t colon = st.config.peer_listen.rfind(':');
      if (colon == std::string::npos ||
          !absl::SimpleAtoi(st.config.peer_listen.substr(colon + 1), &port)) {
        port = 0;
      }
      const kube::ApiClient* kapi = st.kube.get();
      lookup = [kapi, own_ns, port](const std::string& node) -> absl::StatusOr<std::string> {
        if (port <= 0) {
          return absl::FailedPreconditionError("this cryod has no peer_listen port to ask on");
        }
        CRYO_ASSIGN_OR_RETURN(auto all, kube::ListPeerAddresses(
                                            *kapi, own_ns, contract::k8s::kCryoPodSelector, port));
        auto it = all.find(node);
        if (it == all.end()) {
          return absl::NotFoundError(
              absl::StrCat("no running cryod pod on node ", node, " in ", own_ns));
        }
        return it->second;
      };
      CRYO_LOG(Info) << "job members and other nodes' cryods from the Kubernetes API";
    } else {
      CRYO_LOG(Info) << "not in a pod (" << kc.status().message()
                     << "): job checkpoints list their members, and `peers` the other nodes";
    }
    st.peers = std::make_unique<service::GrpcJobPeers>(st.config.peers, st.peer_token, lookup,
                                                       st.peer_tls);
    deps.peers = st.peers.get();
  }
  st.engine = std::make_unique<engine::Engine>(ec, deps);
  auto s = st.engine->Recover();
  if (!s.ok()) return Fatal("journal recovery", s);
  st.api_view = std::make_unique<ApiView>(ApiView{st.engine.get()});
  st.api_engine.store(st.api_view.get(), std::memory_order_release);
  st.runner = std::make_unique<engine::OperationRunner>(&st.ops, st.metrics.get());
  return Result::kOk;
}

Result StartServe(State& st) {
  st.service = std::make_unique<service::CryoService>(st.engine.get(), st.runner.get(), &st.ops);
  grpc::ServerBuilder b;
  b.RegisterService(st.service.get());
  st.server = b.BuildAndStart();
  if (!st.server) return Fatal("gRPC", absl::InternalError("server did not start"));
  std::set<int> uids(st.config.allowed_uids.begin(), st.config.allowed_uids.end());
  auto l = UnixListener::Create(st.config.socket, uids, st.server.get());
  if (!l.ok()) return Fatal("socket", l.status());
  st.listener = std::move(*l);
  CRYO_LOG(Info) << "cryod " << CRYO_VERSION << " serving on " << st.config.socket << " (node "
                 << st.config.node_name << ")";
  if (!st.config.peer_listen.empty()) {
    st.peer_service = std::make_unique<service::PeerService>(
        st.engine.get(), service::PeerOptions{st.peer_token, st.config.peer_process_members});
    grpc::ServerBuilder pb;
    int port = 0;
    pb.AddListeningPort(st.config.peer_listen,
                        service::PeerServerCredentials(st.peer_tls ? &*st.peer_tls : nullptr),
                        &port);
    pb.RegisterService(st.peer_service.get());
    service::SetPeerKeepalive(&pb);
    st.peer_server = pb.BuildAndStart();
    if (!st.peer_server || port == 0) {
      return Fatal("peer_listen", absl::UnavailableError(absl::StrCat(
                                      "cannot serve the Peer service on ", st.config.peer_listen)));
    }
    CRYO_LOG(Info) << "serving other nodes' cryods on " << st.config.peer_listen
                   << (st.peer_tls ? " (mutual TLS)" : " (plaintext)");
  }
  // Jobs owed their GPU memory by a cryod that died get it back while this one serves.
  st.engine->RecoverInBackground();
  return Result::kOk;
}

Result StartCollector(State& st) {
  st.collector = std::thread([&st] {
    for (;;) {
      {
        absl::MutexLock l(&st.collector_mu);
        if (st.collector_mu.AwaitWithTimeout(absl::Condition(&st.collector_stop), kCollectEvery)) {
          return;
        }
      }
      st.engine->CollectIncomplete();
    }
  });
  return Result::kOk;
}

Result StartTermination(State& st) {
  if (st.config.termination_providers.empty()) return Result::kOk;
  if (!st.runtime) {
    CRYO_LOG(Warning) << "termination_providers set but no runtime_endpoint: notices "
                         "cannot checkpoint containers; not watching";
    return Result::kOk;
  }
  termination::WatcherConfig wc;
  wc.providers = st.config.termination_providers;
  wc.poll_interval = absl::Milliseconds(st.config.termination_poll_ms);
  wc.gce_url = st.config.termination_gce_url;
  wc.aws_url = st.config.termination_aws_url;
  wc.azure_url = st.config.termination_azure_url;
  wc.azure_vm_name = st.config.termination_azure_vm_name;
  auto w =
      termination::TerminationWatcher::CreateFromConfig(wc, [&st](const termination::Notice& n) {
        CRYO_LOG(Warning) << "termination notice from " << n.provider << " (" << n.kind << ", "
                          << n.detail << "): checkpointing opted-in containers";
        auto started = CheckpointOptedIn(st, contract::label::kReasonNotice);
        if (!started.ok()) {
          CRYO_LOG(Error) << "termination notice: " << started.status();
        } else {
          CRYO_LOG(Info) << "termination notice: " << *started << " checkpoints started";
        }
      });
  if (!w.ok()) return Fatal("termination notices", w.status());
  st.termination = std::move(*w);
  if (auto s = st.termination->Start(); !s.ok()) return Fatal("termination notices", s);
  return Result::kOk;
}

Result StartPeriodic(State& st) {
  if (!st.runtime) return Result::kOk;  // periodic checkpoints are of containers
  periodic::SchedulerDeps d;
  d.containers = [&st] {
    return container::OptedInContainers(*st.runtime, st.config.annotation_prefix,
                                        contract::label::kReasonPeriodic);
  };
  d.newest_good = [&st](const std::string& w) { return st.engine->NewestGood(w); };
  d.store_free_bytes = [&st] { return st.store->FreeBytes(); };
  d.predict = [&st](const std::string& w, uint64_t bytes) {
    return st.engine->pace().Predict(w, bytes);
  };
  d.start = [&st](const container::OptedIn& c) {
    return StartContainerCheckpoint(st, c, engine::kPeriodicOpPrefix);
  };
  d.drives_job = [&st](const container::OptedIn& c) {
    return st.engine->DrivesJob(c.job_namespace, c.job, c.job_size);
  };
  d.metrics = st.metrics.get();
  periodic::SchedulerLimits limits;
  limits.min_every = absl::Seconds(st.config.periodic_min_every_s);
  limits.max_running = st.config.periodic_max_running;
  st.periodic =
      std::make_unique<periodic::Scheduler>(std::move(d), absl::Seconds(st.config.periodic_every_s),
                                            absl::Milliseconds(st.config.periodic_tick_ms), limits);
  st.periodic->Start();
  return Result::kOk;
}

Result StartWait(State& st) {
  int sig = 0;
  sigwait(&st.signals, &sig);
  CRYO_LOG(Info) << "signal " << sig << ": shutting down";
  return Result::kOk;
}

// Teardowns, run newest first for every step that began (each is safe whatever part of its
// step ran): stop taking new work, let running operations end (bounded), then close the rest.
void StopTermination(State& st) { st.termination.reset(); }

void StopPeriodic(State& st) { st.periodic.reset(); }

void StopCollector(State& st) {
  if (!st.collector.joinable()) return;
  {
    absl::MutexLock l(&st.collector_mu);
    st.collector_stop = true;
  }
  st.collector.join();
}

void StopServing(State& st) {
  st.listener.reset();
  if (st.peer_server) {
    st.peer_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  // Imports run on the gRPC handler's thread, outside the runner: they stop at their next check.
  if (st.engine) st.engine->Stop(absl::Seconds(st.config.shutdown_grace_s));
  // Refuses new operations at once, lets running ones finish within the grace, then cancels
  // them (each rolls back or, past its publish, finishes) and joins every thread: nothing runs
  // on the engine once this returns.
  if (st.runner) st.runner->Shutdown(absl::Seconds(st.config.shutdown_grace_s));
  if (st.server) st.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void StopMetrics(State& st) { st.http.reset(); }

const std::vector<Step>& StartSteps() {
  static const std::vector<Step> steps = {
      {"config", StartConfig, nullptr},
      {"privileges", StartPrivileges, nullptr},
      {"criu", StartCriu, nullptr},
      {"store", StartStore, nullptr},
      {"gpu", StartGpu, nullptr},
      {"metrics", StartMetrics, StopMetrics},
      {"runtime", StartRuntime, nullptr},
      {"recover", StartRecover, nullptr},
      {"serve", StartServe, StopServing},
      {"collector", StartCollector, StopCollector},
      {"termination", StartTermination, StopTermination},
      {"periodic", StartPeriodic, StopPeriodic},
      {"wait", StartWait, nullptr},
  };
  return steps;
}

}  // namespace
}  // namespace cryo::cryod

int main(int argc, char** argv) {
  cryo::cryod::State st;
  st.argc = argc;
  st.argv = argv;
  int code = 0;
  const auto& steps = cryo::cryod::StartSteps();
  size_t began = 0;
  for (const auto& step : steps) {
    ++began;
    auto r = step.run(st);
    if (r == cryo::cryod::Result::kStop) break;
    if (r == cryo::cryod::Result::kFatal) {
      code = 1;
      break;
    }
  }
  // Newest first, the step that stopped included (it may have half begun).
  for (size_t i = began; i-- > 0;) {
    if (steps[i].teardown) steps[i].teardown(st);
  }
  return code;
}
