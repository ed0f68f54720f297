#include "plugins/common/device_plan.h"

#include "gtest/gtest.h"

namespace cryo::gpu {
namespace {

const std::vector<std::string> kBase = {"GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"};

TEST(ResolveVisibleDevicesTest, IndexesUuidsAndSpecialValues) {
  EXPECT_EQ(*ResolveVisibleDevices("2,0", kBase),
            (std::vector<std::string>{"GPU-cccc-3", "GPU-aaaa-1"}));
  EXPECT_EQ(*ResolveVisibleDevices("GPU-bbbb", kBase), (std::vector<std::string>{"GPU-bbbb-2"}));
  EXPECT_EQ(*ResolveVisibleDevices("all", kBase), kBase);
  EXPECT_TRUE(ResolveVisibleDevices("none", kBase)->empty());
  EXPECT_TRUE(ResolveVisibleDevices("", kBase)->empty());
  // As CUDA does: the list ends at the first entry naming no GPU.
  EXPECT_EQ(*ResolveVisibleDevices("1,7,0", kBase), (std::vector<std::string>{"GPU-bbbb-2"}));
  EXPECT_EQ(ResolveVisibleDevices("MIG-1234", kBase).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

std::vector<NodeGpu> Node() {
  return {{"GPU-n0", "H100", "sm_90", 80},
          {"GPU-n1", "H100", "sm_90", 80},
          {"GPU-n2", "A100", "sm_80", 80}};
}

// Both plugins read the GPUs of a checkpoint's section with this one function.
TEST(CheckpointedGpusTest, ReadsTheDevicesAndPassesOverWhatIsNotOne) {
  auto section = nlohmann::json::parse(R"({"devices": [
      {"uuid": "GPU-a", "name": "H100", "chip": "sm_90", "memory_used_bytes": 1024},
      {"uuid": "GPU-b", "name": "H100", "chip": "sm_90"},
      {"name": "no uuid"}, {"uuid": 7}, "not an object",
      {"uuid": "GPU-c", "memory_used_bytes": "lots"}]})");
  auto gpus = CheckpointedGpus(section);
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].uuid, "GPU-a");
  EXPECT_EQ(gpus[0].chip, "sm_90");
  EXPECT_EQ(gpus[0].need_bytes, 1024u);
  EXPECT_FALSE(gpus[1].need_bytes.has_value()) << "unknown, not zero";
  EXPECT_EQ(gpus[2].uuid, "GPU-c");
  EXPECT_FALSE(gpus[2].need_bytes.has_value());
  EXPECT_TRUE(CheckpointedGpus(nlohmann::json::array()).empty());
  EXPECT_TRUE(CheckpointedGpus(nlohmann::json{{"devices", "none"}}).empty());
}

TEST(PlanDeviceMapTest, SameGpusWhenAllPresent) {
  auto m = PlanDeviceMap({{"GPU-n1", "H100", "sm_90", 10}}, Node(), std::nullopt, {});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)["GPU-n1"], "GPU-n1");
}

TEST(PlanDeviceMapTest, InOrderOfAllowedDevices) {
  std::vector<CheckpointedGpu> ckpt = {{"GPU-old0", "H100", "sm_90", 10},
                                       {"GPU-old1", "H100", "sm_90", 10}};
  auto m = PlanDeviceMap(ckpt, Node(), std::vector<std::string>{"GPU-n1", "GPU-n0"}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)["GPU-old0"], "GPU-n1");
  EXPECT_EQ((*m)["GPU-old1"], "GPU-n0");
}

TEST(PlanDeviceMapTest, NodeOrderWhenCheckpointedGpusAreElsewhere) {
  auto m = PlanDeviceMap({{"GPU-old0", "H100", "sm_90", 10}}, Node(), std::nullopt, {});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)["GPU-old0"], "GPU-n0");
}

TEST(PlanDeviceMapTest, RefusesOtherChip) {
  auto m = PlanDeviceMap({{"GPU-old0", "H100", "sm_90", 10}}, Node(),
                         std::vector<std::string>{"GPU-n2"}, {});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("chip"), absl::string_view::npos);
}

TEST(PlanDeviceMapTest, RefusesTooLittleFreeMemory) {
  auto m = PlanDeviceMap({{"GPU-old0", "H100", "sm_90", 81}}, Node(), std::nullopt, {});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("free memory"), absl::string_view::npos);
  // Unknown need (no NVML at checkpoint time): only the chip is checked.
  EXPECT_TRUE(
      PlanDeviceMap({{"GPU-old0", "H100", "sm_90", std::nullopt}}, Node(), std::nullopt, {}).ok());
}

TEST(PlanDeviceMapTest, RefusesFewerAllowedGpusThanCheckpointed) {
  std::vector<CheckpointedGpu> ckpt = {{"GPU-a", "", "sm_90", 1}, {"GPU-b", "", "sm_90", 1}};
  auto m = PlanDeviceMap(ckpt, Node(), std::vector<std::string>{"GPU-n0"}, {});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PlanDeviceMapTest, ExplicitMapMustCoverEveryGpuAndNameLocalOnes) {
  std::vector<CheckpointedGpu> ckpt = {{"GPU-a", "", "sm_90", 1}, {"GPU-b", "", "sm_90", 1}};
  EXPECT_EQ(PlanDeviceMap(ckpt, Node(), std::nullopt, {{"GPU-a", "GPU-n0"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanDeviceMap(ckpt, Node(), std::nullopt, {{"GPU-a", "GPU-n0"}, {"GPU-b", "GPU-zz"}})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(PlanDeviceMap(ckpt, Node(), std::nullopt, {{"GPU-a", "GPU-n0"}, {"GPU-b", "GPU-n0"}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto ok = PlanDeviceMap(ckpt, Node(), std::nullopt, {{"GPU-a", "GPU-n1"}, {"GPU-b", "GPU-n0"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)["GPU-a"], "GPU-n1");
}

}  // namespace
}  // namespace cryo::gpu
