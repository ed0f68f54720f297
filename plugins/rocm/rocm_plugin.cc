#include "plugins/rocm/rocm_plugin.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace cryo::gpu::rocm {
namespace {

// sysfs "key value" lines.
std::map<std::string, std::string> Properties(const std::string& path) {
  std::map<std::string, std::string> out;
  auto text = fs::ReadFile(path);
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1), absl::SkipEmpty());
    if (kv.size() == 2) out[std::string(kv[0])] = std::string(absl::StripAsciiWhitespace(kv[1]));
  }
  return out;
}

uint64_t U64(const std::map<std::string, std::string>& m, const std::string& k) {
  uint64_t v = 0;
  auto it = m.find(k);
  if (it != m.end()) (void)absl::SimpleAtoi(it->second, &v);
  return v;
}

std::optional<uint64_t> ReadU64(const std::string& path) {
  auto t = fs::ReadFile(path);
  uint64_t v = 0;
  if (!t.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*t), &v)) return std::nullopt;
  return v;
}

// gfx_target_version 90010 -> "gfx90a" (major, then minor and stepping as hex digits).
std::string Chip(uint64_t v) {
  if (v == 0) return "";
  return absl::StrFormat("gfx%d%x%x", v / 10000, (v / 100) % 100, v % 100);
}

}  // namespace

RocmPluginOptions RocmPluginOptions::FromJson(const nlohmann::json& j) {
  RocmPluginOptions o;
  if (!j.is_object()) return o;
  o.proc_root = j.value("proc_root", o.proc_root);
  o.sys_root = j.value("sys_root", o.sys_root);
  o.dev_kfd = j.value("dev_kfd", o.dev_kfd);
  o.criu_plugin_dir = j.value("criu_plugin_dir", o.criu_plugin_dir);
  if (j.contains("criu_env") && j["criu_env"].is_object()) {
    for (const auto& [k, v] : j["criu_env"].items()) {
      if (v.is_string()) o.criu_env[k] = v.get<std::string>();
    }
  }
  return o;
}

absl::StatusOr<std::unique_ptr<RocmPlugin>> RocmPlugin::Create(const RocmPluginOptions& options) {
  return std::unique_ptr<RocmPlugin>(new RocmPlugin(options));
}

std::string RocmPlugin::KfdPath(absl::string_view rel) const {
  return absl::StrCat(options_.sys_root, "/class/kfd/kfd/", rel);
}

std::string RocmPlugin::Unavailable() const {
  if (!fs::Exists(options_.dev_kfd))
    return absl::StrCat("no AMD KFD driver (", options_.dev_kfd, " missing)");
  std::string so = options_.criu_plugin_dir + "/amdgpu_plugin.so";
  if (!fs::Exists(so)) return absl::StrCat("CRIU's amdgpu plugin is missing (", so, ")");
  return "";
}

std::vector<RocmPlugin::Gpu> RocmPlugin::Gpus() const {
  std::vector<std::string> nodes = fs::ListNames(KfdPath("topology/nodes"));
  std::sort(nodes.begin(), nodes.end(), [](const std::string& a, const std::string& b) {
    int x = 0, y = 0;
    (void)absl::SimpleAtoi(a, &x);
    (void)absl::SimpleAtoi(b, &y);
    return x < y;
  });
  std::vector<Gpu> out;
  for (const std::string& n : nodes) {
    std::string dir = KfdPath(absl::StrCat("topology/nodes/", n));
    auto id = ReadU64(dir + "/gpu_id");
    if (!id.has_value() || *id == 0) continue;  // a CPU node
    auto props = Properties(dir + "/properties");
    Gpu g;
    g.node = n;
    g.gpu_id = static_cast<uint32_t>(*id);
    uint64_t unique = U64(props, "unique_id");
    g.uuid = unique != 0 ? absl::StrFormat("AMD-%016x", unique) : absl::StrCat("AMD-gpu_id-", *id);
    g.chip = Chip(U64(props, "gfx_target_version"));
    auto name = fs::ReadFile(dir + "/name");
    g.name = name.ok() ? std::string(absl::StripAsciiWhitespace(*name)) : g.chip;
    g.render_minor =
        props.count("drm_render_minor") ? static_cast<int>(U64(props, "drm_render_minor")) : -1;
    g.total_bytes = U64(Properties(dir + "/mem_banks/0/properties"), "size_in_bytes");
    if (g.render_minor >= 0) {
      std::string dev =
          absl::StrCat(options_.sys_root, "/class/drm/renderD", g.render_minor, "/device/");
      auto total = ReadU64(dev + "mem_info_vram_total");
      auto used = ReadU64(dev + "mem_info_vram_used");
      if (total && used && *total >= *used) {
        g.free_bytes = *total - *used;
        if (g.total_bytes == 0) g.total_bytes = *total;
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

nlohmann::json RocmPlugin::Status() {
  std::string why = Unavailable();
  size_t n = why.empty() ? Gpus().size() : 0;
  return {{"available", why.empty()},
          {"detail", why.empty() ? absl::StrCat(n,
                                                " AMD GPU(s) via CRIU amdgpu plugin "
                                                "(untested on AMD hardware)")
                                 : why}};
}

absl::StatusOr<nlohmann::json> RocmPlugin::ListDevices() {
  nlohmann::json out = nlohmann::json::array();
  int index = 0;
  for (const Gpu& g : Gpus()) {
    nlohmann::json j = {{"uuid", g.uuid},     {"name", g.name},
                        {"chip", g.chip},     {"index", index++},
                        {"gpu_id", g.gpu_id}, {"memory_total_bytes", g.total_bytes}};
    if (g.free_bytes) j["memory_free_bytes"] = *g.free_bytes;
    out.push_back(std::move(j));
  }
  return out;
}

absl::StatusOr<nlohmann::json> RocmPlugin::Discover(const std::vector<pid_t>& pids) {
  nlohmann::json out = nlohmann::json::array();
  std::vector<Gpu> gpus;
  bool loaded = false;
  for (pid_t pid : pids) {
    if (!proc_.Exists(pid)) continue;
    bool kfd = false;
    std::set<int> render;
    for (const std::string& t : proc_.FdTargets(pid)) {
      if (t == "/dev/kfd") kfd = true;
      absl::string_view v = t;
      int minor = 0;
      if (absl::ConsumePrefix(&v, "/dev/dri/renderD") && absl::SimpleAtoi(v, &minor)) {
        render.insert(minor);
      }
    }
    std::string kfd_proc = KfdPath(absl::StrCat("proc/", pid));
    if (!kfd && !fs::Exists(kfd_proc)) continue;
    if (std::string why = Unavailable(); !why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("pid ", pid,
                       " uses an AMD GPU (/dev/kfd) but GPU checkpoint is unavailable on this "
                       "node: ",
                       why));
    }
    if (!loaded) {
      gpus = Gpus();
      loaded = true;
    }
    nlohmann::json devs = nlohmann::json::array();
    for (const Gpu& g : gpus) {
      // KFD's per-process VRAM counters name the GPUs it used; render fds are the fallback.
      auto vram = ReadU64(absl::StrCat(kfd_proc, "/vram_", g.gpu_id));
      if (!vram.has_value() && !render.count(g.render_minor)) continue;
      nlohmann::json d = {{"uuid", g.uuid}, {"name", g.name}, {"chip", g.chip}};
      if (vram.has_value()) d["memory_used_bytes"] = *vram;
      devs.push_back(std::move(d));
    }
    out.push_back({{"pid", pid}, {"facts", {{"devices", devs}}}});
  }
  return out;
}

absl::StatusOr<nlohmann::json> RocmPlugin::Describe(const nlohmann::json& procs) {
  nlohmann::json devices = nlohmann::json::array();
  std::map<std::string, size_t> index;
  nlohmann::json processes = nlohmann::json::array();
  for (const auto& p : procs) {
    nlohmann::json facts = p.value("facts", nlohmann::json::object());
    nlohmann::json pd = facts.value("devices", nlohmann::json::array());
    for (const auto& d : pd) {
      std::string uuid = d.value("uuid", "");
      if (uuid.empty()) continue;
      if (!index.count(uuid)) {
        index[uuid] = devices.size();
        devices.push_back({{"uuid", uuid},
                           {"name", d.value("name", "")},
                           {"chip", d.value("chip", "")},
                           {"memory_used_bytes", 0}});
      }
      auto& nd = devices[index[uuid]];
      nd["memory_used_bytes"] =
          nd["memory_used_bytes"].get<uint64_t>() + d.value("memory_used_bytes", uint64_t{0});
    }
    processes.push_back({{"pid", p.value("pid", 0)}, {"devices", pd}});
  }
  return nlohmann::json{{"vendor", "amd"},
                        {"restore_by", "criu amdgpu_plugin"},
                        {"devices", devices},
                        {"processes", processes}};
}

absl::StatusOr<nlohmann::json> RocmPlugin::CheckCompatible(const nlohmann::json& section,
                                                           const nlohmann::json& request) {
  if (std::string why = Unavailable(); !why.empty()) return absl::FailedPreconditionError(why);
  const std::vector<CheckpointedGpu> ckpt = CheckpointedGpus(section);
  std::vector<NodeGpu> node;
  std::vector<std::string> base;
  for (const Gpu& g : Gpus()) {
    node.push_back({g.uuid, g.name, g.chip, g.free_bytes});
    base.push_back(g.uuid);
  }
  std::optional<std::vector<std::string>> allowed;
  pid_t env_pid = request.value("env_pid", 0);
  if (env_pid > 0) {
    auto env = proc_.EnvironMap(env_pid);
    if (!env.ok()) return absl::FailedPreconditionError(std::string(env.status().message()));
    for (const char* var : {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"}) {
      auto it = env->find(var);
      if (it == env->end()) continue;
      auto r = ResolveVisibleDevices(it->second, allowed.value_or(base));
      if (!r.ok()) return r.status();
      allowed = *r;
    }
  }
  DeviceMap requested;
  if (request.contains("map") && request["map"].is_object()) {
    for (const auto& c : ckpt) {
      if (request["map"].contains(c.uuid)) requested[c.uuid] = request["map"][c.uuid];
    }
  }
  auto planned = PlanDeviceMap(ckpt, node, allowed, requested);
  if (!planned.ok()) return planned.status();
  // CRIU's amdgpu plugin picks the target GPUs itself (by topology); this map is our check.
  return nlohmann::json{{"map", *planned}, {"advisory", true}};
}

absl::StatusOr<nlohmann::json> RocmPlugin::CriuOptions(const std::vector<pid_t>& pids) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : options_.criu_env) env[k] = v;
  return nlohmann::json{{"args", {"--libdir", options_.criu_plugin_dir}}, {"env", env}};
}

}  // namespace cryo::gpu::rocm
