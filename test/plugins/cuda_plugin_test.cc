// The cuda plugin's logic over a fake driver (function table) and a fake /proc tree.

#include "plugins/cuda/cuda_plugin.h"

#include <cstring>
#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/plugins/test_util.h"

namespace cryo::gpu::cuda {
namespace {

// Two H100s and one A100; processes by pid with driver-side state.
struct FakeDriver {
  struct Gpu {
    std::string name;
    unsigned char uuid[16];
    int major, minor;
    size_t total;
  };
  std::vector<Gpu> gpus;
  std::map<int, CUprocessState> state;
  CUresult lock_result = CUDA_SUCCESS;
  CUresult checkpoint_result = CUDA_SUCCESS;
  std::vector<std::string> calls;
  std::vector<CUcheckpointGpuPair> last_pairs;
  bool restore_had_args = false;
  // > 0: a restore with pairs must pair exactly this many GPUs (else CUDA_ERROR_INVALID_VALUE),
  // as the driver wants every GPU it recorded paired.
  size_t pairs_required = 0;
  int restore_calls = 0;
  std::map<int, std::map<int, unsigned long long>> used;  // gpu index -> pid -> bytes
};
FakeDriver* g = nullptr;

CUresult Init(unsigned int) { return CUDA_SUCCESS; }
CUresult Version(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult ErrName(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_NOT_READY ? "CUDA_ERROR_NOT_READY" : "CUDA_ERROR_SOMETHING";
  return CUDA_SUCCESS;
}
CUresult Count(int* n) {
  *n = static_cast<int>(g->gpus.size());
  return CUDA_SUCCESS;
}
CUresult Get(CUdevice* d, int i) {
  *d = i;
  return CUDA_SUCCESS;
}
CUresult Name(char* n, int len, CUdevice d) {
  std::strncpy(n, g->gpus[d].name.c_str(), len);
  return CUDA_SUCCESS;
}
CUresult Uuid(CUuuid* u, CUdevice d) {
  std::memcpy(u->bytes, g->gpus[d].uuid, 16);
  return CUDA_SUCCESS;
}
CUresult Total(size_t* b, CUdevice d) {
  *b = g->gpus[d].total;
  return CUDA_SUCCESS;
}
CUresult Attr(int* v, CUdevice_attribute a, CUdevice d) {
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? g->gpus[d].major
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? g->gpus[d].minor
                                                           : d;
  return CUDA_SUCCESS;
}
CUresult GetState(int pid, CUprocessState* s) {
  auto it = g->state.find(pid);
  if (it == g->state.end()) return CUDA_ERROR_INVALID_VALUE;
  *s = it->second;
  return CUDA_SUCCESS;
}
CUresult Lock(int pid, CUcheckpointLockArgs* a) {
  g->calls.push_back("lock " + std::to_string(pid) + " " + std::to_string(a ? a->timeoutMs : 0));
  if (g->lock_result != CUDA_SUCCESS) return g->lock_result;
  g->state[pid] = CU_PROCESS_STATE_LOCKED;
  return CUDA_SUCCESS;
}
CUresult Checkpoint(int pid, CUcheckpointCheckpointArgs*) {
  g->calls.push_back("checkpoint " + std::to_string(pid));
  if (g->checkpoint_result != CUDA_SUCCESS) return g->checkpoint_result;
  g->state[pid] = CU_PROCESS_STATE_CHECKPOINTED;
  return CUDA_SUCCESS;
}
CUresult Restore(int pid, CUcheckpointRestoreArgs* a) {
  g->calls.push_back("restore " + std::to_string(pid));
  g->restore_had_args = a != nullptr;
  g->last_pairs.clear();
  if (a != nullptr) g->last_pairs.assign(a->gpuPairs, a->gpuPairs + a->gpuPairsCount);
  ++g->restore_calls;
  if (a != nullptr && g->pairs_required > 0 && a->gpuPairsCount != g->pairs_required) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (g->state[pid] != CU_PROCESS_STATE_CHECKPOINTED) return CUDA_ERROR_ILLEGAL_STATE;
  g->state[pid] = CU_PROCESS_STATE_LOCKED;
  return CUDA_SUCCESS;
}
CUresult Unlock(int pid, CUcheckpointUnlockArgs*) {
  g->calls.push_back("unlock " + std::to_string(pid));
  if (g->state[pid] != CU_PROCESS_STATE_LOCKED) return CUDA_ERROR_ILLEGAL_STATE;
  g->state[pid] = CU_PROCESS_STATE_RUNNING;
  return CUDA_SUCCESS;
}

nvmlReturn_t NvmlInit() { return kNvmlSuccess; }
nvmlReturn_t NvmlHandle(const char* uuid, nvmlDevice_t* d) {
  for (size_t i = 0; i < g->gpus.size(); ++i) {
    CUuuid u;
    std::memcpy(u.bytes, g->gpus[i].uuid, 16);
    if (CudaPlugin::FormatUuid(u) == uuid) {
      *d = reinterpret_cast<nvmlDevice_t>(i + 1);
      return kNvmlSuccess;
    }
  }
  return 13;
}
nvmlReturn_t NvmlMem(nvmlDevice_t d, NvmlMemory* m) {
  size_t i = reinterpret_cast<size_t>(d) - 1;
  m->total = g->gpus[i].total;
  m->used = 0;
  for (auto& [pid, b] : g->used[i]) m->used += b;
  m->free = m->total - m->used;
  return kNvmlSuccess;
}
nvmlReturn_t NvmlProcs(nvmlDevice_t d, unsigned int* n, NvmlProcessInfo* infos) {
  size_t i = reinterpret_cast<size_t>(d) - 1;
  unsigned int k = 0;
  for (auto& [pid, b] : g->used[i]) {
    if (k < *n) infos[k] = {static_cast<unsigned>(pid), b, 0, 0};
    ++k;
  }
  *n = k;
  return kNvmlSuccess;
}

CudaApi FakeApi(bool with_checkpoint = true) {
  CudaApi a;
  a.init = Init;
  a.driver_get_version = Version;
  a.get_error_name = ErrName;
  a.device_get_count = Count;
  a.device_get = Get;
  a.device_get_name = Name;
  a.device_get_uuid = Uuid;
  a.device_total_mem = Total;
  a.device_get_attribute = Attr;
  if (with_checkpoint) {
    a.checkpoint_get_state = GetState;
    a.checkpoint_lock = Lock;
    a.checkpoint_checkpoint = Checkpoint;
    a.checkpoint_restore = Restore;
    a.checkpoint_unlock = Unlock;
  }
  return a;
}

NvmlApi FakeNvml() {
  NvmlApi n;
  n.init = NvmlInit;
  n.device_get_handle_by_uuid = NvmlHandle;
  n.device_get_memory_info = NvmlMem;
  n.device_get_compute_running_processes = NvmlProcs;
  return n;
}

std::string UuidOf(int i) {
  CUuuid u;
  std::memcpy(u.bytes, g->gpus[i].uuid, 16);
  return CudaPlugin::FormatUuid(u);
}

class CudaPluginTest : public ::testing::Test {
 protected:
  // Whether the driver's i-th GPU pair moved GPU `from` onto GPU `to` (indexes into gpus).
  ::testing::AssertionResult PairIs(size_t i, int from, int to) const {
    if (i >= driver_.last_pairs.size()) return ::testing::AssertionFailure() << "no pair " << i;
    const CUcheckpointGpuPair& p = driver_.last_pairs[i];
    if (std::memcmp(p.oldUuid.bytes, driver_.gpus[from].uuid, 16) != 0) {
      return ::testing::AssertionFailure() << "pair " << i << " is not from GPU " << from;
    }
    if (std::memcmp(p.newUuid.bytes, driver_.gpus[to].uuid, 16) != 0) {
      return ::testing::AssertionFailure() << "pair " << i << " is not onto GPU " << to;
    }
    return ::testing::AssertionSuccess();
  }

  void SetUp() override {
    g = &driver_;
    auto gpu = [](const char* name, unsigned char id, int major, int minor) {
      FakeDriver::Gpu x{name, {}, major, minor, size_t{80} << 30};
      for (int i = 0; i < 16; ++i) x.uuid[i] = static_cast<unsigned char>(id * 16 + i);
      return x;
    };
    driver_.gpus = {gpu("NVIDIA H100", 1, 9, 0), gpu("NVIDIA H100", 2, 9, 0),
                    gpu("NVIDIA A100", 3, 8, 0)};
    root_.Write("driver/version",
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release\n");
    for (int i = 0; i < 3; ++i) {
      root_.Write("driver/gpus/0000:0" + std::to_string(i) + ":00.0/information",
                  "Model: \t X\nGPU UUID: \t " + UuidOf(i) + "\nDevice Minor: \t " +
                      std::to_string(i) + "\n");
    }
  }
  void TearDown() override { g = nullptr; }

  // A CUDA process with /dev/nvidiaN open for the given minors.
  void AddProcess(int pid, std::vector<int> minors, const std::string& env = "",
                  const std::string& maps = "") {
    root_.Link("proc/" + std::to_string(pid) + "/fd/0", "/dev/nvidiactl");
    for (int m : minors) {
      root_.Link("proc/" + std::to_string(pid) + "/fd/" + std::to_string(10 + m),
                 "/dev/nvidia" + std::to_string(m));
    }
    root_.Write("proc/" + std::to_string(pid) + "/environ", env);
    root_.Write("proc/" + std::to_string(pid) + "/maps", maps);
    driver_.state[pid] = CU_PROCESS_STATE_RUNNING;
  }

  std::unique_ptr<CudaPlugin> Make(CudaPluginOptions o = {}, bool with_checkpoint = true) {
    o.proc_root = root_ / "proc";
    o.driver_root = root_ / "driver";
    auto p = CudaPlugin::Create(o, FakeApi(with_checkpoint), FakeNvml());
    EXPECT_TRUE(p.ok()) << p.status();
    return std::move(*p);
  }

  FakeDriver driver_;
  testing::TempDir root_;
};

TEST(CudaPluginNoDriverTest, LoadsAndSaysNoDriver) {
  testing::TempDir root;
  root.Link("proc/5/fd/3", "/dev/nvidia0");
  CudaPluginOptions o;
  o.libcuda = "libcuda-not-here.so.1";
  o.libnvml = "libnvml-not-here.so.1";
  o.proc_root = root / "proc";
  auto p = CudaPlugin::Create(o);
  ASSERT_TRUE(p.ok()) << p.status();
  nlohmann::json st = (*p)->Status();
  EXPECT_FALSE(st["available"].get<bool>());
  EXPECT_NE(st["detail"].get<std::string>().find("no NVIDIA driver"), std::string::npos);
  EXPECT_TRUE((*p)->ListDevices()->empty());
  // A GPU process on such a node gets a clear refusal, not a silent CPU-only checkpoint.
  auto found = (*p)->Discover({5});
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(found.status().message().find("no NVIDIA driver"), absl::string_view::npos);
  EXPECT_EQ((*p)->Lock(5, 100).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CudaPluginTest, DriverWithoutCheckpointApiIsUnavailable) {
  auto p = Make({}, /*with_checkpoint=*/false);
  nlohmann::json st = p->Status();
  EXPECT_FALSE(st["available"].get<bool>());
  EXPECT_NE(st["detail"].get<std::string>().find("checkpoint API"), std::string::npos);
}

TEST_F(CudaPluginTest, ListsDevicesWithChipAndFreeMemory) {
  driver_.used[1][99] = size_t{30} << 30;
  auto p = Make();
  EXPECT_EQ(p->Status()["driver_version"], "580.159.04");
  auto devs = p->ListDevices();
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ(devs->size(), 3u);
  EXPECT_EQ((*devs)[0]["chip"], "sm_90");
  EXPECT_EQ((*devs)[2]["chip"], "sm_80");
  EXPECT_EQ((*devs)[1]["uuid"], UuidOf(1));
  EXPECT_EQ((*devs)[1]["memory_free_bytes"], (size_t{80} - 30) << 30);
}

TEST_F(CudaPluginTest, UuidFormatRoundTrips) {
  std::string s = UuidOf(0);
  EXPECT_EQ(s.substr(0, 4), "GPU-");
  EXPECT_EQ(s.size(), 4u + 36u);
  CUuuid back;
  ASSERT_TRUE(CudaPlugin::ParseUuid(s, &back));
  EXPECT_EQ(std::memcmp(back.bytes, driver_.gpus[0].uuid, 16), 0);
  EXPECT_FALSE(CudaPlugin::ParseUuid("GPU-xyz", &back));
}

TEST_F(CudaPluginTest, DiscoversCudaProcessesWithDevicesAndMemory) {
  AddProcess(100, {1}, std::string("CUDA_VISIBLE_DEVICES=1\0", 23));
  root_.Link("proc/101/fd/0", "/dev/null");  // not a GPU process
  driver_.used[1][100] = 5 << 20;
  auto p = Make();
  auto found = p->Discover({100, 101, 102});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 1u);
  const auto& facts = (*found)[0]["facts"];
  EXPECT_EQ((*found)[0]["pid"], 100);
  ASSERT_EQ(facts["devices"].size(), 1u);
  EXPECT_EQ(facts["devices"][0]["uuid"], UuidOf(1));
  EXPECT_EQ(facts["devices"][0]["memory_used_bytes"], 5 << 20);
  EXPECT_EQ(facts["cuda_visible_devices"], "1");
  EXPECT_FALSE(facts["managed_memory_suspected"].get<bool>());
}

TEST_F(CudaPluginTest, AProcessesGpusAreTheOnesItUsesNotEveryDeviceFileItOpened) {
  // libcuda opens every /dev/nvidiaN; with CUDA_VISIBLE_DEVICES=0 only GPU 0 has a context.
  AddProcess(100, {0, 1}, std::string("CUDA_VISIBLE_DEVICES=0\0", 23));
  driver_.used[0][100] = 8 << 20;
  auto p = Make();
  auto found = p->Discover({100});
  ASSERT_TRUE(found.ok()) << found.status();
  const auto& devs = (*found)[0]["facts"]["devices"];
  ASSERT_EQ(devs.size(), 1u) << devs.dump();
  EXPECT_EQ(devs[0]["uuid"], UuidOf(0));
  EXPECT_EQ((*found)[0]["facts"]["device_files"], nlohmann::json({UuidOf(0), UuidOf(1)}));
  // Moving it to GPU 1 pairs every GPU it had a file of, one to one: 0 -> 1 and 1 -> 0 (the
  // driver refuses a single pair).
  ASSERT_TRUE(p->Lock(100, 1000).ok());
  ASSERT_TRUE(p->Checkpoint(100).ok());
  ASSERT_TRUE(p->Restore(100, (*found)[0]["facts"], {{UuidOf(0), UuidOf(1)}}).ok());
  ASSERT_EQ(driver_.last_pairs.size(), 2u);
  EXPECT_TRUE(PairIs(0, 0, 1));
  EXPECT_TRUE(PairIs(1, 1, 0));
}

TEST_F(CudaPluginTest, MovingOneOfTwoUsedGpusStillPairsEachGpuOnce) {
  // Facts that name both GPUs as used; only GPU 0 is moved: GPU 1 must not stay where GPU 0
  // goes (two pairs onto one GPU are refused by the driver).
  AddProcess(100, {0, 1});
  auto p = Make();
  nlohmann::json facts = {{"devices", {{{"uuid", UuidOf(0)}}, {{"uuid", UuidOf(1)}}}},
                          {"device_files", {UuidOf(0), UuidOf(1)}}};
  ASSERT_TRUE(p->Lock(100, 1000).ok());
  ASSERT_TRUE(p->Checkpoint(100).ok());
  ASSERT_TRUE(p->Restore(100, facts, {{UuidOf(0), UuidOf(1)}}).ok());
  ASSERT_EQ(driver_.last_pairs.size(), 2u);
  EXPECT_TRUE(PairIs(0, 0, 1));
  EXPECT_TRUE(PairIs(1, 1, 0));
}

TEST_F(CudaPluginTest, MoveFallsBackToPairingEveryGpuOfTheNode) {
  // The process had only GPU 0's file open, but the driver wants all three GPUs of the node
  // paired: the first pairing (GPU 0 alone) is refused, the node-wide one is taken.
  AddProcess(100, {0}, std::string("CUDA_VISIBLE_DEVICES=0\0", 23));
  driver_.used[0][100] = 8 << 20;
  driver_.pairs_required = 3;
  auto p = Make();
  auto found = p->Discover({100});
  ASSERT_TRUE(found.ok()) << found.status();
  const nlohmann::json& facts = (*found)[0]["facts"];
  EXPECT_EQ(facts["node_gpus"], nlohmann::json({UuidOf(0), UuidOf(1), UuidOf(2)}));
  ASSERT_TRUE(p->Lock(100, 1000).ok());
  ASSERT_TRUE(p->Checkpoint(100).ok());
  ASSERT_TRUE(p->Restore(100, facts, {{UuidOf(0), UuidOf(1)}}).ok());
  EXPECT_EQ(driver_.restore_calls, 2);
  ASSERT_EQ(driver_.last_pairs.size(), 3u);
  // 0 -> 1 as asked; 1 cannot stay (taken), so it takes the free GPU 0; 2 stays.
  EXPECT_TRUE(PairIs(0, 0, 1));
  EXPECT_TRUE(PairIs(1, 1, 0));
  EXPECT_TRUE(PairIs(2, 2, 2));
}

TEST_F(CudaPluginTest, RefusedMoveNamesEveryPairingTried) {
  AddProcess(100, {0}, std::string("CUDA_VISIBLE_DEVICES=0\0", 23));
  driver_.used[0][100] = 8 << 20;
  driver_.pairs_required = 7;  // nothing we can build
  auto p = Make();
  auto found = p->Discover({100});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(p->Lock(100, 1000).ok());
  ASSERT_TRUE(p->Checkpoint(100).ok());
  absl::Status s = p->Restore(100, (*found)[0]["facts"], {{UuidOf(0), UuidOf(1)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(driver_.restore_calls, 2);
  EXPECT_NE(s.message().find(UuidOf(0) + "->" + UuidOf(1) + "]"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(UuidOf(2) + "->" + UuidOf(2)), absl::string_view::npos) << s;
  // Still checkpointed: a rollback can bring it back where it was.
  EXPECT_EQ(driver_.state[100], CU_PROCESS_STATE_CHECKPOINTED);
}

TEST_F(CudaPluginTest, RefusesProcessTheDriverDoesNotKnowOrAlreadyLocked) {
  AddProcess(100, {0});
  driver_.state.erase(100);
  auto p = Make();
  EXPECT_EQ(p->Discover({100}).status().code(), absl::StatusCode::kFailedPrecondition);
  driver_.state[100] = CU_PROCESS_STATE_LOCKED;
  auto again = p->Discover({100});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("locked"), absl::string_view::npos);
}

TEST_F(CudaPluginTest, RefusesMultiProcessNcclWithIpcUnlessDisabled) {
  const std::string maps = "7f00-7f01 r-xp 0 0 0 /opt/lib/libnccl.so.2\n";
  AddProcess(100, {0}, "", maps);
  AddProcess(101, {1}, "", maps);
  auto p = Make();
  auto refused = p->Discover({100, 101});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("NCCL_P2P_DISABLE=1"), absl::string_view::npos);

  const std::string off(
      "NCCL_P2P_DISABLE=1\0NCCL_SHM_DISABLE=1\0NCCL_CUMEM_ENABLE=0\0"
      "NCCL_CUMEM_HOST_ENABLE=0\0",
      83);
  root_.Write("proc/100/environ", off);
  root_.Write("proc/101/environ", off);
  EXPECT_TRUE(p->Discover({100, 101}).ok());
  // One process alone has no peer to share memory with.
  root_.Write("proc/101/environ", "");
  EXPECT_TRUE(p->Discover({101}).ok());
}

TEST_F(CudaPluginTest, ReportsMultiProcessNcclWithIpcWhenTheCallerDecides) {
  const std::string maps = "7f00-7f01 r-xp 0 0 0 /opt/lib/libnccl.so.2\n";
  AddProcess(100, {0}, "", maps);
  AddProcess(101, {1}, "", maps);
  CudaPluginOptions o;
  o.report_nccl_ipc = true;
  auto p = Make(o);
  auto found = p->Discover({100, 101});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 2u);
  for (const auto& e : *found) EXPECT_TRUE(e["facts"].value("nccl_ipc", false)) << e.dump();
}

TEST_F(CudaPluginTest, NcclJobsGetTheCriuOptionsForTheirDeletedShmFiles) {
  AddProcess(100, {0}, "", "7f00-7f01 r-xp 0 0 0 /opt/lib/libnccl.so.2\n");
  AddProcess(101, {0}, "", "7f00-7f01 r-xp 0 0 0 /usr/lib/libcudart.so.13\n");
  auto p = Make();
  auto with = p->CriuOptions({101, 100});
  ASSERT_TRUE(with.ok());
  EXPECT_EQ((*with)["args"], nlohmann::json({"--link-remap", "--ghost-limit", "256M"}));
  auto without = p->CriuOptions({101});
  ASSERT_TRUE(without.ok());
  EXPECT_TRUE((*without)["args"].empty());
}

TEST_F(CudaPluginTest, ManagedMemoryIsFlaggedAndNamedWhenTheDriverRefuses) {
  const std::string maps =
      "204a00000-204c00000 rw-s 204a00000 00:06 144 /dev/nvidia-uvm\n"
      "7fba42000000-7fba46000000 rw-s 7fba42000000 00:06 144 /dev/nvidia-uvm\n";
  AddProcess(100, {0}, "", maps);
  auto p = Make();
  auto found = p->Discover({100});
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE((*found)[0]["facts"]["managed_memory_suspected"].get<bool>());
  ASSERT_TRUE(p->Lock(100, 1000).ok());
  driver_.checkpoint_result = CUDA_ERROR_NOT_SUPPORTED;
  absl::Status s = p->Checkpoint(100);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("managed (UVM) memory"), absl::string_view::npos) << s;

  CudaPluginOptions strict;
  strict.refuse_managed_at_discover = true;
  EXPECT_EQ(Make(strict)->Discover({100}).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CudaPluginTest, LockTimeoutIsDeadlineExceeded) {
  AddProcess(100, {0});
  driver_.lock_result = CUDA_ERROR_NOT_READY;
  auto p = Make();
  absl::Status s = p->Lock(100, 500);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(driver_.calls.back(), "lock 100 500");
}

TEST_F(CudaPluginTest, FullCycleInPlacePassesNoPairs) {
  AddProcess(100, {0});
  auto p = Make();
  auto found = p->Discover({100});
  ASSERT_TRUE(found.ok());
  nlohmann::json facts = (*found)[0]["facts"];
  ASSERT_TRUE(p->Lock(100, 1000).ok());
  ASSERT_TRUE(p->Checkpoint(100).ok());
  ASSERT_TRUE(p->Restore(100, facts, {{UuidOf(0), UuidOf(0)}}).ok());
  EXPECT_FALSE(driver_.restore_had_args);
  ASSERT_TRUE(p->Unlock(100).ok());
  EXPECT_EQ(driver_.state[100], CU_PROCESS_STATE_RUNNING);
}

TEST_F(CudaPluginTest, RestoreOntoAnotherGpuPairsEveryCheckpointedGpu) {
  AddProcess(100, {0, 1});
  auto p = Make();
  nlohmann::json facts = (*p->Discover({100}))[0]["facts"];
  ASSERT_EQ(facts["devices"].size(), 2u);
  ASSERT_TRUE(p->Lock(100, 0).ok());
  ASSERT_TRUE(p->Checkpoint(100).ok());
  // Only GPU 0 moves (onto 1) and GPU 1 onto 0: both must be listed.
  ASSERT_TRUE(p->Restore(100, facts, {{UuidOf(0), UuidOf(1)}, {UuidOf(1), UuidOf(0)}}).ok());
  ASSERT_TRUE(driver_.restore_had_args);
  ASSERT_EQ(driver_.last_pairs.size(), 2u);
  EXPECT_TRUE(PairIs(0, 0, 1));
  EXPECT_TRUE(PairIs(1, 1, 0));
}

TEST_F(CudaPluginTest, RollbackFromEachState) {
  AddProcess(100, {0});
  auto p = Make();
  ASSERT_TRUE(p->Lock(100, 0).ok());
  ASSERT_TRUE(p->Checkpoint(100).ok());
  ASSERT_TRUE(p->Rollback(100).ok());  // checkpointed: restore + unlock
  EXPECT_EQ(driver_.state[100], CU_PROCESS_STATE_RUNNING);
  ASSERT_TRUE(p->Lock(100, 0).ok());
  ASSERT_TRUE(p->Rollback(100).ok());  // locked: unlock
  EXPECT_EQ(driver_.state[100], CU_PROCESS_STATE_RUNNING);
  ASSERT_TRUE(p->Rollback(100).ok());  // running: nothing
  driver_.state[100] = CU_PROCESS_STATE_FAILED;
  EXPECT_EQ(p->Rollback(100).code(), absl::StatusCode::kInternal);
}

TEST_F(CudaPluginTest, CheckCompatibleMapsByEnvAndRefusesChipOrMemory) {
  AddProcess(100, {0});
  driver_.used[0][100] = size_t{20} << 30;
  auto p = Make();
  auto section = p->Describe(*p->Discover({100}));
  ASSERT_TRUE(section.ok());
  EXPECT_EQ((*section)["driver_version"], "580.159.04");
  EXPECT_EQ((*section)["devices"][0]["memory_used_bytes"], size_t{20} << 30);

  // The restored container may use GPU 1 only.
  root_.Write("proc/200/environ", std::string("NVIDIA_VISIBLE_DEVICES=1\0", 25));
  auto ok = p->CheckCompatible(*section, {{"env_pid", 200}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)["map"][UuidOf(0)], UuidOf(1));

  // The A100 is another chip.
  root_.Write("proc/201/environ", std::string("CUDA_VISIBLE_DEVICES=2\0", 23));
  auto chip = p->CheckCompatible(*section, {{"env_pid", 201}});
  EXPECT_EQ(chip.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(chip.status().message().find("chip"), absl::string_view::npos);

  // GPU 1 has 70 GiB in use by someone else: 10 GiB free for 20 GiB.
  driver_.used[1][999] = size_t{70} << 30;
  auto mem = p->CheckCompatible(*section, {{"env_pid", 200}});
  EXPECT_EQ(mem.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(mem.status().message().find("free memory"), absl::string_view::npos);
}

// A pod's GPUs are the device files its device plugin gave it (the OCI spec's linux.devices):
// the restore maps onto those, and refuses a pod given none or another chip, naming both lists.
TEST_F(CudaPluginTest, CheckCompatibleMapsOntoTheContainersDeviceFiles) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  AddProcess(100, {0});
  auto p = Make();
  auto section = p->Describe(*p->Discover({100}));
  ASSERT_TRUE(section.ok());
  const nlohmann::json base = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"};
  auto with = [&](std::vector<std::string> gpus) {
    nlohmann::json d = base;
    for (auto& g : gpus) d.push_back(g);
    return d;
  };
  auto ok = p->CheckCompatible(*section, {{"devices", with({"/dev/nvidia1"})}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)["map"][UuidOf(0)], UuidOf(1)) << "GPU 0 is on the node but not the pod's";

  // The device plugin's NVIDIA_VISIBLE_DEVICES names the same GPU.
  root_.Write("proc/200/environ", "NVIDIA_VISIBLE_DEVICES=" + UuidOf(1) + std::string(1, '\0'));
  auto env = p->CheckCompatible(*section, {{"devices", with({"/dev/nvidia1"})}, {"env_pid", 200}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ((*env)["map"][UuidOf(0)], UuidOf(1));

  auto none = p->CheckCompatible(*section, {{"devices", base}});
  ASSERT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition) << none.status();
  EXPECT_THAT(std::string(none.status().message()),
              AllOf(HasSubstr(UuidOf(0)), HasSubstr("is given no GPU"),
                    HasSubstr("/dev/nvidiactl /dev/nvidia-uvm")));

  auto chip = p->CheckCompatible(*section, {{"devices", with({"/dev/nvidia2"})}});
  ASSERT_EQ(chip.status().code(), absl::StatusCode::kFailedPrecondition) << chip.status();
  EXPECT_THAT(std::string(chip.status().message()),
              AllOf(HasSubstr("chip"), HasSubstr(UuidOf(2)), HasSubstr("/dev/nvidia2")));
}

TEST(ParseDriverVersionTest, OpenAndProprietaryModules) {
  EXPECT_EQ(ParseDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                               "580.159.04  Release Build  (nixbld@)\nGCC version: 15\n"),
            "580.159.04");
  EXPECT_EQ(ParseDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu"),
            "550.54.14");
  EXPECT_EQ(ParseDriverVersion("garbage"), "");
}

}  // namespace
}  // namespace cryo::gpu::cuda
