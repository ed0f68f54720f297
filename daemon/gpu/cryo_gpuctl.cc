// cryo-gpuctl: drives the GPU plugins on live processes without cryod or CRIU, and times each
// step. For the GPU e2e suite and for looking at a node by hand.
//
//   cryo-gpuctl [options] status | devices
//   cryo-gpuctl [options] discover|describe PID...
//   cryo-gpuctl [options] lock|checkpoint|restore|unlock|rollback PID...
//   cryo-gpuctl [options] cycle PID...   discover, lock, checkpoint, (hold), restore, unlock
//   cryo-gpuctl fastpath-status PID...   what the fast-path library in each process says
//   cryo-gpuctl [--files DIR] fastpath-drain|fastpath-refill PID   one step of the fast path
//     alone (drain leaves the files' digests in DIR/fastpath-<nspid>.digests.json for refill)
//
// With --fast, cycle first drains each process through its fast-path library (into files under
// --files DIR with --writers files each, or into the process's own memory without --files), and
// refills it after the unlock: the driver then only moves what the library does not own. A
// failure at any step takes back what the steps before it did, newest first (the driver's
// rollback, then each drained process refilled), so the processes run on with their memory.
// Options: --plugin-dir DIR, --plugins cuda,rocm, --plugin NAME (for single steps, default
// cuda), --timeout-ms N (lock), --thp MODE (during checkpoint), --hold-ms N (cycle: time between
// checkpoint and restore), --map FROM=TO (restore/cycle), --plugin-options JSON ({"cuda": {...}}),
// --fast, --files DIR, --writers N, --threads N (the fast path's copy threads).
// Prints one JSON object on stdout; exit 0 on success, 1 on failure (the JSON says why).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "daemon/gpu/fastpath_client.h"
#include "daemon/gpu/gpu_manager_factory.h"
#include "daemon/gpu/plugin_gpu_manager.h"
#include "lib/base/flags.h"
#include "lib/contract/gpu_fastpath_messages.h"

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
               "                   [--plugin-options JSON] [--fast [--files DIR] [--writers N] "
               "[--threads N]]\n"
               "                   status|devices|discover|describe|lock|checkpoint|restore|"
               "unlock|rollback|cycle|fastpath-status|fastpath-drain|fastpath-refill [PID...]\n");
  return 2;
}

// A fast-path reply as the channel spells it, for the output.
template <typename T>
nlohmann::json AsJson(const T& reply) {
  return nlohmann::json::parse(cryo::contract::gpu_fastpath::Encode(reply));
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
  bool fast = false;
  std::string files_dir;
  int writers = 4;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  fs.Bool("fast", &fast, "cycle: drain and refill through the fast-path library");
  fs.String("files", &files_dir, "fast path: save into files under DIR", "DIR");
  fs.Int("writers", &writers, "fast path: files (and writers) per process");
  fs.Int("threads", &threads, "fast path: copy threads per process");
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

  if (cmd == "fastpath-status") {
    cryo::proc::ProcReader proc;
    nlohmann::json out = {{"command", cmd}, {"processes", nlohmann::json::array()}};
    bool ok = true;
    for (pid_t p : pids) {
      auto st = cryo::gpu::FastpathStatus(proc, {p, proc.NsPid(p)}, absl::Seconds(10));
      ok = ok && st.ok();
      out["processes"].push_back(
          st.ok() ? AsJson(*st) : nlohmann::json{{"pid", p}, {"error", StatusJson(st.status())}});
    }
    out["ok"] = ok;
    std::printf("%s\n", out.dump(2).c_str());
    return ok ? 0 : 1;
  }

  if (cmd == "fastpath-drain" || cmd == "fastpath-refill") {
    if (pids.size() != 1) return Usage();
    cryo::proc::ProcReader proc;
    cryo::gpu::FastpathProcess p{pids[0], proc.NsPid(pids[0])};
    const std::string digests_path =
        files_dir + "/fastpath-" + std::to_string(p.ns_pid) + ".digests.json";
    nlohmann::json out = {{"command", cmd}};
    auto finish = [&](const absl::Status& st) {
      if (!st.ok()) out["error"] = StatusJson(st);
      out["ok"] = st.ok();
      std::printf("%s\n", out.dump(2).c_str());
      return st.ok() ? 0 : 1;
    };
    auto t0 = Clock::now();
    std::vector<int> fds;
    if (cmd == "fastpath-drain") {
      if (!files_dir.empty()) {
        auto opened = cryo::gpu::OpenFastpathFiles(files_dir, p.ns_pid, writers, true);
        if (!opened.ok()) return finish(opened.status());
        fds = *opened;
      }
      cryo::gpu::FastpathDrainOptions dopt;
      dopt.threads = std::max(1, threads);
      dopt.quiesce_timeout = timeout;
      auto d = cryo::gpu::FastpathDrain::Start(proc, p, dopt, fds);
      if (!d.ok()) return finish(d.status());
      out["drained"] = AsJson((*d)->drained());
      out["drain_ms"] = Ms(t0, Clock::now());
      auto saved = (*d)->WaitSaved();
      cryo::CloseAll(fds);
      if (!saved.ok()) return finish(saved.status());
      out["saved_ms"] = Ms(t0, Clock::now());
      nlohmann::json ds = nlohmann::json::array();
      for (const auto& dg : *saved) ds.push_back({{"size", dg.size}, {"checksum", dg.checksum}});
      out["files"] = ds;
      if (!files_dir.empty()) {
        FILE* f = std::fopen(digests_path.c_str(), "w");
        if (f == nullptr) return finish(absl::InternalError("cannot write " + digests_path));
        std::fprintf(f, "%s\n", ds.dump().c_str());
        std::fclose(f);
      }
      return finish(absl::OkStatus());
    }
    std::vector<cryo::FileDigest> expected;
    if (!files_dir.empty()) {
      FILE* f = std::fopen(digests_path.c_str(), "r");
      if (f == nullptr) return finish(absl::NotFoundError("no " + digests_path));
      std::string text;
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
      std::fclose(f);
      nlohmann::json ds = nlohmann::json::parse(text, nullptr, false);
      if (!ds.is_array()) return finish(absl::DataLossError(digests_path + " is not a list"));
      for (const auto& d : ds) {
        expected.push_back({d.value("size", uint64_t{0}), d.value("checksum", std::string())});
      }
      auto opened = cryo::gpu::OpenFastpathFiles(files_dir, p.ns_pid,
                                                 static_cast<int>(expected.size()), false);
      if (!opened.ok()) return finish(opened.status());
      fds = *opened;
    }
    auto r =
        cryo::gpu::FastpathRefill(proc, p, std::max(1, threads), fds, expected, absl::Minutes(10));
    cryo::CloseAll(fds);
    out["refill_ms"] = Ms(t0, Clock::now());
    if (!r.ok()) return finish(r.status());
    out["refilled"] = AsJson(*r);
    return finish(absl::OkStatus());
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
  // What each step did that a later failure must take back, run newest first: the driver's
  // rollback (restore and unlock) before the fast path's refills, as the engine's undos do.
  std::vector<std::function<void()>> undo;
  auto fail = [&](const absl::Status& st) {
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) (*it)();
    return finish(st);
  };
  // The fast path first: each process moves what its library owns, all in parallel.
  cryo::proc::ProcReader proc;
  struct Fast {
    cryo::gpu::FastpathProcess p;
    std::vector<int> files;
    std::unique_ptr<cryo::gpu::FastpathDrain> drain;
    std::vector<cryo::FileDigest> digests;
    absl::Status st;
  };
  std::vector<Fast> fasts(fast ? procs.size() : 0);
  if (fast) {
    cryo::gpu::FastpathDrainOptions dopt;
    dopt.threads = std::max(1, threads);
    dopt.quiesce_timeout = timeout;
    std::vector<std::thread> ts;
    for (size_t i = 0; i < procs.size(); ++i) {
      fasts[i].p = {procs[i].pid, proc.NsPid(procs[i].pid)};
      ts.emplace_back([&, i] {
        Fast& f = fasts[i];
        if (!files_dir.empty()) {
          auto opened = cryo::gpu::OpenFastpathFiles(files_dir, f.p.ns_pid, writers, true);
          if (!opened.ok()) {
            f.st = opened.status();
            return;
          }
          f.files = *opened;
        }
        auto d = cryo::gpu::FastpathDrain::Start(proc, f.p, dopt, f.files);
        if (!d.ok()) {
          f.st = d.status();
          return;
        }
        f.drain = *std::move(d);
      });
    }
    for (auto& t : ts) t.join();
    out["drain_ms"] = Ms(t0, Clock::now());
    out["gpu_free_after_drain_bytes"] = FreeBytes(m);
    nlohmann::json drained = nlohmann::json::array();
    for (Fast& f : fasts) {
      if (!f.drain) continue;
      drained.push_back(AsJson(f.drain->drained()));
      // A drained process gets its memory back: from the files once they are written, else
      // from its own memory.
      undo.push_back([&f, &proc, &files_dir, writers, threads] {
        std::vector<int> in;
        if (!f.files.empty()) {
          auto saved = f.drain->WaitSaved(/*stoppable=*/false);
          cryo::CloseAll(f.files);
          if (saved.ok()) f.digests = *saved;
          auto opened = cryo::gpu::OpenFastpathFiles(files_dir, f.p.ns_pid, writers, false);
          if (opened.ok()) in = *opened;
        }
        auto r = cryo::gpu::FastpathRefill(proc, f.p, std::max(1, threads), in, f.digests,
                                           absl::Minutes(10));
        cryo::CloseAll(in);
        if (!r.ok())
          std::cerr << "rollback: refill of pid " << f.p.pid << ": " << r.status() << "\n";
      });
    }
    out["fastpath_drained"] = drained;
    for (Fast& f : fasts) {
      if (!f.st.ok()) return fail(f.st);
    }
  }
  s = timed("lock", [&] { return m.Lock(procs, timeout); });
  if (!s.ok()) return fail(s);
  undo.push_back([&] { m.Rollback(procs); });
  s = timed("checkpoint", [&] { return m.Checkpoint(procs); });
  out["vacate_ms"] = Ms(t0, Clock::now());
  if (!s.ok()) return fail(s);
  if (fast) {
    // The files are written beside the driver's checkpoint; done when the data is out of the
    // processes' memory.
    for (Fast& f : fasts) {
      auto saved = f.drain->WaitSaved();
      if (!saved.ok()) return fail(saved.status());
      f.digests = *saved;
    }
    for (Fast& f : fasts) cryo::CloseAll(f.files);
    for (Fast& f : fasts) f.files.clear();
    out["saved_ms"] = Ms(t0, Clock::now());
  }
  uint64_t free_after = FreeBytes(m);
  out["gpu_free_after_checkpoint_bytes"] = free_after;
  out["gpu_freed_bytes"] = free_after > free_before ? free_after - free_before : 0;
  out["describe"] = m.Describe(procs);
  if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  cryo::gpu::DeviceMap planned = map;
  s = timed("check_compatible", [&] { return m.CheckCompatible(out["describe"], planned); });
  if (!s.ok()) return fail(s);
  out["map"] = planned;
  s = timed("restore", [&] { return m.Restore(procs, planned); });
  if (!s.ok()) return fail(s);
  s = timed("unlock", [&] { return m.Unlock(procs); });
  out["gpu_free_after_unlock_bytes"] = FreeBytes(m);
  if (!s.ok()) return fail(s);
  if (!fast) return finish(s);
  auto t_refill = Clock::now();
  std::vector<std::thread> ts;
  nlohmann::json refilled = nlohmann::json::array();
  std::vector<absl::StatusOr<cryo::contract::gpu_fastpath::RefillReply>> results(
      fasts.size(), absl::UnknownError(""));
  for (size_t i = 0; i < fasts.size(); ++i) {
    ts.emplace_back([&, i] {
      Fast& f = fasts[i];
      std::vector<int> in;
      if (!files_dir.empty()) {
        auto opened = cryo::gpu::OpenFastpathFiles(files_dir, f.p.ns_pid, writers, false);
        if (!opened.ok()) {
          results[i] = opened.status();
          return;
        }
        in = *opened;
      }
      results[i] = cryo::gpu::FastpathRefill(proc, f.p, std::max(1, threads), in, f.digests,
                                             absl::Minutes(10));
      cryo::CloseAll(in);
    });
  }
  for (auto& t : ts) t.join();
  out["refill_ms"] = Ms(t_refill, Clock::now());
  for (auto& r : results) {
    if (!r.ok()) return finish(r.status());
    refilled.push_back(AsJson(*r));
  }
  out["fastpath_refilled"] = refilled;
  out["gpu_free_after_refill_bytes"] = FreeBytes(m);
  return finish(absl::OkStatus());
}
