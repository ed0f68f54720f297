#include "daemon/cryod/config.h"

#include <unistd.h>

#include <functional>
#include <iostream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/engine/gpu_write_start.h"
#include "lib/base/flags.h"
#include "lib/base/fs.h"
#include "lib/base/human.h"
#include "lib/base/status.h"
#include "nlohmann/json.hpp"

namespace cryo::cryod {
namespace {

struct Key {
  const char* name;
  const char* help;
  // Sets from a string (flags) ...
  std::function<absl::Status(Config&, const std::string&)> set;
  // ... or from JSON (config file).
  std::function<absl::Status(Config&, const nlohmann::json&)> set_json;
};

absl::Status Bad(const std::string& key, const std::string& v, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": '", v, "' is not ", want));
}

Key Str(const char* name, const char* help, std::string Config::*field) {
  return {name, help,
          [field](Config& c, const std::string& v) {
            c.*field = v;
            return absl::OkStatus();
          },
          [field, name](Config& c, const nlohmann::json& j) {
            if (!j.is_string()) return Bad(name, j.dump(), "a string");
            c.*field = j.get<std::string>();
            return absl::OkStatus();
          }};
}

Key Int(const char* name, const char* help, int Config::*field) {
  return {name, help,
          [field, name](Config& c, const std::string& v) {
            if (!absl::SimpleAtoi(v, &(c.*field)) || c.*field < 0) {
              return Bad(name, v, "a non-negative integer");
            }
            return absl::OkStatus();
          },
          [field, name](Config& c, const nlohmann::json& j) {
            if (!j.is_number_integer() || j.get<int>() < 0) {
              return Bad(name, j.dump(), "a non-negative integer");
            }
            c.*field = j.get<int>();
            return absl::OkStatus();
          }};
}

Key Bool(const char* name, const char* help, bool Config::*field) {
  return {name, help,
          [field, name](Config& c, const std::string& v) {
            if (!absl::SimpleAtob(v, &(c.*field))) return Bad(name, v, "true or false");
            return absl::OkStatus();
          },
          [field, name](Config& c, const nlohmann::json& j) {
            if (!j.is_boolean()) return Bad(name, j.dump(), "true or false");
            c.*field = j.get<bool>();
            return absl::OkStatus();
          }};
}

absl::Status SetTerminationProviders(Config& c, const std::vector<std::string>& names,
                                     const std::string& given) {
  c.termination_providers.clear();
  for (std::string n : names) {
    n = std::string(absl::StripAsciiWhitespace(n));
    if (n != "gce" && n != "aws" && n != "azure") {
      return Bad("termination_providers", given, "a list of gce, aws, azure");
    }
    c.termination_providers.push_back(n);
  }
  return absl::OkStatus();
}

Key CriuBool(const char* name, const char* help, bool criu::NodeDefaults::*field) {
  return {name, help,
          [field, name](Config& c, const std::string& v) {
            if (!absl::SimpleAtob(v, &(c.criu_defaults.*field)))
              return Bad(name, v, "true or false");
            return absl::OkStatus();
          },
          [field, name](Config& c, const nlohmann::json& j) {
            if (!j.is_boolean()) return Bad(name, j.dump(), "true or false");
            c.criu_defaults.*field = j.get<bool>();
            return absl::OkStatus();
          }};
}

absl::Status SetTcp(Config& c, const std::string& v) {
  const std::string l = absl::AsciiStrToLower(v);
  if (l == "auto") {
    c.criu_defaults.tcp_established = criu::NodeDefaults::Tcp::kAuto;
  } else if (l == "true") {
    c.criu_defaults.tcp_established = criu::NodeDefaults::Tcp::kOn;
  } else if (l == "false") {
    c.criu_defaults.tcp_established = criu::NodeDefaults::Tcp::kOff;
  } else {
    return Bad("criu_tcp_established", v, "true, false or auto");
  }
  return absl::OkStatus();
}

absl::Status SetGhost(Config& c, const std::string& v) {
  uint64_t bytes = 0;
  if (absl::Status s = human::ParseSize(v, &bytes); !s.ok()) {
    return Bad("criu_ghost_limit", v, "a size such as 64Mi");
  }
  if (bytes > criu::kMaxGhostLimit) {
    return Bad("criu_ghost_limit", v, "at most 16Gi (the contents go into every checkpoint)");
  }
  c.criu_defaults.ghost_limit = bytes;
  return absl::OkStatus();
}

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = {
      Str("socket", "unix socket of the gRPC API (0600, root only)", &Config::socket),
      Str("state_dir", "journal and per-operation CRIU logs", &Config::state_dir),
      Str("store", "checkpoint store path; a shared mount for cross-node restore", &Config::store),
      Str("journal_dir",
          "journal of operations in flight; needs to outlive cryod, not the node: a tmpfs such "
          "as /run/cryo/journal keeps its writes from waiting behind the store's",
          &Config::journal_dir),
      Str("signing_key_file",
          "key that signs manifests (created if absent, 0600); shared by nodes that restore "
          "each other's process checkpoints",
          &Config::signing_key_file),
      Str("node_name", "name recorded in manifests", &Config::node_name),
      Str("criu", "CRIU binary", &Config::criu),
      Bool("criu_hw_breakpoints",
           "let CRIU use x86 hardware breakpoints (off: it traps on syscalls instead; some VMs "
           "never deliver the breakpoints and CRIU hangs)",
           &Config::criu_hw_breakpoints),
      Str("metrics_address", "HOST:PORT for /metrics and /healthz; empty disables",
          &Config::metrics_address),
      Str("http_api_token_file",
          "file with the token the HTTP checkpoint API (/v1/...) asks its callers for; empty: "
          "the API is served only on a loopback metrics_address",
          &Config::http_api_token_file),
      Str("peer_listen",
          "HOST:PORT where other nodes' cryods reach this one for job checkpoints that span "
          "nodes; empty: none",
          &Config::peer_listen),
      Str("peer_token_file",
          "file with the token every node's cryod shares for job checkpoints across nodes "
          "(the chart's Secret); required with peer_listen or peers",
          &Config::peer_token_file),
      Str("peer_tls_dir",
          "directory with the nodes' peer certificate (ca.crt, tls.crt, tls.key: the chart's "
          "Secret); with it the Peer service and its clients speak mutual TLS; empty: plaintext, "
          "the token alone",
          &Config::peer_tls_dir),
      Bool("peer_process_members",
           "let peers name process members (pids); off: only containers whose pods are "
           "members of the job",
           &Config::peer_process_members),
      Str("shim_metrics_file",
          "the CRI shim's --metrics-file, served at /metrics/shim on the metrics address; "
          "empty: not served",
          &Config::shim_metrics_file),
      Int("http_max_connections",
          "HTTP requests handled at once (one thread each); 4x as many connections may be "
          "sending theirs; past either, 503 at once",
          &Config::http_max_connections),
      Int("http_request_timeout_ms",
          "an HTTP request must arrive whole within this; slow clients are cut off",
          &Config::http_request_timeout_ms),
      Int("health_min_free_mb", "/healthz is 503 while the store has less free space than this",
          &Config::health_min_free_mb),
      Str("log_level", "debug, info, warning or error", &Config::log_level),
      Int("retention_keep", "newest checkpoints kept per workload; 0 keeps all",
          &Config::retention_keep),
      Int("periodic_every_s",
          "background checkpoints of checkpoint-on-stop containers every this many seconds "
          "unless their pod sets checkpoint-every; 0: only pods that ask",
          &Config::periodic_every_s),
      Int("periodic_tick_ms", "how often the periodic schedule looks for due checkpoints",
          &Config::periodic_tick_ms),
      Int("periodic_min_every_s",
          "the shortest period a pod's checkpoint-every gets; shorter ones are raised to it",
          &Config::periodic_min_every_s),
      Int("periodic_max_running",
          "periodic checkpoints running on the node at once; more wait (0: no cap)",
          &Config::periodic_max_running),
      Int("pid_wait_timeout_ms", "how long a restore waits for the checkpoint's pids to be free",
          &Config::pid_wait_timeout_ms),
      Int("gpu_lock_timeout_ms", "bound on locking GPU processes before a checkpoint",
          &Config::gpu_lock_timeout_ms),
      Int("incomplete_ttl_s", "age after which another node's unfinished checkpoint is collected",
          &Config::incomplete_ttl_s),
      Int("job_gather_timeout_s",
          "how long a job member's replacement waits for the other members' before resuming",
          &Config::job_gather_timeout_s),
      Bool("store_fsync", "fsync images before publishing (survives a node crash)",
           &Config::store_fsync),
      Str("gpu_plugin_dir", "directory of GPU plugin libraries (libcryo_gpu_<name>.so)",
          &Config::gpu_plugin_dir),
      Str("gpu_thp_during_checkpoint",
          "transparent huge pages mode while GPU memory is copied out (\"always\" or empty)",
          &Config::gpu_thp_during_checkpoint),
      Bool("gpu_fast_path",
           "jobs that run the fast-path library move their GPU memory themselves (docs/gpu.md)",
           &Config::gpu_fast_path),
      Int("gpu_fast_path_threads",
          "fast path: copy threads of the node for a drain (drains at once share them) and per "
          "process for a refill; 0 is one per core",
          &Config::gpu_fast_path_threads),
      Int("gpu_fast_path_writers",
          "fast path: files written in parallel per process (direct I/O); 0 leaves the data to "
          "CRIU",
          &Config::gpu_fast_path_writers),
      Bool("gpu_fast_path_in_memory",
           "fast path, leave-running checkpoints: the data goes into cryod's memory and is written "
           "while the job runs on (it stalls only for the copies), when the node's memory holds it",
           &Config::gpu_fast_path_in_memory),
      Int("gpu_staging_mib",
          "fast path: MiB of cryod's memory held faulted in for drains (0: none); stop checkpoints "
          "drain into it too, so that the GPUs of a node vacate at memory speed (it stays taken "
          "from the node, less while the node runs short)",
          &Config::gpu_staging_mib),
      Int("gpu_staging_slots",
          "fast path: that memory in this many equal slots, one per process drained at once (0: "
          "one per GPU of the node)",
          &Config::gpu_staging_slots),
      Str("gpu_write_start",
          "fast path, stop checkpoints into staging memory: when cryod begins writing the files: "
          "checkpointed (after the driver's checkpoint), drained (once the drain is done, beside "
          "the driver's checkpoint) or draining (behind the drain: the checkpoint ends sooner, the "
          "GPU is free later; docs/operations.md)",
          &Config::gpu_write_start),
      Bool("gpu_park",
           "fast path, leave-running checkpoints: the library parks the job's GPU data in GPU "
           "memory a process of cryod's holds (cryo-gpu-parker), copied within the GPU, instead of "
           "copying it to cryod's memory while the job is held; that process copies it to cryod's "
           "memory after the thaw. Needs the job's GPU data free on its GPU beside it, else the "
           "drain goes to host memory as without it",
           &Config::gpu_park),
      Bool("gpu_restore_into_gpu",
           "fast path, restores onto the GPUs the job was checkpointed on: a process of cryod's "
           "(cryo-gpu-parker) reads the job's GPU data from the store straight into GPU memory "
           "beside CRIU's restore, checked against the checkpoint's checksums, and the library "
           "copies it within the GPU. Needs the job's GPU data free on its GPU beside it, else "
           "the data is read as without it",
           &Config::gpu_restore_into_gpu),
      Str("gpu_parker", "cryo-gpu-parker binary (gpu_park, gpu_restore_into_gpu)",
          &Config::gpu_parker),
      Str("gpu_parker_libcuda",
          "the CUDA driver library cryo-gpu-parker opens (gpu_park, gpu_restore_into_gpu)",
          &Config::gpu_parker_libcuda),
      Bool("dump_in_memory",
           "leave-running checkpoints (periodic ones too): CRIU dumps the job into node memory and "
           "cryod copies the images into the store as the job runs on (it is held for the dump "
           "only), when the node's memory holds them",
           &Config::dump_in_memory),
      Int("dump_pages_pool_mib",
          "with dump_in_memory: MiB of the pages images' memory of one leave-running dump kept, "
          "once the images are in the store, for the next dump to copy the job's memory into "
          "(0: none; pages already there copy about 3x faster than fresh ones; it stays taken "
          "from the node between checkpoints, less while the node runs short)",
          &Config::dump_pages_pool_mib),
      Int("dump_copy_threads",
          "process mode: threads that copy the job's anonymous memory at CRIU's post-dump, "
          "instead of CRIU's one (0: CRIU copies it)",
          &Config::dump_copy_threads),
      Bool(
          "dump_pre_copy",
          "process mode, leave-running checkpoints with dump_copy_threads: copy the private "
          "memory of processes under the GPU fast-path library while the job runs, tracking its "
          "writes (userfaultfd, Linux 6.7), so that the freeze copies only the pages written since",
          &Config::dump_pre_copy),
      Bool("dump_pre_copy_shared",
           "with dump_pre_copy: also copy those processes' shared memory (pinned host memory) "
           "after the GPU drain, while the driver checkpoints, instead of while the job is frozen",
           &Config::dump_pre_copy_shared),
      Bool(
          "gpu_fast_path_incremental",
          "fast path, that write: chunks unchanged since the workload's newest good checkpoint are "
          "referred to in it instead of written again",
          &Config::gpu_fast_path_incremental),
      Str("gpu_fast_path_library", "where the fast-path library is installed on this node",
          &Config::gpu_fast_path_library),
      Int("shutdown_grace_s", "on SIGTERM, how long running operations may take to finish",
          &Config::shutdown_grace_s),
      Str("runtime_endpoint",
          "container mode: CRI socket of containerd or CRI-O (unix:///path); empty: off",
          &Config::runtime_endpoint),
      Str("nsexec", "cryo-nsexec binary", &Config::nsexec),
      Str("annotation_prefix", "prefix of the pod annotations of opted-in pods",
          &Config::annotation_prefix),
      {"termination_providers",
       "comma-separated clouds whose node termination notices trigger checkpoints of every "
       "opted-in container (gce, aws, azure); empty: off",
       [](Config& c, const std::string& v) {
         return SetTerminationProviders(c, absl::StrSplit(v, ',', absl::SkipEmpty()), v);
       },
       [](Config& c, const nlohmann::json& j) {
         // An array, or the same comma-separated string as the flag.
         std::vector<std::string> names;
         if (j.is_string()) {
           names = absl::StrSplit(j.get<std::string>(), ',', absl::SkipEmpty());
         } else if (j.is_array()) {
           for (const auto& n : j) {
             if (!n.is_string()) return Bad("termination_providers", j.dump(), "a list of clouds");
             names.push_back(n.get<std::string>());
           }
         } else {
           return Bad("termination_providers", j.dump(), "a list of clouds");
         }
         return SetTerminationProviders(c, names, j.dump());
       }},
      Int("termination_poll_ms", "how often the termination notice endpoints are polled",
          &Config::termination_poll_ms),
      Str("termination_gce_url", "GCE metadata instance/ directory (preempted, maintenance-event)",
          &Config::termination_gce_url),
      Str("termination_aws_url", "AWS instance metadata service (IMDSv2, IMDSv1 fallback)",
          &Config::termination_aws_url),
      Str("termination_azure_url", "Azure Scheduled Events URL", &Config::termination_azure_url),
      Str("termination_azure_vm_name", "this VM's name in Azure Scheduled Events",
          &Config::termination_azure_vm_name),
      {"criu_tcp_established",
       "dump established TCP connections: true, false, or auto (containers with a network "
       "namespace of their own)",
       [](Config& c, const std::string& v) { return SetTcp(c, v); },
       [](Config& c, const nlohmann::json& j) {
         if (j.is_boolean()) return SetTcp(c, j.get<bool>() ? "true" : "false");
         if (!j.is_string()) return Bad("criu_tcp_established", j.dump(), "true, false or auto");
         return SetTcp(c, j.get<std::string>());
       }},
      CriuBool("criu_tcp_close", "restore TCP connections closed (dumps them without a lock)",
               &criu::NodeDefaults::tcp_close),
      CriuBool("criu_skip_in_flight", "leave out TCP connections in a listener's accept queue",
               &criu::NodeDefaults::skip_in_flight),
      CriuBool("criu_link_remap",
               "allow open files unlinked while another link remains (CRIU makes a link)",
               &criu::NodeDefaults::link_remap),
      {"criu_ghost_limit",
       "largest deleted-but-open file carried in the images (bytes, or 64Mi, 1Gi)",
       [](Config& c, const std::string& v) { return SetGhost(c, v); },
       [](Config& c, const nlohmann::json& j) {
         if (j.is_number_unsigned()) return SetGhost(c, std::to_string(j.get<uint64_t>()));
         if (!j.is_string()) return Bad("criu_ghost_limit", j.dump(), "a size");
         return SetGhost(c, j.get<std::string>());
       }},
      CriuBool("criu_ext_unix_sk", "allow unix sockets connected outside the job",
               &criu::NodeDefaults::ext_unix_sk),
      {"allowed_uids", "comma-separated uids allowed on the socket",
       [](Config& c, const std::string& v) {
         c.allowed_uids.clear();
         for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
           int u;
           if (!absl::SimpleAtoi(p, &u)) return Bad("allowed_uids", v, "a list of uids");
           c.allowed_uids.push_back(u);
         }
         return absl::OkStatus();
       },
       [](Config& c, const nlohmann::json& j) {
         if (!j.is_array()) return Bad("allowed_uids", j.dump(), "an array of uids");
         c.allowed_uids.clear();
         for (const auto& u : j) {
           if (!u.is_number_integer()) return Bad("allowed_uids", j.dump(), "an array of uids");
           c.allowed_uids.push_back(u.get<int>());
         }
         return absl::OkStatus();
       }},
      {"peers", "other nodes' cryods for job checkpoints: comma-separated NODE=HOST:PORT",
       [](Config& c, const std::string& v) {
         c.peers.clear();
         for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
           const size_t eq = p.find('=');
           if (eq == absl::string_view::npos || eq == 0 || eq + 1 == p.size()) {
             return Bad("peers", v, "NODE=HOST:PORT,...");
           }
           c.peers[std::string(p.substr(0, eq))] = std::string(p.substr(eq + 1));
         }
         return absl::OkStatus();
       },
       [](Config& c, const nlohmann::json& j) {
         if (!j.is_object()) return Bad("peers", j.dump(), "an object of node: \"host:port\"");
         c.peers.clear();
         for (const auto& [k, v] : j.items()) {
           if (!v.is_string()) return Bad("peers", j.dump(), "an object of node: \"host:port\"");
           c.peers[k] = v.get<std::string>();
         }
         return absl::OkStatus();
       }},
      {"gpu_plugins", "comma-separated GPU plugins to load (cuda, rocm); empty: all in the dir",
       [](Config& c, const std::string& v) {
         c.gpu_plugins = absl::StrSplit(v, ',', absl::SkipEmpty());
         return absl::OkStatus();
       },
       [](Config& c, const nlohmann::json& j) {
         if (!j.is_array()) return Bad("gpu_plugins", j.dump(), "an array of names");
         c.gpu_plugins.clear();
         for (const auto& n : j) {
           if (!n.is_string()) return Bad("gpu_plugins", j.dump(), "an array of names");
           c.gpu_plugins.push_back(n.get<std::string>());
         }
         return absl::OkStatus();
       }},
  };
  return keys;
}

const Key* FindKey(std::string name) {
  for (auto& ch : name) {
    if (ch == '-') ch = '_';
  }
  for (const auto& k : Keys()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// The flags side of Keys(): every key is a flag of the same name (dashes or underscores), whose
// value is applied after the config file. `pending` receives (key, value) in command-line order.
void DeclareFlags(flags::FlagSet& fs, std::string* config_file,
                  std::vector<std::pair<const Key*, std::string>>* pending) {
  Config d;
  const std::map<std::string, std::string> defaults = {
      {"socket", d.socket},
      {"state_dir", d.state_dir},
      {"store", "<state_dir>/store"},
      {"journal_dir", std::string(Config::kDefaultJournalDir) +
                          " with the state_dir built in, else <state_dir>/journal"},
      {"signing_key_file", "<state_dir>/signing.key"},
      {"node_name", "<hostname>"},
      {"criu", "criu from PATH, /usr/local/sbin first"},
      {"criu_hw_breakpoints", "false"},
      {"metrics_address", d.metrics_address},
      {"http_api_token_file", d.http_api_token_file},
      {"peer_listen", "none"},
      {"peer_token_file", "none"},
      {"peer_tls_dir", "none"},
      {"peer_process_members", "false"},
      {"peers", "none"},
      {"http_max_connections", std::to_string(d.http_max_connections)},
      {"http_request_timeout_ms", std::to_string(d.http_request_timeout_ms)},
      {"health_min_free_mb", std::to_string(d.health_min_free_mb)},
      {"log_level", d.log_level},
      {"retention_keep", std::to_string(d.retention_keep)},
      {"periodic_every_s", "0 (only pods that ask)"},
      {"periodic_tick_ms", std::to_string(d.periodic_tick_ms)},
      {"periodic_min_every_s", std::to_string(d.periodic_min_every_s)},
      {"periodic_max_running", std::to_string(d.periodic_max_running)},
      {"pid_wait_timeout_ms", std::to_string(d.pid_wait_timeout_ms)},
      {"gpu_lock_timeout_ms", std::to_string(d.gpu_lock_timeout_ms)},
      {"incomplete_ttl_s", std::to_string(d.incomplete_ttl_s)},
      {"job_gather_timeout_s", std::to_string(d.job_gather_timeout_s)},
      {"store_fsync", "true"},
      {"gpu_plugin_dir", d.gpu_plugin_dir},
      {"gpu_thp_during_checkpoint", "leave THP alone"},
      {"gpu_fast_path", "true"},
      {"gpu_fast_path_threads", "0 (one per core)"},
      {"gpu_fast_path_writers", std::to_string(d.gpu_fast_path_writers)},
      {"gpu_fast_path_in_memory", "true"},
      {"gpu_fast_path_incremental", "true"},
      {"dump_in_memory", "true"},
      {"dump_pages_pool_mib", "0 (none)"},
      {"dump_copy_threads", "one per core, at most 16; 0 below 4 cores"},
      {"gpu_staging_mib", "0 (none)"},
      {"gpu_staging_slots", "0 (one per GPU)"},
      {"gpu_write_start", d.gpu_write_start},
      {"gpu_park", "false"},
      {"gpu_restore_into_gpu", "false"},
      {"gpu_parker", "<dir of cryod>/cryo-gpu-parker"},
      {"gpu_parker_libcuda", "libcuda.so.1"},
      {"gpu_fast_path_library", d.gpu_fast_path_library},
      {"shutdown_grace_s", std::to_string(d.shutdown_grace_s)},
      {"allowed_uids", "0"},
      {"runtime_endpoint", "none: processes only"},
      {"nsexec", "<dir of cryod>/cryo-nsexec"},
      {"annotation_prefix", d.annotation_prefix},
      {"termination_providers", "none"},
      {"termination_poll_ms", std::to_string(d.termination_poll_ms)},
      {"termination_gce_url", d.termination_gce_url},
      {"termination_aws_url", d.termination_aws_url},
      {"termination_azure_url", d.termination_azure_url},
      {"termination_azure_vm_name", "<from the instance metadata>"},
      {"gpu_plugins", "every plugin in gpu_plugin_dir"},
      {"criu_tcp_established", "auto"},
      {"criu_tcp_close", "false"},
      {"criu_skip_in_flight", "false"},
      {"criu_link_remap", "true"},
      {"criu_ghost_limit", "64Mi"},
      {"criu_ext_unix_sk", "false"}};
  fs.String("config", config_file, "JSON config file", "FILE")
      .DefaultText("/etc/cryo/cryod.json if present");
  for (const Key& k : Keys()) {
    const Key* key = &k;
    auto it = defaults.find(k.name);
    fs.Custom(
        k.name,
        [key, pending](absl::string_view v) {
          pending->emplace_back(key, std::string(v));
          return absl::OkStatus();
        },
        k.help, "VALUE", it == defaults.end() ? "" : it->second);
  }
}

}  // namespace

std::string Usage() {
  std::string file;
  std::vector<std::pair<const Key*, std::string>> pending;
  flags::FlagSet fs;
  DeclareFlags(fs, &file, &pending);
  return "usage: cryod [--config FILE] [--KEY=VALUE ...]\n\n"
         "Per-node checkpoint daemon. Settings come from built-in defaults, then the JSON config\n"
         "file, then flags. Every key of the file is a flag of the same name:\n\n" +
         fs.Usage();
}

absl::StatusOr<Config> LoadConfig(int argc, char** argv) {
  Config c;
  std::vector<std::pair<const Key*, std::string>> pending;
  flags::FlagSet fs;
  DeclareFlags(fs, &c.config_file, &pending);
  CRYO_ASSIGN_OR_RETURN(flags::FlagSet::Result r,
                        fs.Parse(std::vector<std::string>(argv + 1, argv + argc)));
  if (r.help) return absl::CancelledError(Usage());
  if (!r.positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", r.positional.front(), "'"));
  }
  const bool file_given = fs.Given("config");
  std::string file = file_given ? c.config_file : "/etc/cryo/cryod.json";
  if (file_given || fs::Exists(file)) {
    CRYO_ASSIGN_OR_RETURN(std::string text, fs::ReadFile(file));
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
    }
    for (const auto& [key, val] : j.items()) {
      const Key* k = FindKey(key);
      if (!k) return absl::InvalidArgumentError(absl::StrCat(file, ": unknown key '", key, "'"));
      CRYO_RETURN_IF_ERROR(Annotate(k->set_json(c, val), file));
    }
    c.config_file = file;
  } else {
    c.config_file.clear();
  }
  for (const auto& [k, v] : pending) CRYO_RETURN_IF_ERROR(k->set(c, v));
  if (c.store.empty()) c.store = fs::Join(c.state_dir, "store");
  if (c.journal_dir.empty()) {
    c.journal_dir = c.state_dir == Config::kDefaultStateDir ? Config::kDefaultJournalDir
                                                            : fs::Join(c.state_dir, "journal");
  }
  if (c.signing_key_file.empty()) c.signing_key_file = fs::Join(c.state_dir, "signing.key");
  if (c.node_name.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    c.node_name = host[0] ? host : "node";
  }
  if (c.periodic_tick_ms <= 0) {
    return absl::InvalidArgumentError("periodic_tick_ms must be positive");
  }
  if (c.periodic_min_every_s < 1 || c.periodic_max_running < 0) {
    return absl::InvalidArgumentError(
        "periodic_min_every_s must be at least 1 and periodic_max_running not negative");
  }
  if (c.termination_poll_ms <= 0) {
    return absl::InvalidArgumentError("termination_poll_ms must be positive");
  }
  // The library takes at most 256 threads and 64 files (lib/contract/gpu_fastpath.h).
  if (c.gpu_fast_path_threads < 0 || c.gpu_fast_path_threads > 256) {
    return absl::InvalidArgumentError("gpu_fast_path_threads must be 0..256");
  }
  if (c.dump_copy_threads < 0 || c.dump_copy_threads > 256) {
    return absl::InvalidArgumentError("dump_copy_threads must be 0..256");
  }
  if (c.gpu_fast_path_writers < 0 || c.gpu_fast_path_writers > 64) {
    return absl::InvalidArgumentError("gpu_fast_path_writers must be 0..64");
  }
  if (auto ws = engine::ParseGpuWriteStart(c.gpu_write_start); !ws.ok()) {
    return ws.status();
  }
  if (c.dump_pages_pool_mib < 0)
    return absl::InvalidArgumentError("dump_pages_pool_mib must be >= 0");
  if (c.gpu_staging_slots > 256) {
    return absl::InvalidArgumentError("gpu_staging_slots must be 0..256");
  }
  if (c.gpu_staging_mib > 0 && !c.gpu_fast_path_in_memory) {
    return absl::InvalidArgumentError(
        "gpu_staging_mib needs gpu_fast_path_in_memory: the staging memory is for drains into "
        "cryod's memory");
  }
  if (c.http_max_connections <= 0 || c.http_request_timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        "http_max_connections and http_request_timeout_ms must be positive");
  }
  for (const std::string* p :
       {&c.socket, &c.state_dir, &c.store, &c.journal_dir, &c.signing_key_file}) {
    if (p->empty() || (*p)[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat("path '", *p, "' must be absolute"));
    }
  }
  return c;
}

}  // namespace cryo::cryod
