// The fixture shared by the containerd e2e suites: one world (two nodes, each with containerd,
// cryod and the shim) for the whole test binary.
#pragma once

#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>

#include "e2e/containerd/cri_client.h"
#include "e2e/containerd/e2e_world.h"
#include "gtest/gtest.h"

namespace cryo::e2e {

class ContainerdE2e : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    absl::StatusOr<std::unique_ptr<E2eWorld>> world = E2eWorld::Create({"node-a", "node-b"});
    if (!world.ok()) {
      setup_error_ = new std::string(world.status().ToString());
      return;
    }
    world_ = world->release();
  }

  static void TearDownTestSuite() {
    if (world_ != nullptr && ::testing::UnitTest::GetInstance()->failed_test_count() > 0) {
      std::cerr << world_->LogTails();
    }
    delete world_;
    world_ = nullptr;
  }

  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "containerd e2e tests need root (private containerd instances, runc, "
                      "mounts); run ctest as root";
    }
    ASSERT_EQ(setup_error_, nullptr) << *setup_error_;
    ASSERT_NE(world_, nullptr);
  }

  E2eWorld& world() { return *world_; }

  static inline E2eWorld* world_ = nullptr;
  static inline std::string* setup_error_ = nullptr;
};

// Removes a pod and everything in it, ignoring errors (cleanup on failed assertions).
inline void RemovePodQuietly(CriClient& client, const std::string& pod_id) {
  if (pod_id.empty()) return;
  (void)client.StopPodSandbox(pod_id);
  (void)client.RemovePodSandbox(pod_id);
}

}  // namespace cryo::e2e
