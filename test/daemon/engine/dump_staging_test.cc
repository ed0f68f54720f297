// A leave-running dump's images in node memory (dump_staging.h): copied into the stage as they
// were hashed while CRIU wrote them, and refused when they no longer are.
#include "daemon/engine/dump_staging.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "daemon/criu/pages_pool.h"
#include "daemon/store/checksum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/fd.h"
#include "test/daemon/test_util.h"

namespace cryo::engine {
namespace {

using ::testing::HasSubstr;

class DumpStagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Any directory does for the test: cryod gives its private tmpfs.
    fs_ = UniqueFd(::open(memory_.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_GE(fs_.get(), 0);
  }
  // Writes `files` into the staging and returns their digests, as the dump's hasher takes them.
  std::map<std::string, FileDigest> Dump(const DumpStaging& d,
                                         const std::map<std::string, std::string>& files) {
    std::map<std::string, FileDigest> out;
    for (const auto& [rel, bytes] : files) {
      EXPECT_TRUE(fs::WriteFileAtomic(fs::Join(d.dir(), rel), bytes).ok()) << rel;
      auto dg = HashFile(fs::Join(d.dir(), rel));
      EXPECT_TRUE(dg.ok()) << dg.status();
      out[rel] = *dg;
    }
    return out;
  }

  TempDir memory_, store_;
  UniqueFd fs_;
};

TEST_F(DumpStagingTest, TheImagesAreCopiedAsTheDumpHashedThemAndTheMemoryGoesBack) {
  auto d = DumpStaging::Make(fs_.get(), "op-1");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->active());
  std::string pages(3 << 20, '\0');
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<char>(i * 7 + 3);
  auto digests =
      Dump(*d, {{"pages-1.img", pages}, {"core-1.img", "core"}, {"inventory.img", "inv"}});
  std::vector<uint64_t> progress;
  std::mutex progress_mu;  // the files are copied on several threads, each reporting
  ASSERT_TRUE(d->CopyTo(
                   store_.path + "/images", digests,
                   [&](uint64_t done) {
                     std::lock_guard<std::mutex> l(progress_mu);
                     progress.push_back(done);
                   },
                   nullptr)
                  .ok());
  for (const auto& [rel, dg] : digests) {
    auto copied = HashFile(store_.path + "/images/" + rel);
    ASSERT_TRUE(copied.ok()) << rel;
    EXPECT_EQ(*copied, dg) << rel;
  }
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(*std::max_element(progress.begin(), progress.end()), pages.size() + 4 + 3);
  // Gone from memory with the staging.
  const std::string where = memory_.path + "/op-1";
  EXPECT_TRUE(fs::Exists(where));
  *d = DumpStaging();
  EXPECT_FALSE(fs::Exists(where));
}

TEST_F(DumpStagingTest, AnImageThatNoLongerHoldsWhatCriuWroteIsRefusedByName) {
  auto d = DumpStaging::Make(fs_.get(), "op-2");
  ASSERT_TRUE(d.ok()) << d.status();
  auto digests = Dump(*d, {{"pages-1.img", std::string(1 << 20, 'p')}, {"core-1.img", "core"}});
  // Changed in memory after the dump hashed it.
  ASSERT_TRUE(
      fs::WriteFileAtomic(fs::Join(d->dir(), "pages-1.img"), std::string(1 << 20, 'q')).ok());
  absl::Status st = d->CopyTo(store_.path + "/images", digests, nullptr, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(st.message(), HasSubstr("pages-1.img"));
  EXPECT_THAT(st.message(), HasSubstr("not published"));
}

TEST_F(DumpStagingTest, ACopyAskedToStopEndsCancelled) {
  auto d = DumpStaging::Make(fs_.get(), "op-3");
  ASSERT_TRUE(d.ok()) << d.status();
  auto digests = Dump(*d, {{"pages-1.img", std::string(1 << 20, 'p')}});
  absl::Status st = d->CopyTo(store_.path + "/images", digests, nullptr, [] { return true; });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
}

TEST_F(DumpStagingTest, AStagingThatExistsAlreadyIsRefused) {
  auto a = DumpStaging::Make(fs_.get(), "op-4");
  ASSERT_TRUE(a.ok());
  auto b = DumpStaging::Make(fs_.get(), "op-4");
  EXPECT_FALSE(b.ok());
  EXPECT_FALSE(DumpStaging::Make(-1, "op-5").ok());
}

// With a pages pool, the pages images are kept when the staging ends (for the next dump to be
// written over), and nothing else is.
TEST_F(DumpStagingTest, WithAPoolItsPagesImagesAreKeptAndTheRestGoes) {
  criu::PagesPool pool({memory_.path + "/.pages-pool", 1u << 30, nullptr});
  auto d = DumpStaging::Make(fs_.get(), "op-6", &pool);
  ASSERT_TRUE(d.ok()) << d.status();
  Dump(*d, {{"pages-1.img", std::string(8192, 'p')},
            {"pages-2.img", std::string(4096, 'q')},
            {"core-1.img", "core"}});
  *d = DumpStaging();
  EXPECT_FALSE(fs::Exists(memory_.path + "/op-6"));
  EXPECT_EQ(pool.files(), 2);
  EXPECT_EQ(pool.held(), 8192u + 4096u);
  auto kept = pool.Take(8000);
  ASSERT_TRUE(kept.has_value());
  auto body = fs::ReadFile(kept->path);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, std::string(8192, 'p'));
}

}  // namespace
}  // namespace cryo::engine
