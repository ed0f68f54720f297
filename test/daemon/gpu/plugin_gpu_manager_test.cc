// PluginGpuManager over fake plugins given as in-memory C tables: the same ABI a real plugin
// speaks, no dlopen, no GPU.

#include "daemon/gpu/plugin_gpu_manager.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/gpu/gpu_manager_factory.h"
#include "gtest/gtest.h"
#include "test/plugins/test_util.h"

namespace cryo::gpu {
namespace {

enum class State { kRunning, kLocked, kCheckpointed };

// Behaviour and record of one fake plugin. Hooks are C functions, so state is static per N.
template <int N>
struct Fake {
  static inline std::mutex mu;
  static inline std::condition_variable cv;
  static inline std::map<int, State> state;
  static inline std::set<int> owns;  // pids discover reports
  static inline std::set<int> lock_times_out;
  // Locks of these pids time out this many more times (a collective in flight), then succeed.
  static inline std::map<int, int> lock_busy_for;
  static inline std::set<int> checkpoint_fails;
  static inline int checkpoint_rendezvous = 0;  // wait until this many checkpoints run at once
  static inline int in_checkpoint = 0;
  static inline std::vector<std::string> calls;
  static inline std::string thp_file;  // read during checkpoint
  static inline std::string thp_seen;
  static inline std::string last_restore_map;
  // When set, the answer of that hook instead of the well-formed one.
  static inline std::string status_answer, devices_answer, discover_answer, criu_answer;
  static inline thread_local std::string error;
  static inline cryo_gpu_plugin_api api;

  static void Reset() {
    std::lock_guard l(mu);
    state.clear();
    owns.clear();
    lock_times_out.clear();
    lock_busy_for.clear();
    checkpoint_fails.clear();
    checkpoint_rendezvous = 0;
    in_checkpoint = 0;
    calls.clear();
    thp_file.clear();
    thp_seen.clear();
    last_restore_map.clear();
    status_answer.clear();
    devices_answer.clear();
    discover_answer.clear();
    criu_answer.clear();
  }
  static char* Dup(const std::string& s) { return strdup(s.c_str()); }
  static cryo_gpu_rc Err(cryo_gpu_rc rc, const std::string& msg) {
    error = msg;
    return rc;
  }
  static void Record(const std::string& c) {
    std::lock_guard l(mu);
    calls.push_back(c);
  }

  static cryo_gpu_rc Create(const char*, cryo_gpu_plugin** out) {
    *out = reinterpret_cast<cryo_gpu_plugin*>(&api);
    return CRYO_GPU_OK;
  }
  static void Destroy(cryo_gpu_plugin*) {}
  static const char* LastError(cryo_gpu_plugin*) { return error.c_str(); }
  static void Free(char* s) { std::free(s); }
  static cryo_gpu_rc Status(cryo_gpu_plugin*, char** out) {
    *out = Dup(status_answer.empty() ? R"({"available": true, "detail": "fake"})" : status_answer);
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Devices(cryo_gpu_plugin*, char** out) {
    if (!devices_answer.empty()) {
      *out = Dup(devices_answer);
      return CRYO_GPU_OK;
    }
    *out = Dup(absl::StrCat(R"([{"uuid": "GPU-fake)", N, R"(", "name": "Fake", "chip": "sm_90",)",
                            R"( "memory_total_bytes": 100, "memory_free_bytes": 60}])"));
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Discover(cryo_gpu_plugin*, const int32_t* pids, size_t n, char** out) {
    if (!discover_answer.empty()) {
      *out = Dup(discover_answer);
      return CRYO_GPU_OK;
    }
    nlohmann::json arr = nlohmann::json::array();
    std::lock_guard l(mu);
    for (size_t i = 0; i < n; ++i) {
      if (owns.count(pids[i])) {
        arr.push_back({{"pid", pids[i]}, {"facts", {{"devices", {{{"uuid", "GPU-fake"}}}}}}});
      }
    }
    *out = Dup(arr.dump());
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Lock(cryo_gpu_plugin*, int32_t pid, uint32_t timeout_ms) {
    Record(absl::StrCat("lock ", pid, " ", timeout_ms));
    std::lock_guard l(mu);
    if (lock_times_out.count(pid)) return Err(CRYO_GPU_DEADLINE_EXCEEDED, "kernel still running");
    if (lock_busy_for[pid] > 0) {
      --lock_busy_for[pid];
      return Err(CRYO_GPU_DEADLINE_EXCEEDED, "a collective still waits on a peer");
    }
    if (state[pid] != State::kRunning) return Err(CRYO_GPU_FAILED_PRECONDITION, "not running");
    state[pid] = State::kLocked;
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Checkpoint(cryo_gpu_plugin*, int32_t pid) {
    Record(absl::StrCat("checkpoint ", pid));
    std::unique_lock l(mu);
    if (!thp_file.empty()) {
      std::ifstream in(thp_file);
      std::getline(in, thp_seen);
    }
    if (checkpoint_rendezvous > 0) {
      // Returns only once all expected checkpoints are inside at the same time.
      ++in_checkpoint;
      cv.notify_all();
      if (!cv.wait_for(l, std::chrono::seconds(30),
                       [] { return in_checkpoint >= checkpoint_rendezvous; })) {
        return Err(CRYO_GPU_INTERNAL, "checkpoints did not run in parallel");
      }
    }
    if (state[pid] != State::kLocked) return Err(CRYO_GPU_FAILED_PRECONDITION, "not locked");
    if (checkpoint_fails.count(pid)) return Err(CRYO_GPU_INTERNAL, "copy failed");
    state[pid] = State::kCheckpointed;
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Restore(cryo_gpu_plugin*, int32_t pid, const char*,
                             const cryo_gpu_device_pair* map, size_t n) {
    Record(absl::StrCat("restore ", pid));
    std::lock_guard l(mu);
    last_restore_map.clear();
    for (size_t i = 0; i < n; ++i) {
      absl::StrAppend(&last_restore_map, map[i].from_uuid, "->", map[i].to_uuid, ";");
    }
    if (state[pid] != State::kCheckpointed) return Err(CRYO_GPU_FAILED_PRECONDITION, "state");
    state[pid] = State::kLocked;
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Unlock(cryo_gpu_plugin*, int32_t pid) {
    Record(absl::StrCat("unlock ", pid));
    std::lock_guard l(mu);
    if (state[pid] != State::kLocked) return Err(CRYO_GPU_FAILED_PRECONDITION, "not locked");
    state[pid] = State::kRunning;
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Rollback(cryo_gpu_plugin*, int32_t pid) {
    Record(absl::StrCat("rollback ", pid));
    std::lock_guard l(mu);
    state[pid] = State::kRunning;
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Describe(cryo_gpu_plugin*, const char* procs, char** out) {
    nlohmann::json p = nlohmann::json::parse(procs);
    *out = Dup(nlohmann::json{
        {"devices", {{{"uuid", "GPU-fake"}, {"chip", "sm_90"}}}},
        {"processes",
         p}}.dump());
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Check(cryo_gpu_plugin*, const char* section, const char* request, char** out) {
    nlohmann::json r = nlohmann::json::parse(request);
    nlohmann::json map = r["map"].empty() ? nlohmann::json{{"GPU-fake", "GPU-new"}} : r["map"];
    *out = Dup(nlohmann::json{{"map", map}}.dump());
    return CRYO_GPU_OK;
  }
  static cryo_gpu_rc Criu(cryo_gpu_plugin*, const int32_t*, size_t, char** out) {
    *out = Dup(criu_answer.empty() ? R"({"args": ["--libdir", "/x"], "env": {"K": "V"}})"
                                   : criu_answer);
    return CRYO_GPU_OK;
  }

  static const cryo_gpu_plugin_api* Table(const char* name) {
    api = cryo_gpu_plugin_api{};
    api.struct_size = sizeof(cryo_gpu_plugin_api);
    api.abi_major = CRYO_GPU_PLUGIN_ABI_MAJOR;
    api.abi_minor = CRYO_GPU_PLUGIN_ABI_MINOR;
    api.name = name;
    api.version = "test";
    api.create = Create;
    api.destroy = Destroy;
    api.last_error = LastError;
    api.free_string = Free;
    api.status = Status;
    api.list_devices = Devices;
    api.discover = Discover;
    api.lock = Lock;
    api.checkpoint = Checkpoint;
    api.restore = Restore;
    api.unlock = Unlock;
    api.rollback = Rollback;
    api.describe = Describe;
    api.check_compatible = Check;
    api.criu_options = Criu;
    api.set_log = SetLog;
    return &api;
  }
  static void SetLog(cryo_gpu_plugin*, cryo_gpu_log_fn fn, void* ctx) {
    log_fn = fn;
    log_ctx = ctx;
  }
  static inline cryo_gpu_log_fn log_fn = nullptr;
  static inline void* log_ctx = nullptr;
};

using A = Fake<1>;
using B = Fake<2>;

class ManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    A::Reset();
    B::Reset();
  }
  std::unique_ptr<GpuManager> Make(std::vector<const cryo_gpu_plugin_api*> tables,
                                   std::string thp_mode = "", std::string thp_path = "") {
    GpuConfig cfg;
    cfg.plugin_dir = "/nonexistent";
    cfg.tables = std::move(tables);
    cfg.thp_during_checkpoint = thp_mode;
    cfg.thp_path = thp_path;
    auto m = CreateGpuManager(cfg);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  static std::vector<GpuProcess> Procs(std::vector<pid_t> pids, const char* plugin = "fake") {
    std::vector<GpuProcess> out;
    for (pid_t p : pids) out.push_back({p, plugin, nlohmann::json::object()});
    return out;
  }
};

TEST_F(ManagerTest, RefusesPluginOfAnotherAbiMajor) {
  cryo_gpu_plugin_api t = *A::Table("fake");
  t.abi_major = CRYO_GPU_PLUGIN_ABI_MAJOR + 1;
  GpuConfig cfg;
  cfg.plugin_dir = "/nonexistent";
  cfg.tables = {&t};
  auto m = CreateGpuManager(cfg);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("ABI"), absl::string_view::npos);
}

// ABI 1.1: a plugin's messages reach cryod's log, named after the plugin; a 1.0 plugin (its
// table ends before set_log) loads and is simply never given a log.
TEST_F(ManagerTest, PluginMessagesReachCryodsLogAndOldPluginsStillLoad) {
  A::log_fn = nullptr;
  auto m = Make({A::Table("fake")});
  ASSERT_NE(A::log_fn, nullptr) << "set_log was not called after create";
  ::testing::internal::CaptureStderr();
  A::log_fn(A::log_ctx, CRYO_GPU_LOG_WARNING, "driver said hello");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("WARN"), std::string::npos) << err;
  EXPECT_NE(err.find("fake plugin: driver said hello"), std::string::npos) << err;

  A::log_fn = nullptr;
  cryo_gpu_plugin_api old = *A::Table("fake");
  old.struct_size = offsetof(cryo_gpu_plugin_api, set_log);
  old.abi_minor = 0;
  GpuConfig cfg;
  cfg.plugin_dir = "/nonexistent";
  cfg.tables = {&old};
  auto m10 = CreateGpuManager(cfg);
  ASSERT_TRUE(m10.ok()) << m10.status();
  EXPECT_EQ(A::log_fn, nullptr) << "a 1.0 table has no set_log to call";
}

TEST_F(ManagerTest, RefusesTableTooShortForAbi) {
  cryo_gpu_plugin_api t = *A::Table("fake");
  t.struct_size = offsetof(cryo_gpu_plugin_api, lock);
  GpuConfig cfg;
  cfg.plugin_dir = "/nonexistent";
  cfg.tables = {&t};
  auto m = CreateGpuManager(cfg);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ManagerTest, NamedPluginMissingFromDirIsNotFound) {
  GpuConfig cfg;
  cfg.plugin_dir = "/nonexistent";
  cfg.plugins = {"cuda"};
  auto m = CreateGpuManager(cfg);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ManagerTest, EmptyPluginDirGivesManagerWithoutPlugins) {
  GpuConfig cfg;
  cfg.plugin_dir = "/nonexistent";
  auto m = CreateGpuManager(cfg);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->Plugins().empty());
  DeviceMap map;
  EXPECT_EQ((*m)->CheckCompatible({{"cuda", {{"devices", nlohmann::json::array()}}}}, map).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*m)->CheckCompatible(nullptr, map).ok());
}

TEST_F(ManagerTest, DiscoverKeepsCallerOrderAndRefusesTwoVendorsInOneProcess) {
  auto m = Make({A::Table("fake"), B::Table("other")});
  A::owns = {30, 10};
  B::owns = {20};
  auto found = m->Discover({10, 20, 30, 40});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 3u);
  EXPECT_EQ((*found)[0].pid, 10);
  EXPECT_EQ((*found)[1].pid, 20);
  EXPECT_EQ((*found)[1].plugin, "other");
  EXPECT_EQ((*found)[2].facts["devices"][0]["uuid"], "GPU-fake");

  B::owns = {10};
  auto both = m->Discover({10});
  EXPECT_EQ(both.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ManagerTest, LockTimeoutUnlocksTheOthersAndReportsDeadline) {
  auto m = Make({A::Table("fake")});
  A::lock_times_out = {2};
  absl::Status s = m->Lock(Procs({1, 2, 3}), absl::Milliseconds(1234));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("pid 2"), absl::string_view::npos);
  for (int pid : {1, 2, 3}) EXPECT_EQ(A::state[pid], State::kRunning) << pid;
  // Several processes are locked together in attempts of growing bounds within the caller's.
  EXPECT_NE(std::find(A::calls.begin(), A::calls.end(), "lock 1 250"), A::calls.end());
  EXPECT_NE(s.message().find("never stopped at once"), absl::string_view::npos) << s;
}

TEST_F(ManagerTest, OneProcessGetsTheWholeBound) {
  auto m = Make({A::Table("fake")});
  ASSERT_TRUE(m->Lock(Procs({1}), absl::Milliseconds(1234)).ok());
  // The caller's bound reaches the plugin as it is (the engine holds the only default).
  EXPECT_NE(std::find(A::calls.begin(), A::calls.end(), "lock 1 1234"), A::calls.end());
}

// Two ranks, one inside a collective that waits on the other: locked at the same moment they
// never are. The first attempts let both go again (each rank runs on), a later one finds them
// idle together.
TEST_F(ManagerTest, RanksWaitingOnEachOtherAreLockedTogetherOnceTheirWorkStops) {
  auto m = Make({A::Table("fake")});
  A::lock_busy_for[2] = 3;
  auto procs = Procs({1, 2});
  absl::Status s = m->Lock(procs, absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(A::state[1], State::kLocked);
  EXPECT_EQ(A::state[2], State::kLocked);
  // Rank 1 was let go between the attempts: it was never held while rank 2 could not stop.
  int unlocks_of_1 = 0, locks_of_2 = 0;
  for (const auto& c : A::calls) {
    if (absl::StartsWith(c, "rollback 1") || absl::StartsWith(c, "unlock 1")) ++unlocks_of_1;
    if (absl::StartsWith(c, "lock 2 ")) ++locks_of_2;
  }
  EXPECT_EQ(unlocks_of_1, 3);
  EXPECT_EQ(locks_of_2, 4);
  // The bounds grew: 250, 500, 1000, 2000 ms.
  EXPECT_NE(std::find(A::calls.begin(), A::calls.end(), "lock 2 2000"), A::calls.end());
}

// Another kind of failure is not retried: the job runs on at once.
TEST_F(ManagerTest, ALockThatFailsForAnotherReasonIsNotRetried) {
  auto m = Make({A::Table("fake")});
  A::state[2] = State::kLocked;  // "not running": FAILED_PRECONDITION
  absl::Status s = m->Lock(Procs({1, 2}), absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(A::state[1], State::kRunning);
  EXPECT_EQ(std::count(A::calls.begin(), A::calls.end(), "lock 1 250"), 1);
}

TEST_F(ManagerTest, CheckpointsRunInParallel) {
  auto m = Make({A::Table("fake")});
  auto procs = Procs({1, 2});
  ASSERT_TRUE(m->Lock(procs, absl::Seconds(1)).ok());
  A::checkpoint_rendezvous = 2;  // each checkpoint waits for the other to be inside
  absl::Status s = m->Checkpoint(procs);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(A::state[1], State::kCheckpointed);
  EXPECT_EQ(A::state[2], State::kCheckpointed);
  EXPECT_TRUE(procs[0].facts.contains("checkpoint_ms"));
  ASSERT_TRUE(m->Restore(procs, {}).ok());
  ASSERT_TRUE(m->Unlock(procs).ok());
  EXPECT_EQ(A::state[1], State::kRunning);
}

TEST_F(ManagerTest, OneFailedCheckpointRollsBackBoth) {
  auto m = Make({A::Table("fake"), B::Table("other")});
  std::vector<GpuProcess> procs = {{1, "fake", {}}, {2, "other", {}}};
  ASSERT_TRUE(m->Lock(procs, absl::Seconds(1)).ok());
  B::checkpoint_fails = {2};
  absl::Status s = m->Checkpoint(procs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("rolled back"), absl::string_view::npos);
  EXPECT_EQ(A::state[1], State::kRunning);
  EXPECT_EQ(B::state[2], State::kRunning);
  EXPECT_NE(std::find(A::calls.begin(), A::calls.end(), "rollback 1"), A::calls.end());
  EXPECT_NE(std::find(B::calls.begin(), B::calls.end(), "rollback 2"), B::calls.end());
}

TEST_F(ManagerTest, ThpIsSetDuringCheckpointAndPutBack) {
  testing::TempDir dir;
  dir.Write("enabled", "always [madvise] never\n");
  auto m = Make({A::Table("fake")}, "always", dir / "enabled");
  A::thp_file = dir / "enabled";
  auto procs = Procs({1});
  ASSERT_TRUE(m->Lock(procs, absl::Seconds(1)).ok());
  ASSERT_TRUE(m->Checkpoint(procs).ok());
  EXPECT_EQ(A::thp_seen, "always");
  std::ifstream in(dir / "enabled");
  std::string after;
  std::getline(in, after);
  EXPECT_EQ(after, "madvise");
  EXPECT_EQ(procs[0].facts["thp"], "always (was madvise)");
}

TEST_F(ManagerTest, RestorePassesTheMapToThePlugin) {
  auto m = Make({A::Table("fake")});
  auto procs = Procs({1});
  ASSERT_TRUE(m->Lock(procs, absl::Seconds(1)).ok());
  ASSERT_TRUE(m->Checkpoint(procs).ok());
  ASSERT_TRUE(m->Restore(procs, {{"GPU-a", "GPU-b"}}).ok());
  EXPECT_EQ(A::last_restore_map, "GPU-a->GPU-b;");
}

TEST_F(ManagerTest, DescribeAndCheckCompatibleRoundTrip) {
  auto m = Make({A::Table("fake")});
  A::owns = {7};
  auto found = m->Discover({7});
  ASSERT_TRUE(found.ok());
  nlohmann::json gpu = m->Describe(*found);
  ASSERT_TRUE(gpu.contains("fake"));
  EXPECT_EQ(gpu["fake"]["plugin_version"], "test");
  EXPECT_EQ(gpu["fake"]["processes"][0]["pid"], 7);

  DeviceMap map;
  ASSERT_TRUE(m->CheckCompatible(gpu, map).ok());
  EXPECT_EQ(map["GPU-fake"], "GPU-new");

  nlohmann::json unknown = {{"nosuch", gpu["fake"]}};
  DeviceMap map2;
  EXPECT_EQ(m->CheckCompatible(unknown, map2).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ManagerTest, CriuOptionsMergeAndDevicesCarryVendor) {
  auto m = Make({A::Table("fake"), B::Table("other")});
  auto extras = m->CriuOptions({{1, "fake", {}}, {2, "other", {}}});
  ASSERT_TRUE(extras.ok());
  // Identical flags from two plugins appear once.
  EXPECT_EQ(extras->args, (std::vector<std::string>{"--libdir", "/x"}));
  EXPECT_EQ(extras->env["K"], "V");
  auto devs = m->Devices();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].vendor, "fake");
  EXPECT_EQ(devs[1].uuid, "GPU-fake2");
  EXPECT_EQ(devs[1].memory_free_bytes, 60u);
}

// Found on 2026-11-24: plugin answers were read with nlohmann's value() and get<>(), which throw
// on a wrong type (std::terminate in cryod). Every answer is now checked: a wrong type or a
// nesting too deep is an error naming the plugin, never an exception.
TEST_F(ManagerTest, WrongTypesInPluginAnswersAreErrorsNeverExceptions) {
  auto m = Make({A::Table("fake")});
  A::owns = {1};
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& bad :
       {std::string(R"([{"pid": "1"}])"), std::string(R"([7])"),
        std::string(R"([{"pid": 1, "facts": 3}])"), std::string(R"({"pid": 1})"),
        std::string(R"([{"pid": 1.5}])"), std::string("not json"), deep}) {
    A::discover_answer = bad;
    auto r = m->Discover({1});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << bad.substr(0, 40);
    EXPECT_NE(r.status().message().find("fake plugin"), std::string::npos) << r.status();
  }
  for (const std::string& bad :
       {std::string(R"({"args": [1, 2]})"), std::string(R"({"args": "--x"})"),
        std::string(R"({"env": {"K": 1}})"), std::string(R"({"env": []})"), std::string("[]"),
        deep}) {
    A::criu_answer = bad;
    EXPECT_EQ(m->CriuOptions({{1, "fake", {}}}).status().code(), absl::StatusCode::kInternal)
        << bad.substr(0, 40);
  }
  for (const std::string& bad :
       {std::string(R"({"available": "yes"})"), std::string(R"({"available": true, "detail": 7})"),
        std::string("[]"), deep}) {
    A::status_answer = bad;
    auto plugins = m->Plugins();
    ASSERT_EQ(plugins.size(), 1u);
    EXPECT_FALSE(plugins[0].available) << bad.substr(0, 40);
    EXPECT_FALSE(plugins[0].detail.empty());
  }
  // A malformed device is left out; the well-formed one beside it stays.
  A::devices_answer =
      R"([{"uuid": 7}, 3, {"uuid": "GPU-ok", "memory_total_bytes": -1}, {"uuid": "GPU-good"}])";
  auto devs = m->Devices();
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].uuid, "GPU-good");
}

// The built plugins load by dlopen and start on a machine without any GPU driver.
TEST(RealPluginsTest, LoadWithoutDriversAndSayWhy) {
  GpuConfig cfg;
  cfg.plugin_dir = CRYO_TEST_PLUGIN_DIR;
  cfg.plugins = {"cuda", "rocm"};
  cfg.plugin_options = {{"cuda", {{"libcuda", "libcuda-does-not-exist.so.1"}}},
                        {"rocm", {{"dev_kfd", "/nonexistent/kfd"}}}};
  auto m = CreateGpuManager(cfg);
  ASSERT_TRUE(m.ok()) << m.status();
  auto ps = (*m)->Plugins();
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0].name, "cuda");
  EXPECT_FALSE(ps[0].available);
  EXPECT_NE(ps[0].detail.find("no NVIDIA driver"), std::string::npos) << ps[0].detail;
  EXPECT_FALSE(ps[1].available);
  EXPECT_TRUE((*m)->Devices().empty());
  // This test's own process uses no GPU: nothing to refuse.
  auto found = (*m)->Discover({getpid()});
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(found->empty());
}

}  // namespace
}  // namespace cryo::gpu
