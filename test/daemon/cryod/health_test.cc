// /healthz as the readiness probe sees it: a real store in a temp dir, a fake CRIU.

#include "daemon/cryod/health.h"

#include <sys/stat.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/engine/fakes.h"
#include "test/daemon/test_util.h"

namespace cryo::cryod {
namespace {

class BrokenCriu : public engine::testing::FakeCriu {
 public:
  std::string check_error() const override { return "vdso: Unexpected rt vDSO area bounds"; }
};

class HealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::CreateLocalStore({root_, "node-a", false});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }
  metrics::HttpResponse Probe(uint64_t min_free = 1 << 20) {
    return HealthResponse(CheckHealth(*store_, criu_, min_free));
  }
  TempDir dir_;
  const std::string root_ = dir_.path + "/store";
  std::unique_ptr<store::CheckpointStore> store_;
  engine::testing::FakeCriu criu_;
};

TEST_F(HealthTest, OkWhenACheckpointCouldStartNow) {
  auto r = Probe();
  EXPECT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.body, "ok\n");
}

// Found on 2026-11-24: /healthz said ok with the store 100 % full.
TEST_F(HealthTest, TooLittleFreeSpaceIsUnready) {
  auto free = store_->FreeBytes();
  ASSERT_TRUE(free.ok());
  auto r = Probe(*free + (1ull << 30));
  EXPECT_EQ(r.code, 503);
  EXPECT_NE(r.body.find("free"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("health_min_free_mb"), std::string::npos) << r.body;
}

// Found on 2026-11-24: a store directory deleted under a running cryod was noticed only at
// restart (and recreated, the API answered 404 until then).
TEST_F(HealthTest, ADeletedStoreIsUnreadyAndARecreatedOneReadyAgain) {
  ASSERT_TRUE(fs::RemoveTree(root_).ok());
  auto r = Probe();
  EXPECT_EQ(r.code, 503);
  EXPECT_NE(r.body.find("does not exist"), std::string::npos) << r.body;
  ASSERT_EQ(::mkdir(root_.c_str(), 0700), 0);
  r = Probe();
  EXPECT_EQ(r.code, 200) << r.body;
  EXPECT_TRUE(fs::IsDir(root_ + "/checkpoints"));
  EXPECT_TRUE(store_->List().ok());
}

TEST_F(HealthTest, ALinkInTheStoresLayoutIsUnready) {
  TempDir elsewhere;
  ASSERT_TRUE(fs::RemoveTree(root_ + "/.trash").ok());
  ASSERT_EQ(::symlink(elsewhere.path.c_str(), (root_ + "/.trash").c_str()), 0);
  auto r = Probe();
  EXPECT_EQ(r.code, 503);
  EXPECT_NE(r.body.find(".trash"), std::string::npos) << r.body;
}

TEST_F(HealthTest, UnusableCriuIsUnready) {
  BrokenCriu broken;
  auto r = HealthResponse(CheckHealth(*store_, broken, 1));
  EXPECT_EQ(r.code, 503);
  EXPECT_NE(r.body.find("criu check failed"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace cryo::cryod
