#include "plugins/cuda/cuda_plugin.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "plugins/cuda/cuda_internal.h"

namespace cryo::gpu::cuda {
namespace {

// /dev/nvidia-uvm mappings of a process. A CUDA 13 process on driver 580 has one (a 2 MiB
// window of the runtime); cudaMallocManaged adds one per managed range (seen on an H100,
// 2026-11-22: 64 MiB managed -> a second, 64 MiB mapping).
int UvmMappings(const proc::ProcReader& proc, pid_t pid) {
  int n = 0;
  for (const std::string& m : proc.MappedPaths(pid)) n += absl::StartsWith(m, "/dev/nvidia-uvm");
  return n;
}
}  // namespace

std::string ParseDriverVersion(absl::string_view version_file) {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
  absl::string_view first = version_file.substr(0, version_file.find('\n'));
  for (absl::string_view w : absl::StrSplit(first, ' ', absl::SkipEmpty())) {
    int dots = 0;
    bool ok = !w.empty() && absl::ascii_isdigit(w[0]);
    for (char c : w) {
      dots += c == '.';
      ok = ok && (absl::ascii_isdigit(c) || c == '.');
    }
    if (ok && dots >= 1) return std::string(w);
  }
  return "";
}

CudaPluginOptions CudaPluginOptions::FromJson(const nlohmann::json& j) {
  CudaPluginOptions o;
  if (!j.is_object()) return o;
  o.libcuda = j.value("libcuda", o.libcuda);
  o.libnvml = j.value("libnvml", o.libnvml);
  o.proc_root = j.value("proc_root", o.proc_root);
  o.driver_root = j.value("driver_root", o.driver_root);
  o.allow_nccl_ipc = j.value("allow_nccl_ipc", o.allow_nccl_ipc);
  o.report_nccl_ipc = j.value("report_nccl_ipc", o.report_nccl_ipc);
  o.always_pass_gpu_pairs = j.value("always_pass_gpu_pairs", o.always_pass_gpu_pairs);
  o.refuse_managed_at_discover =
      j.value("refuse_managed_at_discover", o.refuse_managed_at_discover);
  return o;
}

absl::StatusOr<std::unique_ptr<CudaPlugin>> CudaPlugin::Create(const CudaPluginOptions& options,
                                                               std::optional<CudaApi> api,
                                                               std::optional<NvmlApi> nvml) {
  std::unique_ptr<CudaPlugin> p(new CudaPlugin(options));
  if (absl::Status s = p->Init(std::move(api), std::move(nvml)); !s.ok()) return s;
  return p;
}

std::string CudaPlugin::FormatUuid(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::string hex;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) hex += '-';
    absl::StrAppendFormat(&hex, "%02x", b[i]);
  }
  return "GPU-" + hex;
}

bool CudaPlugin::ParseUuid(const std::string& s, CUuuid* out) {
  absl::string_view v = s;
  absl::ConsumePrefix(&v, "GPU-");
  std::string hex;
  for (char c : v) {
    if (c != '-') hex += c;
  }
  if (hex.size() != 32) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    c = absl::ascii_tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (int i = 0; i < 16; ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->bytes[i] = static_cast<char>(hi * 16 + lo);
  }
  return true;
}

absl::Status CudaPlugin::Init(std::optional<CudaApi> api, std::optional<NvmlApi> nvml) {
  if (api.has_value()) {
    api_ = *api;
  } else {
    auto loaded = LoadCudaApi(options_.libcuda);
    if (!loaded.ok()) {
      unavailable_ = absl::StrCat("no NVIDIA driver: ", loaded.status().message());
      return absl::OkStatus();
    }
    api_ = *loaded;
  }
  if (nvml.has_value()) {
    if (nvml->ok()) nvml_ = *nvml;
  } else if (auto n = LoadNvmlApi(options_.libnvml); n.ok()) {
    nvml_ = *n;
  }
  if (nvml_.has_value() && nvml_->init() != kNvmlSuccess) nvml_.reset();

  CUresult r = api_.init(0);
  if (r != CUDA_SUCCESS) {
    unavailable_ = r == CUDA_ERROR_NO_DEVICE ? "NVIDIA driver present but no GPU"
                                             : absl::StrCat("cuInit failed: ", ErrorName(r));
    return absl::OkStatus();
  }
  api_.driver_get_version(&cuda_version_);
  std::string cuda = absl::StrCat(cuda_version_ / 1000, ".", (cuda_version_ % 1000) / 10);
  driver_version_ = absl::StrCat("CUDA ", cuda);
  if (auto v = fs::ReadFile(options_.driver_root + "/version"); v.ok()) {
    if (std::string d = ParseDriverVersion(*v); !d.empty()) driver_version_ = d;
  }

  int count = 0;
  if (CUresult c = api_.device_get_count(&count); c != CUDA_SUCCESS) count = 0;
  for (int i = 0; i < count; ++i) {
    Device d;
    d.ordinal = i;
    if (api_.device_get(&d.handle, i) != CUDA_SUCCESS) continue;
    char name[256] = {};
    api_.device_get_name(name, sizeof(name) - 1, d.handle);
    d.name = name;
    CUuuid u{};
    api_.device_get_uuid(&u, d.handle);
    d.uuid = FormatUuid(u);
    size_t total = 0;
    api_.device_total_mem(&total, d.handle);
    d.total_bytes = total;
    int major = 0, minor = 0, domain = 0, bus = 0, dev = 0;
    api_.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.handle);
    api_.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.handle);
    api_.device_get_attribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d.handle);
    api_.device_get_attribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d.handle);
    api_.device_get_attribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d.handle);
    d.chip = absl::StrCat("sm_", major, minor);
    d.pci_bus_id = absl::StrFormat("%08x:%02x:%02x.0", domain, bus, dev);
    devices_.push_back(std::move(d));
  }
  if (!api_.HasCheckpointApi()) {
    unavailable_ = absl::StrCat("NVIDIA driver ", driver_version_, " (CUDA ", cuda,
                                ") lacks the checkpoint API cuCheckpointProcess* "
                                "(a driver for CUDA 12.8 or later is needed)");
  }
  return absl::OkStatus();
}

absl::Status CudaPlugin::Available() const {
  if (unavailable_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(unavailable_);
}

std::string CudaPlugin::ErrorName(CUresult r) const {
  const char* s = nullptr;
  if (api_.get_error_name != nullptr && api_.get_error_name(r, &s) == CUDA_SUCCESS && s) return s;
  return absl::StrCat("CUDA error ", static_cast<int>(r));
}

absl::Status CudaPlugin::CuError(CUresult r, pid_t pid, absl::string_view op) const {
  std::string what = absl::StrCat("GPU ", op, " of pid ", pid, ": ", ErrorName(r));
  if (!proc_.Exists(pid)) return absl::AbortedError(absl::StrCat(what, " (the process exited)"));
  switch (r) {
    case CUDA_ERROR_ILLEGAL_STATE: {
      CUprocessState st = CU_PROCESS_STATE_FAILED;
      bool known = api_.checkpoint_get_state(pid, &st) == CUDA_SUCCESS;
      return absl::FailedPreconditionError(
          absl::StrCat(what, " (process is ", known ? StateName(st) : "in an unknown state", ")"));
    }
    case CUDA_ERROR_NOT_SUPPORTED: {
      int uvm = UvmMappings(proc_, pid);
      if (uvm > kBaseUvmMappings) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": the process uses managed (UVM) memory (", uvm - kBaseUvmMappings,
            " managed range(s) mapped), which the driver's checkpoint does not support"));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          what,
          ": the process uses something the driver's checkpoint cannot handle (managed/UVM "
          "memory, MPS, MIG or CUDA IPC)"));
    }
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_NOT_PERMITTED:
      return absl::FailedPreconditionError(what);
    default:
      return absl::InternalError(what);
  }
}

nlohmann::json CudaPlugin::Status() {
  nlohmann::json j;
  j["available"] = unavailable_.empty();
  j["driver_version"] = driver_version_;
  j["cuda_version"] = cuda_version_;
  j["nvml"] = nvml_.has_value();
  j["detail"] = unavailable_.empty()
                    ? absl::StrCat("NVIDIA driver ", driver_version_, ", ", devices_.size(),
                                   " GPU(s)", nvml_.has_value() ? "" : ", no NVML")
                    : unavailable_;
  return j;
}

std::optional<uint64_t> CudaPlugin::FreeBytes(const Device& d) {
  if (nvml_.has_value()) {
    nvmlDevice_t h = nullptr;
    NvmlMemory m{};
    if (nvml_->device_get_handle_by_uuid(d.uuid.c_str(), &h) == kNvmlSuccess &&
        nvml_->device_get_memory_info(h, &m) == kNvmlSuccess) {
      return m.free;
    }
  }
  if (!api_.primary_ctx_retain || !api_.primary_ctx_release || !api_.ctx_push_current ||
      !api_.ctx_pop_current || !api_.mem_get_info) {
    return std::nullopt;
  }
  // Fallback: a short-lived primary context (its own few hundred MiB are counted as used).
  absl::MutexLock l(&ctx_mu_);
  CUcontext ctx = nullptr;
  if (api_.primary_ctx_retain(&ctx, d.handle) != CUDA_SUCCESS) return std::nullopt;
  std::optional<uint64_t> out;
  if (api_.ctx_push_current(ctx) == CUDA_SUCCESS) {
    size_t free = 0, total = 0;
    if (api_.mem_get_info(&free, &total) == CUDA_SUCCESS) out = free;
    CUcontext popped = nullptr;
    api_.ctx_pop_current(&popped);
  }
  api_.primary_ctx_release(d.handle);
  return out;
}

absl::StatusOr<nlohmann::json> CudaPlugin::ListDevices() {
  nlohmann::json out = nlohmann::json::array();
  for (const Device& d : devices_) {
    nlohmann::json j = {{"uuid", d.uuid},
                        {"name", d.name},
                        {"chip", d.chip},
                        {"index", d.ordinal},
                        {"pci_bus_id", d.pci_bus_id},
                        {"memory_total_bytes", d.total_bytes},
                        {"driver_version", driver_version_}};
    if (auto f = FreeBytes(d)) j["memory_free_bytes"] = *f;
    out.push_back(std::move(j));
  }
  return out;
}

absl::Status CudaPlugin::Lock(pid_t pid, uint32_t timeout_ms) {
  if (absl::Status s = Available(); !s.ok()) return s;
  CUcheckpointLockArgs args{};
  args.timeoutMs = timeout_ms;
  auto start = std::chrono::steady_clock::now();
  CUresult r = api_.checkpoint_lock(pid, &args);
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
  bool timed_out = r == CUDA_ERROR_NOT_READY || r == CUDA_ERROR_TIMEOUT ||
                   (timeout_ms > 0 && waited >= timeout_ms && r != CUDA_ERROR_ILLEGAL_STATE &&
                    r != CUDA_ERROR_NOT_SUPPORTED && proc_.Exists(pid));
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("pid ", pid, " did not lock within ", timeout_ms, " ms (", ErrorName(r),
                     "): a kernel or CUDA call is still running; the process was left running"));
  }
  return CuError(r, pid, "lock");
}

absl::Status CudaPlugin::Checkpoint(pid_t pid) {
  if (absl::Status s = Available(); !s.ok()) return s;
  auto start = std::chrono::steady_clock::now();
  CUresult r = api_.checkpoint_checkpoint(pid, nullptr);
  if (r != CUDA_SUCCESS) return CuError(r, pid, "checkpoint");
  Log(CRYO_GPU_LOG_INFO, absl::StrCat("pid ", pid, ": driver checkpoint took ",
                                      std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - start)
                                          .count(),
                                      " ms"));
  return absl::OkStatus();
}

absl::Status CudaPlugin::Restore(pid_t pid, const nlohmann::json& facts, const DeviceMap& map) {
  if (absl::Status s = Available(); !s.ok()) return s;
  // The GPUs this process had; every one must be paired once any is moved.
  std::vector<std::string> had;
  if (facts.is_object() && facts.contains("devices") && facts["devices"].is_array()) {
    for (const auto& d : facts["devices"]) {
      if (d.is_object() && d.contains("uuid")) had.push_back(d["uuid"].get<std::string>());
    }
  }
  if (had.empty()) {
    for (const auto& [from, to] : map) had.push_back(from);
  }
  bool remap = options_.always_pass_gpu_pairs;
  for (const std::string& u : had) {
    auto it = map.find(u);
    remap = remap || (it != map.end() && it->second != u);
  }
  if (!remap) {
    CUresult r = api_.checkpoint_restore(pid, nullptr);
    return r == CUDA_SUCCESS ? absl::OkStatus() : CuError(r, pid, "restore");
  }
  // The driver takes a move only as a one-to-one map of every GPU it recorded for the process,
  // and which GPUs those are is not documented: one pair alone is CUDA_ERROR_INVALID_VALUE
  // (seen on 2 H200s, driver 580), and with CUDA_VISIBLE_DEVICES hiding GPUs it wanted the
  // hidden ones too (reported by others on 4 GPUs). So: first every GPU the process used or had
  // a device file of; if the driver refuses that, every GPU of the node it was checkpointed on.
  // The GPUs it used go where `map` says; the others stay where they are if they can.
  std::vector<std::string> used_or_opened = had;
  auto add_all = [](std::vector<std::string>* to, const nlohmann::json& list) {
    if (!list.is_array()) return;
    for (const auto& u : list) {
      if (u.is_string() && std::find(to->begin(), to->end(), u) == to->end()) {
        to->push_back(u.get<std::string>());
      }
    }
  };
  if (facts.is_object()) add_all(&used_or_opened, facts.value("device_files", nlohmann::json()));
  std::vector<std::vector<std::string>> domains = {used_or_opened};
  if (facts.is_object() && facts.contains("node_gpus")) {
    std::vector<std::string> node = used_or_opened;
    add_all(&node, facts["node_gpus"]);
    if (node.size() > used_or_opened.size()) domains.push_back(std::move(node));
  }
  std::vector<std::string> tried;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  for (const std::vector<std::string>& domain : domains) {
    auto pairs = PairAll(pid, domain, map);
    if (!pairs.ok()) return pairs.status();
    CUcheckpointRestoreArgs args{};
    args.gpuPairs = pairs->data();
    args.gpuPairsCount = static_cast<unsigned int>(pairs->size());
    r = api_.checkpoint_restore(pid, &args);
    if (r == CUDA_SUCCESS) return absl::OkStatus();
    std::string desc;
    for (const CUcheckpointGpuPair& p : *pairs) {
      absl::StrAppend(&desc, desc.empty() ? "" : ", ", FormatUuid(p.oldUuid), "->",
                      FormatUuid(p.newUuid));
    }
    tried.push_back(absl::StrCat("[", desc, "]: ", ErrorName(r)));
    // Only a refused pairing is worth another try; anything else is the answer.
    if (r != CUDA_ERROR_INVALID_VALUE) break;
  }
  absl::Status s = CuError(r, pid, "restore");
  return absl::Status(
      s.code(), absl::StrCat(s.message(), " (GPU pairs tried: ", absl::StrJoin(tried, "; "), ")"));
}

absl::StatusOr<std::vector<CUcheckpointGpuPair>> CudaPlugin::PairAll(
    pid_t pid, const std::vector<std::string>& domain, const DeviceMap& map) const {
  // Where `map` sends a GPU is fixed; every other GPU comes after, onto itself if it is here
  // and free, else onto the first free GPU of this node.
  std::map<std::string, std::string> target;
  std::set<std::string> taken;
  for (const std::string& u : domain) {
    auto it = map.find(u);
    if (it == map.end()) continue;
    target[u] = it->second;
    taken.insert(it->second);
  }
  for (const std::string& u : domain) {
    if (target.count(u)) continue;
    std::string to;
    if (FindDevice(u) != nullptr && !taken.count(u)) {
      to = u;
    } else {
      for (const Device& d : devices_) {
        if (!taken.count(d.uuid)) {
          to = d.uuid;
          break;
        }
      }
    }
    if (to.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("pid ", pid, " was checkpointed with ", domain.size(),
                       " GPUs that the driver must map one to one; this node has ", devices_.size(),
                       " GPUs, too few to move it"));
    }
    target[u] = to;
    taken.insert(to);
  }
  std::vector<CUcheckpointGpuPair> pairs;
  for (const std::string& u : domain) {
    CUcheckpointGpuPair p{};
    if (!ParseUuid(u, &p.oldUuid) || !ParseUuid(target[u], &p.newUuid)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad GPU UUID in map: ", u, " -> ", target[u]));
    }
    pairs.push_back(p);
  }
  return pairs;
}

absl::Status CudaPlugin::Unlock(pid_t pid) {
  if (absl::Status s = Available(); !s.ok()) return s;
  CUresult r = api_.checkpoint_unlock(pid, nullptr);
  return r == CUDA_SUCCESS ? absl::OkStatus() : CuError(r, pid, "unlock");
}

absl::Status CudaPlugin::Rollback(pid_t pid) {
  if (absl::Status s = Available(); !s.ok()) return s;
  CUprocessState st = CU_PROCESS_STATE_RUNNING;
  if (CUresult r = api_.checkpoint_get_state(pid, &st); r != CUDA_SUCCESS) {
    if (!proc_.Exists(pid)) return absl::OkStatus();  // nothing left to put back
    return CuError(r, pid, "state query");
  }
  switch (st) {
    case CU_PROCESS_STATE_RUNNING:
      return absl::OkStatus();
    case CU_PROCESS_STATE_CHECKPOINTED:
      Log(CRYO_GPU_LOG_WARNING, absl::StrCat("pid ", pid, ": rolling back a checkpointed process"));
      if (CUresult r = api_.checkpoint_restore(pid, nullptr); r != CUDA_SUCCESS) {
        return CuError(r, pid, "rollback restore");
      }
      [[fallthrough]];
    case CU_PROCESS_STATE_LOCKED:
      if (CUresult r = api_.checkpoint_unlock(pid, nullptr); r != CUDA_SUCCESS) {
        return CuError(r, pid, "rollback unlock");
      }
      return absl::OkStatus();
    case CU_PROCESS_STATE_FAILED:
      break;
  }
  return absl::InternalError(
      absl::StrCat("pid ", pid, " is in the driver's FAILED state: its GPU state is lost"));
}

absl::StatusOr<nlohmann::json> CudaPlugin::Describe(const nlohmann::json& procs) {
  nlohmann::json devices = nlohmann::json::array();
  std::map<std::string, size_t> index;
  std::map<std::string, bool> used_known;
  nlohmann::json processes = nlohmann::json::array();
  for (const auto& p : procs) {
    nlohmann::json facts = p.value("facts", nlohmann::json::object());
    nlohmann::json pd = nlohmann::json::array();
    for (const auto& d : facts.value("devices", nlohmann::json::array())) {
      std::string uuid = d.value("uuid", "");
      if (uuid.empty()) continue;
      if (!index.count(uuid)) {
        index[uuid] = devices.size();
        nlohmann::json nd = {
            {"uuid", uuid}, {"name", d.value("name", "")}, {"chip", d.value("chip", "")}};
        if (const Device* dev = FindDevice(uuid)) nd["memory_total_bytes"] = dev->total_bytes;
        devices.push_back(nd);
        used_known[uuid] = true;
      }
      nlohmann::json& nd = devices[index[uuid]];
      if (d.contains("memory_used_bytes")) {
        nd["memory_used_bytes"] =
            nd.value("memory_used_bytes", uint64_t{0}) + d["memory_used_bytes"].get<uint64_t>();
      } else {
        used_known[uuid] = false;
      }
      pd.push_back(d);
    }
    processes.push_back({{"pid", p.value("pid", 0)}, {"devices", pd}});
  }
  // A device whose use is unknown for some process must not claim a (too small) total.
  for (auto& d : devices) {
    if (!used_known[d["uuid"].get<std::string>()]) d.erase("memory_used_bytes");
  }
  return nlohmann::json{{"vendor", "nvidia"},
                        {"driver_version", driver_version_},
                        {"cuda_version", cuda_version_},
                        {"devices", devices},
                        {"processes", processes}};
}

absl::StatusOr<nlohmann::json> CudaPlugin::CheckCompatible(const nlohmann::json& section,
                                                           const nlohmann::json& request) {
  if (absl::Status s = Available(); !s.ok()) return s;
  const std::vector<CheckpointedGpu> ckpt = CheckpointedGpus(section);
  std::vector<NodeGpu> node;
  for (Device& d : devices_) node.push_back({d.uuid, d.name, d.chip, FreeBytes(d)});
  std::optional<std::vector<std::string>> allowed;
  // A container: the GPUs its device files give it (its pod's device plugin allocation), in
  // the driver's order, as CUDA inside it enumerates them.
  std::vector<std::string> device_files;
  if (request.contains("devices") && request["devices"].is_array()) {
    for (const auto& d : request["devices"]) {
      if (d.is_string()) device_files.push_back(d.get<std::string>());
    }
    allowed = GpusOfDeviceFiles(device_files);
  }
  pid_t env_pid = request.value("env_pid", 0);
  if (env_pid > 0) {
    auto env = proc_.EnvironMap(env_pid);
    if (!env.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("cannot read the environment of pid ",
                                                        env_pid,
                                                        " for its GPUs: ", env.status().message()));
    }
    absl::Status err;
    allowed = VisibleByEnv(*env, &err, allowed);
    if (!err.ok()) return err;
  }
  DeviceMap requested;
  if (request.contains("map") && request["map"].is_object()) {
    for (const auto& [k, v] : request["map"].items()) {
      // Entries for other vendors' GPUs are not ours.
      bool mine = false;
      for (const auto& c : ckpt) mine = mine || c.uuid == k;
      if (mine && v.is_string()) requested[k] = v.get<std::string>();
    }
  }
  auto planned = PlanDeviceMap(ckpt, node, allowed, requested);
  if (!planned.ok()) {
    if (!request.contains("devices")) return planned.status();
    // Name both lists: what the job ran on, and what the new pod was given.
    std::vector<std::string> ran_on, nvidia_files;
    for (const CheckpointedGpu& c : ckpt) ran_on.push_back(absl::StrCat(c.uuid, " (", c.name, ")"));
    for (const std::string& f : device_files) {
      if (absl::StartsWith(f, "/dev/nvidia")) nvidia_files.push_back(f);
    }
    return absl::Status(
        planned.status().code(),
        absl::StrCat(planned.status().message(), "; the checkpoint ran on ",
                     ran_on.empty() ? "no GPU" : absl::StrJoin(ran_on, ", "),
                     ", the container is given ",
                     allowed.has_value() && !allowed->empty() ? absl::StrJoin(*allowed, ", ")
                                                              : std::string("no GPU"),
                     " (its NVIDIA device files: ",
                     nvidia_files.empty() ? "none" : absl::StrJoin(nvidia_files, " "), ")"));
  }
  return nlohmann::json{{"map", *planned}};
}

absl::StatusOr<nlohmann::json> CudaPlugin::CriuOptions(const std::vector<pid_t>& pids) {
  // After Checkpoint the processes hold no NVIDIA files, so plain CRIU dumps them. NCCL leaves
  // deleted files open in /dev/shm (tens of MiB, above CRIU's 1 MiB default for the contents
  // of deleted files) and deleted semaphores, which CRIU saves only with --link-remap (seen
  // with a 2-rank DDP job, NCCL 2.28). A restore needs neither.
  nlohmann::json args = nlohmann::json::array();
  for (pid_t pid : pids) {
    bool nccl = false;
    for (const std::string& m : proc_.MappedPaths(pid)) {
      if (absl::StrContains(m, "libnccl")) nccl = true;
    }
    if (nccl) {
      args = {"--link-remap", "--ghost-limit", "256M"};
      break;
    }
  }
  return nlohmann::json{{"args", args}, {"env", nlohmann::json::object()}};
}

}  // namespace cryo::gpu::cuda
