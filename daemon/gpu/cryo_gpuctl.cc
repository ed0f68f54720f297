// cryo-gpuctl: drives the GPU plugins on live processes without cryod or CRIU, and times each
// step. For the GPU e2e suite and for looking at a node by hand.
//
//   cryo-gpuctl [options] status | devices
//   cryo-gpuctl [options] discover|describe PID...
//   cryo-gpuctl [options] lock|checkpoint|restore|unlock|rollback PID...
//   cryo-gpuctl [options] cycle PID...   discover, lock, checkpoint, (hold), restore, unlock
//
// Options: --plugin-dir DIR, --plugins cuda,rocm, --plugin NAME (for single steps, default
// cuda), --timeout-ms N (lock), --thp MODE (during checkpoint), --hold-ms N (cycle: time between
// checkpoint and restore), --map FROM=TO (restore/cycle), --plugin-options JSON ({"cuda": {...}}).
// Prints one JSON object on stdout; exit 0 on success, 1 on failure (the JSON says why).

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "daemon/gpu/gpu_manager_factory.h"
#include "daemon/gpu/plugin_gpu_manager.h"
#include "lib/base/flags.h"

namespace {

using cryo::gpu::GpuProcess;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int Usage() {
  std::fprintf(stderr,
               "usage: cryo-gpuctl [--plugin-dir DIR] [--plugins a,b] [--plugin NAME] "
               "[--timeout-ms N] [--thp MODE] [--hold-ms N] [--map FROM=TO]\n"
               "                   [--plugin-options JSON]\n"
               "                   status|devices|discover|describe|lock|checkpoint|restore|"
               "unlock|rollback|cycle [PID...]\n");
  return 2;
}

nlohmann::json StatusJson(const absl::Status& s) {
  return {{"code", absl::StatusCodeToString(s.code())}, {"message", std::string(s.message())}};
}

nlohmann::json DevicesJson(cryo::gpu::GpuManager& m) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : m.Devices()) {
    out.push_back({{"vendor", d.vendor},
                   {"uuid", d.uuid},
                   {"name", d.name},
                   {"chip", d.chip},
                   {"memory_total_bytes", d.memory_total_bytes},
                   {"memory_free_bytes", d.memory_free_bytes},
                   {"driver_version", d.driver_version}});
  }
  return out;
}

uint64_t FreeBytes(cryo::gpu::GpuManager& m) {
  uint64_t sum = 0;
  for (const auto& d : m.Devices()) sum += d.memory_free_bytes;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  cryo::gpu::GpuConfig cfg;
  const char* env_dir = std::getenv("CRYO_GPU_PLUGIN_DIR");
  if (env_dir != nullptr) cfg.plugin_dir = env_dir;
  std::string single = "cuda";
  int64_t hold_ms = 0;
  cryo::gpu::DeviceMap map;
  absl::Duration timeout = absl::Seconds(10);
  std::string plugin_options;
  cryo::flags::FlagSet fs;
  fs.String("plugin-dir", &cfg.plugin_dir, "directory of the plugin libraries", "DIR");
  fs.StringList("plugins", &cfg.plugins, "plugins to load", "a,b", /*split_commas=*/true);
  fs.String("plugin", &single, "plugin of single steps", "NAME");
  fs.Custom(
      "timeout-ms",
      [&](absl::string_view v) {
        int64_t ms = 0;
        if (!absl::SimpleAtoi(v, &ms) || ms < 0) {
          return absl::InvalidArgumentError("--timeout-ms wants milliseconds");
        }
        timeout = absl::Milliseconds(ms);
        return absl::OkStatus();
      },
      "lock bound", "N");
  fs.String("plugin-options", &plugin_options, "options per plugin", "JSON");
  fs.String("thp", &cfg.thp_during_checkpoint, "THP mode during checkpoint", "MODE");
  fs.Int64("hold-ms", &hold_ms, "cycle: time between checkpoint and restore");
  fs.KeyValues("map", &map, "restore onto another GPU", "FROM=TO");
  auto parsed = fs.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::fprintf(stderr, "cryo-gpuctl: %s\n", std::string(parsed.status().message()).c_str());
    return Usage();
  }
  if (parsed->help) return Usage();
  if (!plugin_options.empty()) {
    cfg.plugin_options = nlohmann::json::parse(plugin_options, nullptr, false);
    if (!cfg.plugin_options.is_object()) return Usage();
  }
  const std::vector<std::string>& rest = parsed->positional;
  if (rest.empty()) return Usage();
  std::string cmd = rest[0];
  std::vector<pid_t> pids;
  for (size_t i = 1; i < rest.size(); ++i) {
    int pid = 0;
    if (!absl::SimpleAtoi(rest[i], &pid) || pid <= 0) return Usage();
    pids.push_back(pid);
  }

  auto created = cryo::gpu::CreateGpuManager(cfg);
  nlohmann::json out = {{"command", cmd}};
  if (!created.ok()) {
    out["error"] = StatusJson(created.status());
    std::printf("%s\n", out.dump(2).c_str());
    return 1;
  }
  cryo::gpu::GpuManager& m = **created;
  auto finish = [&](const absl::Status& s) {
    if (!s.ok()) out["error"] = StatusJson(s);
    out["ok"] = s.ok();
    std::printf("%s\n", out.dump(2).c_str());
    return s.ok() ? 0 : 1;
  };

  if (cmd == "status") {
    nlohmann::json ps = nlohmann::json::array();
    for (const auto& p : m.Plugins()) {
      ps.push_back({{"name", p.name},
                    {"version", p.version},
                    {"available", p.available},
                    {"detail", p.detail}});
    }
    out["plugins"] = ps;
    out["devices"] = DevicesJson(m);
    return finish(absl::OkStatus());
  }
  if (cmd == "devices") {
    out["devices"] = DevicesJson(m);
    return finish(absl::OkStatus());
  }
  if (pids.empty()) return Usage();

  // Single steps act on the named plugin directly: after a checkpoint the process holds no
  // device files, so discover would no longer find it.
  std::vector<GpuProcess> procs;
  for (pid_t p : pids) procs.push_back({p, single, nlohmann::json::object()});
  auto timed = [&](const char* key, auto&& f) {
    auto t0 = Clock::now();
    absl::Status s = f();
    out[std::string(key) + "_ms"] = Ms(t0, Clock::now());
    return s;
  };

  if (cmd == "discover" || cmd == "describe") {
    auto found = m.Discover(pids);
    if (!found.ok()) return finish(found.status());
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& g : *found)
      arr.push_back({{"pid", g.pid}, {"plugin", g.plugin}, {"facts", g.facts}});
    out["processes"] = arr;
    if (cmd == "describe") out["describe"] = m.Describe(*found);
    return finish(absl::OkStatus());
  }
  if (cmd == "lock") return finish(timed("lock", [&] { return m.Lock(procs, timeout); }));
  if (cmd == "checkpoint") return finish(timed("checkpoint", [&] { return m.Checkpoint(procs); }));
  if (cmd == "restore") return finish(timed("restore", [&] { return m.Restore(procs, map); }));
  if (cmd == "unlock") return finish(timed("unlock", [&] { return m.Unlock(procs); }));
  if (cmd == "rollback") {
    return finish(timed("rollback", [&] {
      m.Rollback(procs);
      return absl::OkStatus();
    }));
  }
  if (cmd != "cycle") return Usage();

  absl::StatusOr<std::vector<GpuProcess>> found;
  absl::Status s = timed("discover", [&] {
    found = m.Discover(pids);
    return found.status();
  });
  if (!s.ok()) return finish(s);
  if (found->empty()) return finish(absl::NotFoundError("no GPU process among the pids"));
  procs = *found;
  uint64_t free_before = FreeBytes(m);
  out["gpu_free_before_bytes"] = free_before;
  auto t0 = Clock::now();
  s = timed("lock", [&] { return m.Lock(procs, timeout); });
  if (!s.ok()) return finish(s);
  s = timed("checkpoint", [&] { return m.Checkpoint(procs); });
  out["vacate_ms"] = Ms(t0, Clock::now());
  if (!s.ok()) return finish(s);
  uint64_t free_after = FreeBytes(m);
  out["gpu_free_after_checkpoint_bytes"] = free_after;
  out["gpu_freed_bytes"] = free_after > free_before ? free_after - free_before : 0;
  out["describe"] = m.Describe(procs);
  if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  cryo::gpu::DeviceMap planned = map;
  s = timed("check_compatible", [&] { return m.CheckCompatible(out["describe"], planned); });
  if (!s.ok()) {
    m.Rollback(procs);
    return finish(s);
  }
  out["map"] = planned;
  s = timed("restore", [&] { return m.Restore(procs, planned); });
  if (!s.ok()) {
    m.Rollback(procs);
    return finish(s);
  }
  s = timed("unlock", [&] { return m.Unlock(procs); });
  out["gpu_free_after_unlock_bytes"] = FreeBytes(m);
  return finish(s);
}
