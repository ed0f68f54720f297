#include "daemon/gpu/plugin_gpu_manager.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/gpu/attempts.h"
#include "lib/base/fs.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/parallel.h"
#include "lib/base/proc.h"

namespace cryo::gpu {
namespace {

constexpr char kLibPrefix[] = "libcryo_gpu_";
constexpr char kLibSuffix[] = ".so";

// One status for a step over several processes: the first failure's code, every message.
absl::Status Combine(const std::vector<GpuProcess>& procs, const std::vector<absl::Status>& st,
                     absl::string_view step) {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::vector<std::string> msgs;
  for (size_t i = 0; i < st.size(); ++i) {
    if (st[i].ok()) continue;
    if (code == absl::StatusCode::kOk) code = st[i].code();
    msgs.push_back(absl::StrCat("pid ", procs[i].pid, ": ", st[i].message()));
  }
  if (code == absl::StatusCode::kOk) return absl::OkStatus();
  return absl::Status(code, absl::StrCat("GPU ", step, " failed: ", absl::StrJoin(msgs, "; ")));
}

uint32_t TimeoutMs(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return 0;  // the ABI's "no bound"
  int64_t ms = absl::ToInt64Milliseconds(d);
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, std::numeric_limits<uint32_t>::max()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuManager>> CreateGpuManager(const GpuConfig& config) {
  auto m = PluginGpuManager::Create(config);
  if (!m.ok()) return m.status();
  return std::unique_ptr<GpuManager>(std::move(*m));
}

absl::StatusOr<std::unique_ptr<PluginGpuManager>> PluginGpuManager::Create(
    const GpuConfig& config) {
  std::unique_ptr<PluginGpuManager> m(new PluginGpuManager(config));
  auto options = [&](const std::string& name) -> nlohmann::json {
    if (config.plugin_options.is_object() && config.plugin_options.contains(name)) {
      return config.plugin_options[name];
    }
    return nlohmann::json::object();
  };
  auto add = [&](absl::StatusOr<std::unique_ptr<Plugin>> p) -> absl::Status {
    if (!p.ok()) return p.status();
    for (const auto& have : m->plugins_) {
      if (have->name() == (*p)->name()) {
        return absl::InvalidArgumentError(absl::StrCat("two GPU plugins are named ", (*p)->name()));
      }
    }
    m->plugins_.push_back(*std::move(p));
    return absl::OkStatus();
  };
  for (const cryo_gpu_plugin_api* t : config.tables) {
    std::string name = t != nullptr && t->name != nullptr ? t->name : "";
    if (absl::Status s = add(Plugin::FromTable(t, options(name))); !s.ok()) return s;
  }
  std::vector<std::string> names = config.plugins;
  if (names.empty()) {
    for (const std::string& f : fs::ListNames(config.plugin_dir)) {
      if (absl::StartsWith(f, kLibPrefix) && absl::EndsWith(f, kLibSuffix)) {
        names.push_back(f.substr(sizeof(kLibPrefix) - 1,
                                 f.size() - (sizeof(kLibPrefix) - 1) - (sizeof(kLibSuffix) - 1)));
      }
    }
    std::sort(names.begin(), names.end());
  }
  for (const std::string& name : names) {
    bool in_memory = false;
    for (const auto& have : m->plugins_) in_memory = in_memory || have->name() == name;
    if (in_memory) continue;
    std::string path = absl::StrCat(config.plugin_dir, "/", kLibPrefix, name, kLibSuffix);
    if (!fs::Exists(path)) {
      return absl::NotFoundError(absl::StrCat("GPU plugin ", name, " not found at ", path));
    }
    if (absl::Status s = add(Plugin::Open(path, options(name))); !s.ok()) return s;
  }
  return m;
}

absl::StatusOr<Plugin*> PluginGpuManager::Find(const std::string& name) {
  for (const auto& p : plugins_) {
    if (p->name() == name) return p.get();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no GPU plugin named ", name, " is loaded in this cryod"));
}

absl::StatusOr<std::vector<GpuProcess>> PluginGpuManager::Discover(const std::vector<pid_t>& pids) {
  std::vector<GpuProcess> out;
  std::map<pid_t, std::string> owner;
  for (const auto& p : plugins_) {
    auto found = p->Discover(pids);
    if (!found.ok()) return found.status();
    if (!found->is_array()) {
      return absl::InternalError(absl::StrCat(p->name(), " plugin: discover gave no array"));
    }
    for (size_t i = 0; i < found->size(); ++i) {
      // What a plugin says is checked like any outside input: a wrong type is an error.
      json::Fields f((*found)[i], absl::StrCat(p->name(), " plugin: discover[", i, "]"));
      GpuProcess proc;
      proc.plugin = p->name();
      proc.facts = nlohmann::json::object();
      absl::Status s = (*found)[i].is_object()
                           ? f.Int("pid", &proc.pid, /*required=*/true)
                           : absl::InvalidArgumentError(absl::StrCat(
                                 p->name(), " plugin: discover[", i, "] is not an object"));
      auto facts = f.Object("facts");
      if (s.ok() && !facts.ok()) s = facts.status();
      if (!s.ok()) return absl::InternalError(s.message());
      if (*facts != nullptr) proc.facts = **facts;
      if (proc.pid <= 0) continue;
      auto [it, fresh] = owner.emplace(proc.pid, p->name());
      if (!fresh) {
        return absl::FailedPreconditionError(
            absl::StrCat("pid ", proc.pid, " uses both ", it->second, " and ", p->name(),
                         " GPUs: one process on two GPU vendors is not supported"));
      }
      out.push_back(std::move(proc));
    }
  }
  // Keep the caller's order: logs and manifests read naturally.
  std::map<pid_t, size_t> order;
  for (size_t i = 0; i < pids.size(); ++i) order.emplace(pids[i], i);
  std::stable_sort(out.begin(), out.end(), [&](const GpuProcess& a, const GpuProcess& b) {
    return order[a.pid] < order[b.pid];
  });
  return out;
}

absl::Status PluginGpuManager::Lock(const std::vector<GpuProcess>& procs, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a GPU lock needs a positive bound");
  }
  std::vector<Plugin*> plugin(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    auto p = Find(procs[i].plugin);
    if (!p.ok()) return p.status();
    plugin[i] = *p;
  }
  // One attempt: every process locked within `bound`, or those that did unlocked again (the
  // job must keep running) and the failure returned.
  auto attempt = [&](absl::Duration bound) -> Attempt {
    const uint32_t bound_ms = TimeoutMs(bound);
    auto st = EachInParallel(procs.size(),
                             [&](size_t i) { return plugin[i]->Lock(procs[i].pid, bound_ms); });
    absl::Status all = Combine(procs, st, "lock");
    if (all.ok()) return {all, false};
    std::vector<GpuProcess> locked;
    bool only_busy = true;  // every failure is work still running, nothing worse
    for (size_t i = 0; i < procs.size(); ++i) {
      if (st[i].ok()) locked.push_back(procs[i]);
      if (!st[i].ok() && !absl::IsDeadlineExceeded(st[i])) only_busy = false;
    }
    Rollback(locked);
    return {all, only_busy};
  };
  if (procs.size() <= 1) return attempt(timeout).status;
  // Ranks of one job are locked together, in attempts (attempts.h).
  int attempts = 0;
  absl::Status st = InAttempts(
      timeout, absl::StrCat("lock the job's ", procs.size(), " GPU processes"), attempt, &attempts);
  if (st.ok() && attempts > 1) {
    CRYO_LOG(Info) << "GPU lock of " << procs.size() << " processes held together at attempt "
                   << attempts;
  }
  return st;
}

absl::Status PluginGpuManager::Checkpoint(std::vector<GpuProcess>& procs) {
  std::vector<Plugin*> plugin(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    auto p = Find(procs[i].plugin);
    if (!p.ok()) {
      Rollback(procs);
      return p.status();
    }
    plugin[i] = *p;
  }
  auto thp = thp_.Acquire();
  std::vector<int64_t> took_ms(procs.size(), 0);
  auto st = EachInParallel(procs.size(), [&](size_t i) {
    auto start = std::chrono::steady_clock::now();
    absl::Status s = plugin[i]->Checkpoint(procs[i].pid);
    took_ms[i] = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    return s;
  });
  thp_.Release();
  for (size_t i = 0; i < procs.size(); ++i) {
    if (!procs[i].facts.is_object()) procs[i].facts = nlohmann::json::object();
    procs[i].facts["checkpoint_ms"] = took_ms[i];
    if (!config_.thp_during_checkpoint.empty()) {
      procs[i].facts["thp"] = thp.ok() ? *thp : absl::StrCat("unchanged: ", thp.status().message());
    }
  }
  absl::Status all = Combine(procs, st, "checkpoint");
  if (all.ok()) return all;
  // Restore and unlock everything (the plugin knows each process's state): the job runs on.
  Rollback(procs);
  return absl::Status(all.code(), absl::StrCat(all.message(), " (GPU state rolled back)"));
}

absl::Status PluginGpuManager::Restore(const std::vector<GpuProcess>& procs, const DeviceMap& map) {
  std::vector<Plugin*> plugin(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    auto p = Find(procs[i].plugin);
    if (!p.ok()) return p.status();
    plugin[i] = *p;
  }
  auto st = EachInParallel(procs.size(), [&](size_t i) {
    return plugin[i]->Restore(procs[i].pid, procs[i].facts, map);
  });
  return Combine(procs, st, "restore");
}

absl::Status PluginGpuManager::Unlock(const std::vector<GpuProcess>& procs) {
  std::vector<Plugin*> plugin(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    auto p = Find(procs[i].plugin);
    if (!p.ok()) return p.status();
    plugin[i] = *p;
  }
  auto st = EachInParallel(procs.size(), [&](size_t i) { return plugin[i]->Unlock(procs[i].pid); });
  return Combine(procs, st, "unlock");
}

void PluginGpuManager::Rollback(const std::vector<GpuProcess>& procs) {
  EachInParallel(procs.size(), [&](size_t i) {
    auto p = Find(procs[i].plugin);
    if (!p.ok()) return p.status();
    return (*p)->Rollback(procs[i].pid);
  });
}

nlohmann::json PluginGpuManager::Describe(const std::vector<GpuProcess>& procs) {
  if (procs.empty()) return nullptr;
  std::map<std::string, std::vector<GpuProcess>> by_plugin;
  for (const GpuProcess& p : procs) by_plugin[p.plugin].push_back(p);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, mine] : by_plugin) {
    auto p = Find(name);
    if (!p.ok()) {
      out[name] = {{"error", std::string(p.status().message())}};
      continue;
    }
    auto section = (*p)->Describe(mine);
    if (!section.ok()) {
      out[name] = {{"error", std::string(section.status().message())}};
      continue;
    }
    if (section->is_object()) (*section)["plugin_version"] = (*p)->version();
    out[name] = *section;
  }
  return out;
}

absl::Status PluginGpuManager::CheckCompatible(const nlohmann::json& manifest_gpu, DeviceMap& map) {
  return CheckCompatibleFor(manifest_gpu, RestoreTarget{}, map);
}

absl::Status PluginGpuManager::CheckCompatibleFor(const nlohmann::json& manifest_gpu,
                                                  const RestoreTarget& target, DeviceMap& map) {
  if (manifest_gpu.is_null() || manifest_gpu.empty()) return absl::OkStatus();
  if (!manifest_gpu.is_object()) {
    return absl::InvalidArgumentError("manifest gpu section is not an object");
  }
  nlohmann::json request = nlohmann::json::object();
  request["map"] = map;
  if (target.env_pid > 0) request["env_pid"] = target.env_pid;
  if (target.devices.has_value()) request["devices"] = *target.devices;
  DeviceMap planned;
  for (const auto& [name, section] : manifest_gpu.items()) {
    auto p = Find(name);
    if (!p.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint holds ", name, " GPU state but no ", name, " GPU plugin is loaded"));
    }
    PluginStatus st = (*p)->Status();
    if (!st.available) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint holds ", name, " GPU state but the ", name,
                       " plugin is unavailable on this node: ", st.detail));
    }
    auto answer = (*p)->CheckCompatible(section, request);
    if (!answer.ok()) return answer.status();
    if (answer->contains("map") && (*answer)["map"].is_object()) {
      for (const auto& [from, to] : (*answer)["map"].items()) {
        if (to.is_string()) planned[from] = to.get<std::string>();
      }
    }
  }
  if (map.empty()) map = planned;
  return absl::OkStatus();
}

absl::StatusOr<CriuExtras> PluginGpuManager::CriuOptions(const std::vector<GpuProcess>& procs) {
  std::map<std::string, std::vector<pid_t>> by_plugin;
  for (const GpuProcess& p : procs) by_plugin[p.plugin].push_back(p.pid);
  CriuExtras extras;
  std::set<std::string> seen_args;
  for (const auto& [name, pids] : by_plugin) {
    auto p = Find(name);
    if (!p.ok()) return p.status();
    auto o = (*p)->CriuOptions(pids);
    if (!o.ok()) return o.status();
    json::Fields f(*o, absl::StrCat(name, " plugin: criu_options"));
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    absl::Status s = o->is_object() ? f.Strs("args", &args)
                                    : absl::InvalidArgumentError(absl::StrCat(
                                          name, " plugin: criu_options is not an object"));
    if (s.ok()) s = f.StrMap("env", &env);
    if (!s.ok()) return absl::InternalError(s.message());
    // Flags come as "--flag value" pairs or single "--flag=value" words; drop exact repeats.
    std::string joined = absl::StrJoin(args, "\x1f");
    if (!args.empty() && seen_args.insert(joined).second) {
      extras.args.insert(extras.args.end(), args.begin(), args.end());
    }
    for (auto& [k, v] : env) extras.env[k] = std::move(v);
  }
  return extras;
}

std::vector<PluginStatus> PluginGpuManager::Plugins() {
  std::vector<PluginStatus> out;
  for (const auto& p : plugins_) out.push_back(p->Status());
  return out;
}

std::vector<DeviceInfo> PluginGpuManager::Devices() {
  std::vector<DeviceInfo> out;
  for (const auto& p : plugins_) {
    auto devs = p->ListDevices();
    if (!devs.ok() || !devs->is_array()) continue;
    for (const nlohmann::json& d : *devs) {
      DeviceInfo info;
      info.vendor = p->name();
      json::Fields f(d, absl::StrCat(p->name(), " plugin: device"));
      absl::Status s = d.is_object() ? absl::OkStatus()
                                     : absl::InvalidArgumentError(absl::StrCat(
                                           p->name(), " plugin: a device is not an object"));
      for (auto [key, field] :
           {std::pair{"uuid", &info.uuid}, std::pair{"name", &info.name},
            std::pair{"chip", &info.chip}, std::pair{"driver_version", &info.driver_version}}) {
        if (s.ok()) s = f.Str(key, field);
      }
      if (s.ok()) s = f.Uint64("memory_total_bytes", &info.memory_total_bytes);
      if (s.ok()) s = f.Uint64("memory_free_bytes", &info.memory_free_bytes);
      if (!s.ok()) {
        CRYO_LOG(Warning) << "ignoring a GPU: " << s.message();
        continue;
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

}  // namespace cryo::gpu
