// Which processes use which of this node's GPUs, and what of theirs the driver cannot
// checkpoint (CudaPlugin::Discover and what it reads: the kernel module's minors, NVML's
// per-process memory, the CUDA_VISIBLE_DEVICES of the process).

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/status.h"
#include "plugins/cuda/cuda_internal.h"
#include "plugins/cuda/cuda_plugin.h"

namespace cryo::gpu::cuda {
namespace {

// "/dev/nvidia3" -> 3; the control, uvm, modeset and caps nodes are not GPUs.
std::optional<int> GpuMinor(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "/dev/nvidia")) return std::nullopt;
  int minor = 0;
  if (path.empty() || !absl::SimpleAtoi(path, &minor)) return std::nullopt;
  return minor;
}
// NCCL between processes uses CUDA IPC unless all of these are set: the driver checkpoints
// such a job but cannot restore it (design.md).
bool NcclIpcDisabled(const std::map<std::string, std::string>& env) {
  auto is = [&](const char* k, const char* v) {
    auto it = env.find(k);
    return it != env.end() && it->second == v;
  };
  return is("NCCL_P2P_DISABLE", "1") && is("NCCL_SHM_DISABLE", "1") &&
         is("NCCL_CUMEM_ENABLE", "0") && is("NCCL_CUMEM_HOST_ENABLE", "0");
}
}  // namespace

std::map<int, std::string> CudaPlugin::MinorsToUuids() const {
  std::map<int, std::string> out;
  std::string dir = options_.driver_root + "/gpus";
  for (const std::string& bus : fs::ListNames(dir)) {
    auto info = fs::ReadFile(absl::StrCat(dir, "/", bus, "/information"));
    if (!info.ok()) continue;
    std::string uuid;
    int minor = -1;
    for (absl::string_view line : absl::StrSplit(*info, '\n')) {
      std::vector<absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits(':', 1));
      if (kv.size() != 2) continue;
      absl::string_view k = absl::StripAsciiWhitespace(kv[0]);
      absl::string_view v = absl::StripAsciiWhitespace(kv[1]);
      if (k == "GPU UUID") uuid = std::string(v);
      if (k == "Device Minor") (void)absl::SimpleAtoi(v, &minor);
    }
    if (minor >= 0 && !uuid.empty()) out[minor] = uuid;
  }
  return out;
}

std::map<std::string, uint64_t> CudaPlugin::ProcessMemory(pid_t pid) {
  std::map<std::string, uint64_t> out;
  if (!nvml_.has_value()) return out;
  for (const Device& d : devices_) {
    nvmlDevice_t h = nullptr;
    if (nvml_->device_get_handle_by_uuid(d.uuid.c_str(), &h) != kNvmlSuccess) continue;
    std::vector<NvmlProcessInfo> infos(64);
    unsigned int n = infos.size();
    nvmlReturn_t r = nvml_->device_get_compute_running_processes(h, &n, infos.data());
    if (r == kNvmlInsufficientSize) {
      infos.resize(n + 16);
      n = infos.size();
      r = nvml_->device_get_compute_running_processes(h, &n, infos.data());
    }
    if (r != kNvmlSuccess) continue;
    for (unsigned int i = 0; i < n && i < infos.size(); ++i) {
      // NVML says "not available" with ~0; more than the GPU has is no usable answer either.
      if (static_cast<pid_t>(infos[i].pid) == pid && infos[i].used_gpu_memory <= d.total_bytes) {
        out[d.uuid] = infos[i].used_gpu_memory;
      }
    }
  }
  return out;
}

std::vector<std::string> CudaPlugin::GpusOfDeviceFiles(
    const std::vector<std::string>& device_files) const {
  const std::map<int, std::string> minors = MinorsToUuids();
  std::set<std::string> given;
  for (const std::string& f : device_files) {
    auto m = GpuMinor(f);
    if (!m) continue;
    auto it = minors.find(*m);
    if (it != minors.end()) given.insert(it->second);
  }
  std::vector<std::string> out;
  for (const Device& d : devices_) {
    if (given.count(d.uuid)) out.push_back(d.uuid);
  }
  return out;
}

std::optional<std::vector<std::string>> CudaPlugin::VisibleByEnv(
    const std::map<std::string, std::string>& env, absl::Status* error,
    const std::optional<std::vector<std::string>>& given) const {
  std::vector<std::string> base;
  if (given.has_value()) {
    base = *given;
  } else {
    for (const Device& d : devices_) base.push_back(d.uuid);
  }
  bool restricted = given.has_value();
  // The container runtime exposes NVIDIA_VISIBLE_DEVICES' GPUs; CUDA_VISIBLE_DEVICES then
  // counts within those.
  for (const char* var : {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    auto it = env.find(var);
    if (it == env.end()) continue;
    auto r = ResolveVisibleDevices(it->second, base);
    if (!r.ok()) {
      *error = r.status();
      return std::nullopt;
    }
    base = *r;
    restricted = true;
  }
  if (!restricted) return std::nullopt;
  return base;
}

const CudaPlugin::Device* CudaPlugin::FindDevice(const std::string& uuid) const {
  for (const Device& d : devices_) {
    if (d.uuid == uuid) return &d;
  }
  return nullptr;
}

// One process's GPU facts; nullopt when it uses no NVIDIA GPU (or ended meanwhile). Refuses
// what the driver cannot checkpoint.
absl::StatusOr<std::optional<nlohmann::json>> CudaPlugin::DiscoverProcess(
    pid_t pid, const std::map<int, std::string>& minors, const nlohmann::json& node_gpus) {
  bool uses = false;
  std::set<std::string> opened;
  for (const std::string& t : proc_.FdTargets(pid)) {
    if (!absl::StartsWith(t, "/dev/nvidia")) continue;
    uses = true;
    if (auto m = GpuMinor(t); m && minors.count(*m)) opened.insert(minors.at(*m));
  }
  bool nccl = false;
  int uvm_maps = 0;
  for (const std::string& m : proc_.MappedPaths(pid)) {
    if (absl::StartsWith(m, "/dev/nvidia")) uses = true;
    if (absl::StartsWith(m, "/dev/nvidia-uvm")) ++uvm_maps;
    if (absl::StrContains(m, "libnccl")) nccl = true;
  }
  if (!uses) return std::nullopt;
  if (options_.refuse_managed_at_discover && uvm_maps > kBaseUvmMappings) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " appears to use managed (UVM) memory (", uvm_maps - kBaseUvmMappings,
        " managed range(s) mapped), which the driver's checkpoint does not support"));
  }
  if (!unavailable_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", pid,
                     " uses an NVIDIA GPU (it has /dev/nvidia* open) but GPU checkpoint is "
                     "unavailable on this node: ",
                     unavailable_));
  }
  CUprocessState st = CU_PROCESS_STATE_RUNNING;
  if (CUresult r = api_.checkpoint_get_state(pid, &st); r != CUDA_SUCCESS) {
    if (!proc_.Exists(pid)) return std::nullopt;  // exited meanwhile: not ours to refuse
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", pid,
                     " has NVIDIA device files open but the driver does not report it as a "
                     "CUDA process (",
                     ErrorName(r), "); only CUDA processes can be checkpointed"));
  }
  if (st != CU_PROCESS_STATE_RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat("pid ", pid, " is already ", StateName(st),
                                                      " by the driver (another checkpoint in "
                                                      "progress, or left behind by a tool)"));
  }
  auto env = proc_.EnvironMap(pid);
  std::map<std::string, std::string> e = env.ok() ? *env : std::map<std::string, std::string>{};
  absl::Status env_error;
  auto visible = VisibleByEnv(e, &env_error);
  if (!env_error.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("pid ", pid, ": ", env_error.message()));
  }
  std::vector<std::string> order;
  if (visible.has_value()) {
    order = *visible;
  } else {
    for (const Device& d : devices_) order.push_back(d.uuid);
  }
  // The process's GPUs are those it has a context on: a restore must pair exactly those
  // (the driver answers CUDA_ERROR_INVALID_VALUE to a pair for a GPU it did not save).
  // libcuda opens every /dev/nvidiaN, visible or not (seen on a 2-GPU H200 with
  // CUDA_VISIBLE_DEVICES=0), so open device files alone overstate them: NVML's per-process
  // memory says which GPUs it uses; without NVML, the visible ones it opened.
  std::map<std::string, uint64_t> mem = ProcessMemory(pid);
  // NVML may list a process on a GPU whose file it merely opened, with nothing allocated.
  for (auto it = mem.begin(); it != mem.end();)
    it = it->second == 0 ? mem.erase(it) : std::next(it);
  std::vector<std::string> devs;
  for (const std::string& u : order) {
    if (!mem.empty() ? mem.count(u) > 0 : (opened.empty() || opened.count(u) > 0)) {
      devs.push_back(u);
    }
  }
  if (!visible.has_value()) {
    for (const std::string& u : opened) {
      bool uses = mem.empty() || mem.count(u) > 0;
      if (uses && std::find(devs.begin(), devs.end(), u) == devs.end()) devs.push_back(u);
    }
  }
  nlohmann::json dj = nlohmann::json::array();
  for (const std::string& u : devs) {
    nlohmann::json d = {{"uuid", u}};
    if (const Device* dev = FindDevice(u)) {
      d["name"] = dev->name;
      d["chip"] = dev->chip;
    }
    if (mem.count(u)) d["memory_used_bytes"] = mem[u];
    dj.push_back(std::move(d));
  }
  // Every GPU whose device file it had open: a move must pair each of them (below).
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& u : order) {
    if (opened.count(u)) files.push_back(u);
  }
  for (const std::string& u : opened) {
    if (std::find(files.begin(), files.end(), u) == files.end()) files.push_back(u);
  }
  nlohmann::json facts = {{"devices", dj},
                          {"device_files", files},
                          {"uvm_mappings", uvm_maps},
                          {"managed_memory_suspected", uvm_maps > kBaseUvmMappings},
                          {"nccl", nccl},
                          {"node_gpus", node_gpus}};
  for (const char* var : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}) {
    if (e.count(var)) facts[absl::AsciiStrToLower(var)] = e[var];
  }
  if (nccl && !NcclIpcDisabled(e)) facts["nccl_ipc"] = true;
  return facts;
}

absl::StatusOr<nlohmann::json> CudaPlugin::Discover(const std::vector<pid_t>& pids) {
  nlohmann::json out = nlohmann::json::array();
  const std::map<int, std::string> minors = MinorsToUuids();
  // Every GPU of this node in the driver's order: a move may have to pair all of them.
  nlohmann::json node_gpus = nlohmann::json::array();
  for (const Device& d : devices_) node_gpus.push_back(d.uuid);
  std::vector<pid_t> nccl_ipc;  // GPU processes with NCCL loaded and CUDA IPC left on
  size_t gpu_procs = 0;
  for (pid_t pid : pids) {
    if (!proc_.Exists(pid)) continue;
    CRYO_ASSIGN_OR_RETURN(std::optional<nlohmann::json> facts,
                          DiscoverProcess(pid, minors, node_gpus));
    if (!facts) continue;
    ++gpu_procs;
    if (facts->value("nccl_ipc", false)) nccl_ipc.push_back(pid);
    out.push_back({{"pid", pid}, {"facts", *std::move(facts)}});
  }
  if (gpu_procs >= 2 && !nccl_ipc.empty() && !options_.allow_nccl_ipc &&
      !options_.report_nccl_ipc) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", nccl_ipc[0],
        " runs NCCL across processes with CUDA IPC enabled: the driver "
        "checkpoints such a job but cannot restore it. Run the job with NCCL_P2P_DISABLE=1 "
        "NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 (docs/gpu.md)"));
  }
  return out;
}

}  // namespace cryo::gpu::cuda
