#pragma once

// cryod's settings: embedded defaults, then the JSON config file, then flags. Every key is
// documented in docs/operations.md and by `cryod --help`.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/criu/anon_pages.h"
#include "daemon/criu/options.h"

namespace cryo::cryod {

struct Config {
  std::string config_file;  // empty: /etc/cryo/cryod.json if it exists
  std::string socket = "/run/cryo/cryod.sock";
  static constexpr const char* kDefaultStateDir = "/var/lib/cryo";
  // The default state_dir's journal: on the tmpfs beside the socket, off the store's disk.
  static constexpr const char* kDefaultJournalDir = "/run/cryo/journal";
  std::string state_dir = kDefaultStateDir;
  std::string store;  // empty: <state_dir>/store
  // The journal of operations in flight. It need outlive cryod only, not the node, and every
  // checkpoint step waits for its writes: a tmpfs (the chart's /run/cryo/journal) keeps them off
  // a disk the store's writes keep busy. Empty: kDefaultJournalDir with the default state_dir,
  // else <state_dir>/journal (a state_dir of its own, as each test's cryod has, keeps its
  // journal with it).
  std::string journal_dir;
  // The key manifests are signed with (created when absent). Nodes that restore each other's
  // process-mode checkpoints share it; empty: <state_dir>/signing.key.
  std::string signing_key_file;
  std::string node_name;                           // empty: the host name
  std::string criu;                                // empty: search PATH
  bool criu_hw_breakpoints = false;                // see criu::CriuConfig::hw_breakpoints
  std::string metrics_address = "127.0.0.1:9464";  // empty: no HTTP endpoint
  // A file holding the token callers of the HTTP checkpoint API must show. Empty: the API is
  // served only when metrics_address is a loopback address.
  std::string http_api_token_file;
  // Job checkpoints that span nodes (docs/architecture.md, "Job checkpoints"): the address this
  // cryod serves the Peer service on (empty: none), the file with the token every node's cryod
  // shares (a Secret), other nodes' cryods by node name ("node=host:port"), and whether peers
  // may name process members (containers whose pods are members otherwise; tests, nodes
  // without Kubernetes).
  std::string peer_listen;
  std::string peer_token_file;
  std::string peer_tls_dir;
  std::map<std::string, std::string> peers;
  bool peer_process_members = false;
  // The CRI shim's --metrics-file, served at /metrics/shim; empty: no such route.
  std::string shim_metrics_file;
  // HTTP endpoint: connections served at once, and the deadline of each request as a whole.
  int http_max_connections = 16;
  int http_request_timeout_ms = 10000;
  // /healthz says unready below this much free space in the store (a checkpoint would fail).
  int health_min_free_mb = 256;
  std::string log_level = "info";
  int retention_keep = 0;
  // Periodic checkpoints (daemon/periodic): how often containers that opted in to
  // checkpoint-on-stop are checkpointed in the background unless their pod says
  // (checkpoint-every); 0: only pods that ask. The schedule looks every `periodic_tick_ms`.
  int periodic_every_s = 0;
  int periodic_tick_ms = 10000;
  // A pod's shorter checkpoint-every is raised to this; at most this many periodic checkpoints
  // run on the node at once (0: no cap). Pods are not to keep a node's CRIU and store busy.
  int periodic_min_every_s = 60;
  int periodic_max_running = 4;
  int pid_wait_timeout_ms = 10000;
  int gpu_lock_timeout_ms = 10000;
  int incomplete_ttl_s = 86400;
  int job_gather_timeout_s = 300;
  bool store_fsync = true;
  std::vector<int> allowed_uids = {0};
  std::string gpu_plugin_dir = "/usr/local/lib/cryo/gpu";
  std::vector<std::string> gpu_plugins;  // empty: every plugin found in gpu_plugin_dir
  // Transparent huge pages mode while GPU memory moves to host ("always": ~1.4x faster
  // device-to-host copies; node-wide while a checkpoint runs). Empty leaves THP alone.
  std::string gpu_thp_during_checkpoint;
  // The GPU fast path (docs/gpu.md): jobs that run libcryo_gpu_fastpath.so move the device
  // memory it owns themselves, into `gpu_fast_path_writers` files per process written in
  // parallel with direct I/O (0: into the process's memory, for CRIU to write).
  bool gpu_fast_path = true;
  int gpu_fast_path_threads = 0;  // copy threads per process; 0: one per core
  int gpu_fast_path_writers = 4;
  // Leave-running checkpoints drain into cryod's memory and write the files as the job runs on.
  bool gpu_fast_path_in_memory = true;
  // Memory held faulted in for drains (MiB, 0: none) in this many slots (0: one per GPU): stop
  // checkpoints drain into it too (daemon/gpu/host_copy_pool.h).
  int gpu_staging_mib = 0;
  int gpu_staging_slots = 0;
  std::string gpu_write_start = "drained";
  // Leave-running drains park the job's GPU data in GPU memory a process of cryod's holds
  // (cryo-gpu-parker), instead of copying it to host memory while the job is held.
  bool gpu_park = false;
  // Restores onto the same GPUs read the fast path's data from the store into GPU memory a
  // process of cryod's holds, beside CRIU (docs/proposals/restore-into-gpu.md).
  bool gpu_restore_into_gpu = false;
  std::string gpu_parker;          // cryo-gpu-parker (empty: next to the cryod binary)
  std::string gpu_parker_libcuda;  // the driver it opens (empty: libcuda.so.1)
  // ... and CRIU dumps them into node memory, copied into the store as the job runs on.
  bool dump_in_memory = true;
  // ... and the pages images' memory of one such dump kept for the next, up to this (MiB, 0:
  // none; criu/pages_pool.h).
  int dump_pages_pool_mib = 0;
  // Threads that copy a process-mode dump's anonymous memory (0: CRIU copies it).
  int dump_copy_threads = criu::DefaultDumpCopyThreads();
  bool dump_pre_copy = true;
  // ... and their shared memory after the drain (off: on the machines measured it did not pay).
  bool dump_pre_copy_shared = false;
  // ... referring to the chunks the workload's newest good checkpoint holds unchanged.
  bool gpu_fast_path_incremental = true;
  std::string gpu_fast_path_library = "/usr/local/lib/cryo/libcryo_gpu_fastpath.so";
  int shutdown_grace_s = 120;
  // Container mode: CRI socket of containerd or CRI-O (unix:///path); empty: processes only.
  std::string runtime_endpoint;
  // cryo-nsexec (empty: next to the cryod binary).
  std::string nsexec;
  // Prefix of the pod annotations of opted-in pods, as the shim uses it.
  std::string annotation_prefix = "cryo.dev";
  // CRIU options of every job unless a request or its pod's annotations say otherwise.
  criu::NodeDefaults criu_defaults;
  // Node termination notices (daemon/termination): clouds whose metadata endpoints are polled
  // (gce, aws, azure); empty: off. The URLs are the clouds' link-local defaults.
  std::vector<std::string> termination_providers;
  int termination_poll_ms = 1000;
  std::string termination_gce_url = "http://169.254.169.254/computeMetadata/v1/instance/";
  std::string termination_aws_url = "http://169.254.169.254";
  std::string termination_azure_url =
      "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01";
  std::string termination_azure_vm_name;  // empty: learned from the instance metadata
};

// Parses argv (flags override the file). --help prints usage and returns CANCELLED.
absl::StatusOr<Config> LoadConfig(int argc, char** argv);
std::string Usage();

}  // namespace cryo::cryod
