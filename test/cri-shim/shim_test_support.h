// A shim in front of a fake runtime, both in-process, on unix sockets in a temp dir.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cri-shim/shim_server.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "test/cri-shim/fake_runtime.h"
#include "test/temp_dir.h"

namespace cryo::shim::testing {

using TempDir = cryo::TempDir;

inline std::shared_ptr<grpc::Channel> UnixChannel(const std::string& path) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("unix://", path),
                                   grpc::InsecureChannelCredentials(), args);
}

class ShimFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path.empty());
    absl::StatusOr<std::unique_ptr<FakeRuntime>> fake = FakeRuntime::Start(RuntimeSocket());
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
  }

  // Starts the shim with the given owned methods (none by default).
  void StartShim(OwnedMethods owned = OwnedMethods()) {
    registry_ = std::make_shared<prometheus::Registry>();
    absl::StatusOr<std::unique_ptr<ShimMetrics>> metrics = ShimMetrics::Create(registry_);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    absl::StatusOr<std::unique_ptr<ShimServer>> shim = ShimServer::Create(
        {ShimSocket(), absl::StrCat("unix://", RuntimeSocket())}, std::move(owned), metrics_.get());
    ASSERT_TRUE(shim.ok()) << shim.status();
    shim_ = std::move(*shim);
    channel_ = UnixChannel(ShimSocket());
    stub_ = cri::RuntimeService::NewStub(channel_);
  }

  void TearDown() override {
    stub_.reset();
    channel_.reset();
    shim_.reset();
    fake_.reset();
  }

  std::string RuntimeSocket() const { return dir_ / "runtime.sock"; }
  std::string ShimSocket() const { return dir_ / "shim.sock"; }

  // Sum of a counter family's series whose labels include all of `labels`.
  double CounterValue(const std::string& name, const std::map<std::string, std::string>& labels) {
    double total = 0;
    for (const auto& family : registry_->Collect()) {
      if (family.name != name) continue;
      for (const auto& metric : family.metric) {
        bool match = true;
        for (const auto& [k, v] : labels) {
          bool found = false;
          for (const auto& l : metric.label) found |= l.name == k && l.value == v;
          match &= found;
        }
        if (match) total += metric.counter.value;
      }
    }
    return total;
  }

  TempDir dir_;
  std::unique_ptr<FakeRuntime> fake_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ShimMetrics> metrics_;
  std::unique_ptr<ShimServer> shim_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<cri::RuntimeService::Stub> stub_;
};

inline std::chrono::system_clock::time_point In(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

}  // namespace cryo::shim::testing
