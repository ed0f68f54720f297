#include "plugins/rocm/rocm_plugin.h"

#include "gtest/gtest.h"
#include "test/plugins/test_util.h"

namespace cryo::gpu::rocm {
namespace {

// A fake node: KFD topology with a CPU node and two gfx90a GPUs, one process using GPU 2.
class RocmPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.Write("dev/kfd", "");
    root_.Write("criu/amdgpu_plugin.so", "");
    const std::string topo = "sys/class/kfd/kfd/topology/nodes/";
    root_.Write(topo + "0/gpu_id", "0\n");
    for (int n : {1, 2}) {
      std::string d = topo + std::to_string(n) + "/";
      root_.Write(d + "gpu_id", std::to_string(1000 + n) + "\n");
      root_.Write(d + "name", "gfx90a\n");
      root_.Write(d + "properties", "cpu_cores_count 0\ngfx_target_version 90010\nunique_id " +
                                        std::to_string(77 + n) + "\ndrm_render_minor " +
                                        std::to_string(127 + n) + "\n");
      root_.Write(d + "mem_banks/0/properties", "heap_type 1\nsize_in_bytes 68702699520\n");
      std::string drm = "sys/class/drm/renderD" + std::to_string(127 + n) + "/device/";
      root_.Write(drm + "mem_info_vram_total", "68702699520\n");
      root_.Write(drm + "mem_info_vram_used", "1000\n");
    }
    root_.Link("proc/42/fd/3", "/dev/kfd");
    root_.Link("proc/42/fd/4", "/dev/dri/renderD129");
    root_.Write("proc/42/maps", "");
    root_.Write("sys/class/kfd/kfd/proc/42/vram_1002", "4096\n");
    root_.Link("proc/43/fd/0", "/dev/null");
    root_.Write("proc/50/environ", std::string("ROCR_VISIBLE_DEVICES=1\0", 23));
  }

  std::unique_ptr<RocmPlugin> Make() {
    RocmPluginOptions o;
    o.proc_root = root_ / "proc";
    o.sys_root = root_ / "sys";
    o.dev_kfd = root_ / "dev/kfd";
    o.criu_plugin_dir = root_ / "criu";
    o.criu_env = {{"KFD_MAX_BUFFER_SIZE", "2G"}};
    return *RocmPlugin::Create(o);
  }

  testing::TempDir root_;
};

TEST_F(RocmPluginTest, ReadsTopology) {
  auto p = Make();
  auto gpus = p->Gpus();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].chip, "gfx90a");
  EXPECT_EQ(gpus[0].uuid, "AMD-000000000000004e");
  EXPECT_EQ(gpus[1].gpu_id, 1002u);
  EXPECT_EQ(*gpus[1].free_bytes, 68702699520u - 1000u);
  EXPECT_TRUE(p->Status()["available"].get<bool>());
}

TEST_F(RocmPluginTest, DiscoversKfdUsersWithTheirGpus) {
  auto p = Make();
  auto found = p->Discover({42, 43, 99});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 1u);
  const auto& facts = (*found)[0]["facts"];
  ASSERT_EQ(facts["devices"].size(), 1u);
  EXPECT_EQ(facts["devices"][0]["uuid"], "AMD-000000000000004f");
  EXPECT_EQ(facts["devices"][0]["memory_used_bytes"], 4096);
}

TEST_F(RocmPluginTest, UnavailableWithoutKfdButStillRefusesItsProcesses) {
  std::filesystem::remove(root_ / "dev/kfd");
  auto p = Make();
  EXPECT_FALSE(p->Status()["available"].get<bool>());
  auto found = p->Discover({42});
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RocmPluginTest, TellsCriuWhereItsPluginIs) {
  auto o = Make()->CriuOptions({42});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o)["args"][0], "--libdir");
  EXPECT_EQ((*o)["args"][1], root_ / "criu");
  EXPECT_EQ((*o)["env"]["KFD_MAX_BUFFER_SIZE"], "2G");
}

TEST_F(RocmPluginTest, CheckCompatibleFollowsVisibleDevicesAndChip) {
  auto p = Make();
  auto found = p->Discover({42});
  ASSERT_TRUE(found.ok());
  auto section = p->Describe(*found);
  ASSERT_TRUE(section.ok());
  auto ok = p->CheckCompatible(*section, {{"env_pid", 50}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)["map"]["AMD-000000000000004f"], "AMD-000000000000004f");

  (*section)["devices"][0]["chip"] = "gfx942";
  auto bad = p->CheckCompatible(*section, nlohmann::json::object());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cryo::gpu::rocm
