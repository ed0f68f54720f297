// The GPU plugin ABI's layout, pinned: a plugin built against any 1.x header must find every
// field where cryod looks for it. A change here is an ABI break (a new major) unless it only
// appends at the end of the table (a new minor) and extends this test.

#include <cstddef>

#include "gtest/gtest.h"
#include "plugins/abi/gpu_plugin.h"

namespace {

#define EXPECT_OFFSET(field, off) \
  EXPECT_EQ(offsetof(cryo_gpu_plugin_api, field), static_cast<size_t>(off)) << #field

TEST(GpuPluginAbi, TableLayoutOfAbi1IsPinned) {
  static_assert(sizeof(void*) == 8, "the ABI is defined for 64-bit targets");
  EXPECT_EQ(CRYO_GPU_PLUGIN_ABI_MAJOR, 1);
  EXPECT_EQ(CRYO_GPU_PLUGIN_ABI_MINOR, 1);
  EXPECT_STREQ(CRYO_GPU_PLUGIN_ENTRY, "cryo_gpu_plugin_v1");
  // ABI 1.0.
  EXPECT_OFFSET(struct_size, 0);
  EXPECT_OFFSET(abi_major, 4);
  EXPECT_OFFSET(abi_minor, 6);
  EXPECT_OFFSET(name, 8);
  EXPECT_OFFSET(version, 16);
  EXPECT_OFFSET(create, 24);
  EXPECT_OFFSET(destroy, 32);
  EXPECT_OFFSET(last_error, 40);
  EXPECT_OFFSET(free_string, 48);
  EXPECT_OFFSET(status, 56);
  EXPECT_OFFSET(list_devices, 64);
  EXPECT_OFFSET(discover, 72);
  EXPECT_OFFSET(lock, 80);
  EXPECT_OFFSET(checkpoint, 88);
  EXPECT_OFFSET(restore, 96);
  EXPECT_OFFSET(unlock, 104);
  EXPECT_OFFSET(rollback, 112);
  EXPECT_OFFSET(describe, 120);
  EXPECT_OFFSET(check_compatible, 128);
  EXPECT_OFFSET(criu_options, 136);
  // ABI 1.1.
  EXPECT_OFFSET(set_log, 144);
  EXPECT_EQ(sizeof(cryo_gpu_plugin_api), 152u);
}

TEST(GpuPluginAbi, ValueTypesArePinned) {
  EXPECT_EQ(sizeof(cryo_gpu_rc), 4u);
  EXPECT_EQ(sizeof(cryo_gpu_device_pair), 16u);
  EXPECT_EQ(offsetof(cryo_gpu_device_pair, from_uuid), 0u);
  EXPECT_EQ(offsetof(cryo_gpu_device_pair, to_uuid), 8u);
  // Status codes are the canonical ones (absl / gRPC).
  EXPECT_EQ(CRYO_GPU_OK, 0);
  EXPECT_EQ(CRYO_GPU_INVALID_ARGUMENT, 3);
  EXPECT_EQ(CRYO_GPU_DEADLINE_EXCEEDED, 4);
  EXPECT_EQ(CRYO_GPU_NOT_FOUND, 5);
  EXPECT_EQ(CRYO_GPU_FAILED_PRECONDITION, 9);
  EXPECT_EQ(CRYO_GPU_ABORTED, 10);
  EXPECT_EQ(CRYO_GPU_UNIMPLEMENTED, 12);
  EXPECT_EQ(CRYO_GPU_INTERNAL, 13);
  EXPECT_EQ(CRYO_GPU_UNAVAILABLE, 14);
  EXPECT_EQ(CRYO_GPU_LOG_DEBUG, 0);
  EXPECT_EQ(CRYO_GPU_LOG_ERROR, 3);
}

}  // namespace
