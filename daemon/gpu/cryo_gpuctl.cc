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
#include <map>
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
#include "lib/base/status.h"
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

// The command line, parsed.
struct Opts {
  cryo::gpu::GpuConfig cfg;
  std::string single = "cuda";
  int64_t hold_ms = 0;
  cryo::gpu::DeviceMap map;
  absl::Duration timeout = absl::Seconds(10);
  bool fast = false;
  std::string files_dir;
  int writers = 4;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::string cmd;
  std::vector<pid_t> pids;
};

// Prints `out` with the outcome; the exit code.
int Finish(nlohmann::json& out, const absl::Status& st) {
  if (!st.ok()) out["error"] = StatusJson(st);
  out["ok"] = st.ok();
  std::printf("%s\n", out.dump(2).c_str());
  return st.ok() ? 0 : 1;
}

int FastpathStatusCommand(const Opts& o) {
  cryo::proc::ProcReader proc;
  nlohmann::json out = {{"command", o.cmd}, {"processes", nlohmann::json::array()}};
  bool ok = true;
  for (pid_t p : o.pids) {
    auto st = cryo::gpu::FastpathStatus(proc, {p, proc.NsPid(p)}, absl::Seconds(10));
    ok = ok && st.ok();
    out["processes"].push_back(
        st.ok() ? AsJson(*st) : nlohmann::json{{"pid", p}, {"error", StatusJson(st.status())}});
  }
  out["ok"] = ok;
  std::printf("%s\n", out.dump(2).c_str());
  return ok ? 0 : 1;
}

std::string DigestsPath(const Opts& o, pid_t ns_pid) {
  return o.files_dir + "/fastpath-" + std::to_string(ns_pid) + ".digests.json";
}

// One drain alone: into files (their digests left beside them) or the process's memory.
absl::Status FastpathDrainOnce(const Opts& o, cryo::proc::ProcReader& proc,
                               const cryo::gpu::FastpathProcess& p, nlohmann::json& out) {
  const auto t0 = Clock::now();
  std::vector<cryo::UniqueFd> fds;
  if (!o.files_dir.empty()) {
    CRYO_ASSIGN_OR_RETURN(fds,
                          cryo::gpu::OpenFastpathFiles(o.files_dir, p.ns_pid, o.writers, true));
  }
  cryo::gpu::FastpathDrainOptions dopt;
  dopt.threads = std::max(1, o.threads);
  dopt.quiesce_timeout = o.timeout;
  auto d = cryo::gpu::FastpathDrain::Start(proc, p, dopt, cryo::Borrow(fds));
  if (!d.ok()) return d.status();
  out["drained"] = AsJson((*d)->drained());
  out["drain_ms"] = Ms(t0, Clock::now());
  auto saved = (*d)->WaitSaved();
  fds.clear();
  if (!saved.ok()) return saved.status();
  out["saved_ms"] = Ms(t0, Clock::now());
  nlohmann::json ds = nlohmann::json::array();
  for (const auto& dg : *saved) ds.push_back({{"size", dg.size}, {"checksum", dg.checksum}});
  out["files"] = ds;
  if (!o.files_dir.empty()) {
    const std::string path = DigestsPath(o, p.ns_pid);
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return absl::InternalError("cannot write " + path);
    std::fprintf(f, "%s\n", ds.dump().c_str());
    std::fclose(f);
  }
  return absl::OkStatus();
}

// One refill alone, from the files a drain left (checked against their digests) or memory.
absl::Status FastpathRefillOnce(const Opts& o, cryo::proc::ProcReader& proc,
                                const cryo::gpu::FastpathProcess& p, nlohmann::json& out) {
  const auto t0 = Clock::now();
  std::vector<cryo::UniqueFd> fds;
  std::vector<cryo::FileDigest> expected;
  if (!o.files_dir.empty()) {
    const std::string path = DigestsPath(o, p.ns_pid);
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return absl::NotFoundError("no " + path);
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    std::fclose(f);
    nlohmann::json ds = nlohmann::json::parse(text, nullptr, false);
    if (!ds.is_array()) return absl::DataLossError(path + " is not a list");
    for (const auto& d : ds) {
      expected.push_back({d.value("size", uint64_t{0}), d.value("checksum", std::string())});
    }
    CRYO_ASSIGN_OR_RETURN(
        fds, cryo::gpu::OpenFastpathFiles(o.files_dir, p.ns_pid, static_cast<int>(expected.size()),
                                          false));
  }
  auto r = cryo::gpu::FastpathRefill(proc, p, std::max(1, o.threads), cryo::Borrow(fds), expected,
                                     absl::Minutes(10));
  fds.clear();
  out["refill_ms"] = Ms(t0, Clock::now());
  if (!r.ok()) return r.status();
  out["refilled"] = AsJson(*r);
  return absl::OkStatus();
}

int FastpathStepCommand(const Opts& o) {
  if (o.pids.size() != 1) return Usage();
  cryo::proc::ProcReader proc;
  const cryo::gpu::FastpathProcess p{o.pids[0], proc.NsPid(o.pids[0])};
  nlohmann::json out = {{"command", o.cmd}};
  return Finish(out, o.cmd == "fastpath-drain" ? FastpathDrainOnce(o, proc, p, out)
                                               : FastpathRefillOnce(o, proc, p, out));
}

// One process of a --fast cycle: its files, its drain, what it saved.
struct Fast {
  cryo::gpu::FastpathProcess p;
  std::vector<cryo::UniqueFd> files;
  std::unique_ptr<cryo::gpu::FastpathDrain> drain;
  std::vector<cryo::FileDigest> digests;
  absl::Status st;
};

// The cycle's fast-path drains, all processes in parallel; each drained one's refill pushed on
// `undo`. The first failure, after every drain started has been accounted for.
absl::Status DrainAll(const Opts& o, cryo::proc::ProcReader& proc, cryo::gpu::GpuManager& m,
                      std::vector<Fast>& fasts, Clock::time_point t0, nlohmann::json& out,
                      std::vector<std::function<void()>>& undo) {
  cryo::gpu::FastpathDrainOptions dopt;
  dopt.threads = std::max(1, o.threads);
  dopt.quiesce_timeout = o.timeout;
  std::vector<std::thread> ts;
  for (Fast& f : fasts) {
    ts.emplace_back([&o, &proc, &dopt, &f] {
      if (!o.files_dir.empty()) {
        auto opened = cryo::gpu::OpenFastpathFiles(o.files_dir, f.p.ns_pid, o.writers, true);
        if (!opened.ok()) {
          f.st = opened.status();
          return;
        }
        f.files = *std::move(opened);
      }
      auto d = cryo::gpu::FastpathDrain::Start(proc, f.p, dopt, cryo::Borrow(f.files));
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
    undo.push_back([&f, &proc, &o] {
      std::vector<cryo::UniqueFd> in;
      if (!f.files.empty()) {
        auto saved = f.drain->WaitSaved(/*stoppable=*/false);
        f.files.clear();
        if (saved.ok()) f.digests = *saved;
        auto opened = cryo::gpu::OpenFastpathFiles(o.files_dir, f.p.ns_pid, o.writers, false);
        if (opened.ok()) in = *std::move(opened);
      }
      auto r = cryo::gpu::FastpathRefill(proc, f.p, std::max(1, o.threads), cryo::Borrow(in),
                                         f.digests, absl::Minutes(10));
      if (!r.ok()) std::cerr << "rollback: refill of pid " << f.p.pid << ": " << r.status() << "\n";
    });
  }
  out["fastpath_drained"] = drained;
  for (Fast& f : fasts) {
    if (!f.st.ok()) return f.st;
  }
  return absl::OkStatus();
}

// The cycle's refills after the unlock, all processes in parallel.
absl::Status RefillAll(const Opts& o, cryo::proc::ProcReader& proc, std::vector<Fast>& fasts,
                       nlohmann::json& out) {
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  std::vector<absl::StatusOr<cryo::contract::gpu_fastpath::RefillReply>> results(
      fasts.size(), absl::UnknownError(""));
  for (size_t i = 0; i < fasts.size(); ++i) {
    ts.emplace_back([&, i] {
      Fast& f = fasts[i];
      std::vector<cryo::UniqueFd> in;
      if (!o.files_dir.empty()) {
        auto opened = cryo::gpu::OpenFastpathFiles(o.files_dir, f.p.ns_pid, o.writers, false);
        if (!opened.ok()) {
          results[i] = opened.status();
          return;
        }
        in = *std::move(opened);
      }
      results[i] = cryo::gpu::FastpathRefill(proc, f.p, std::max(1, o.threads), cryo::Borrow(in),
                                             f.digests, absl::Minutes(10));
    });
  }
  for (auto& t : ts) t.join();
  out["refill_ms"] = Ms(t0, Clock::now());
  nlohmann::json refilled = nlohmann::json::array();
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    refilled.push_back(AsJson(*r));
  }
  out["fastpath_refilled"] = refilled;
  return absl::OkStatus();
}

// Measures a step into out["<key>_ms"].
template <typename F>
absl::Status Timed(nlohmann::json& out, const char* key, F&& f) {
  const auto t0 = Clock::now();
  absl::Status s = f();
  out[std::string(key) + "_ms"] = Ms(t0, Clock::now());
  return s;
}

// discover, (the fast path's drains), lock, checkpoint, (hold), restore, unlock, (refills).
int Cycle(const Opts& o, cryo::gpu::GpuManager& m, nlohmann::json& out) {
  absl::StatusOr<std::vector<GpuProcess>> found;
  absl::Status s = Timed(out, "discover", [&] {
    found = m.Discover(o.pids);
    return found.status();
  });
  if (!s.ok()) return Finish(out, s);
  if (found->empty()) return Finish(out, absl::NotFoundError("no GPU process among the pids"));
  std::vector<GpuProcess> procs = *found;  // Checkpoint records into them
  const uint64_t free_before = FreeBytes(m);
  out["gpu_free_before_bytes"] = free_before;
  const auto t0 = Clock::now();
  // What each step did that a later failure must take back, run newest first: the driver's
  // rollback (restore and unlock) before the fast path's refills, as the engine's undos do.
  std::vector<std::function<void()>> undo;
  auto fail = [&](const absl::Status& st) {
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) (*it)();
    return Finish(out, st);
  };
  // The fast path first: each process moves what its library owns, all in parallel.
  cryo::proc::ProcReader proc;
  std::vector<Fast> fasts(o.fast ? procs.size() : 0);
  for (size_t i = 0; i < fasts.size(); ++i) {
    fasts[i].p = {procs[i].pid, proc.NsPid(procs[i].pid)};
  }
  if (o.fast) {
    s = DrainAll(o, proc, m, fasts, t0, out, undo);
    if (!s.ok()) return fail(s);
  }
  s = Timed(out, "lock", [&] { return m.Lock(procs, o.timeout); });
  if (!s.ok()) return fail(s);
  undo.push_back([&] { m.Rollback(procs); });
  s = Timed(out, "checkpoint", [&] { return m.Checkpoint(procs); });
  out["vacate_ms"] = Ms(t0, Clock::now());
  if (!s.ok()) return fail(s);
  // The files are written beside the driver's checkpoint; done when the data is out of the
  // processes' memory.
  for (Fast& f : fasts) {
    auto saved = f.drain->WaitSaved();
    if (!saved.ok()) return fail(saved.status());
    f.digests = *saved;
  }
  for (Fast& f : fasts) f.files.clear();
  if (o.fast) out["saved_ms"] = Ms(t0, Clock::now());
  const uint64_t free_after = FreeBytes(m);
  out["gpu_free_after_checkpoint_bytes"] = free_after;
  out["gpu_freed_bytes"] = free_after > free_before ? free_after - free_before : 0;
  out["describe"] = m.Describe(procs);
  if (o.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
  cryo::gpu::DeviceMap planned = o.map;
  s = Timed(out, "check_compatible", [&] { return m.CheckCompatible(out["describe"], planned); });
  if (!s.ok()) return fail(s);
  out["map"] = planned;
  s = Timed(out, "restore", [&] { return m.Restore(procs, planned); });
  if (!s.ok()) return fail(s);
  s = Timed(out, "unlock", [&] { return m.Unlock(procs); });
  out["gpu_free_after_unlock_bytes"] = FreeBytes(m);
  if (!s.ok()) return fail(s);
  if (!o.fast) return Finish(out, s);
  s = RefillAll(o, proc, fasts, out);
  if (!s.ok()) return Finish(out, s);
  out["gpu_free_after_refill_bytes"] = FreeBytes(m);
  return Finish(out, absl::OkStatus());
}

// The commands that go through the plugins: status, devices, discover, describe, the single
// steps and cycle.
int PluginCommand(const Opts& o) {
  auto created = cryo::gpu::CreateGpuManager(o.cfg);
  nlohmann::json out = {{"command", o.cmd}};
  if (!created.ok()) {
    out["error"] = StatusJson(created.status());
    std::printf("%s\n", out.dump(2).c_str());
    return 1;
  }
  cryo::gpu::GpuManager& m = **created;
  if (o.cmd == "status") {
    nlohmann::json ps = nlohmann::json::array();
    for (const auto& p : m.Plugins()) {
      ps.push_back({{"name", p.name},
                    {"version", p.version},
                    {"available", p.available},
                    {"detail", p.detail}});
    }
    out["plugins"] = ps;
    out["devices"] = DevicesJson(m);
    return Finish(out, absl::OkStatus());
  }
  if (o.cmd == "devices") {
    out["devices"] = DevicesJson(m);
    return Finish(out, absl::OkStatus());
  }
  if (o.pids.empty()) return Usage();
  if (o.cmd == "discover" || o.cmd == "describe") {
    auto found = m.Discover(o.pids);
    if (!found.ok()) return Finish(out, found.status());
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& g : *found)
      arr.push_back({{"pid", g.pid}, {"plugin", g.plugin}, {"facts", g.facts}});
    out["processes"] = arr;
    if (o.cmd == "describe") out["describe"] = m.Describe(*found);
    return Finish(out, absl::OkStatus());
  }
  if (o.cmd == "cycle") return Cycle(o, m, out);
  // Single steps act on the named plugin directly: after a checkpoint the process holds no
  // device files, so discover would no longer find it.
  std::vector<GpuProcess> procs;
  for (pid_t p : o.pids) procs.push_back({p, o.single, nlohmann::json::object()});
  const std::map<std::string, std::function<absl::Status()>> steps = {
      {"lock", [&] { return m.Lock(procs, o.timeout); }},
      {"checkpoint", [&] { return m.Checkpoint(procs); }},
      {"restore", [&] { return m.Restore(procs, o.map); }},
      {"unlock", [&] { return m.Unlock(procs); }},
      {"rollback",
       [&] {
         m.Rollback(procs);
         return absl::OkStatus();
       }},
  };
  auto it = steps.find(o.cmd);
  if (it == steps.end()) return Usage();
  return Finish(out, Timed(out, it->first.c_str(), it->second));
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  const char* env_dir = std::getenv("CRYO_GPU_PLUGIN_DIR");
  if (env_dir != nullptr) o.cfg.plugin_dir = env_dir;
  std::string plugin_options;
  cryo::flags::FlagSet fs;
  fs.String("plugin-dir", &o.cfg.plugin_dir, "directory of the plugin libraries", "DIR");
  fs.StringList("plugins", &o.cfg.plugins, "plugins to load", "a,b", /*split_commas=*/true);
  fs.String("plugin", &o.single, "plugin of single steps", "NAME");
  fs.Custom(
      "timeout-ms",
      [&](absl::string_view v) {
        int64_t ms = 0;
        if (!absl::SimpleAtoi(v, &ms) || ms < 0) {
          return absl::InvalidArgumentError("--timeout-ms wants milliseconds");
        }
        o.timeout = absl::Milliseconds(ms);
        return absl::OkStatus();
      },
      "lock bound", "N");
  fs.String("plugin-options", &plugin_options, "options per plugin", "JSON");
  fs.String("thp", &o.cfg.thp_during_checkpoint, "THP mode during checkpoint", "MODE");
  fs.Int64("hold-ms", &o.hold_ms, "cycle: time between checkpoint and restore");
  fs.KeyValues("map", &o.map, "restore onto another GPU", "FROM=TO");
  fs.Bool("fast", &o.fast, "cycle: drain and refill through the fast-path library");
  fs.String("files", &o.files_dir, "fast path: save into files under DIR", "DIR");
  fs.Int("writers", &o.writers, "fast path: files (and writers) per process");
  fs.Int("threads", &o.threads, "fast path: copy threads per process");
  auto parsed = fs.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::fprintf(stderr, "cryo-gpuctl: %s\n", std::string(parsed.status().message()).c_str());
    return Usage();
  }
  if (parsed->help) return Usage();
  if (!plugin_options.empty()) {
    o.cfg.plugin_options = nlohmann::json::parse(plugin_options, nullptr, false);
    if (!o.cfg.plugin_options.is_object()) return Usage();
  }
  const std::vector<std::string>& rest = parsed->positional;
  if (rest.empty()) return Usage();
  o.cmd = rest[0];
  for (size_t i = 1; i < rest.size(); ++i) {
    int pid = 0;
    if (!absl::SimpleAtoi(rest[i], &pid) || pid <= 0) return Usage();
    o.pids.push_back(pid);
  }
  if (o.cmd == "fastpath-status") return FastpathStatusCommand(o);
  if (o.cmd == "fastpath-drain" || o.cmd == "fastpath-refill") return FastpathStepCommand(o);
  return PluginCommand(o);
}
