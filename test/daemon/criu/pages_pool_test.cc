#include "daemon/criu/pages_pool.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/temp_dir.h"

namespace cryo::criu {
namespace {

// A file of `bytes` bytes of `c` at `dir`/`name`; its path.
std::string FileOf(const std::string& dir, const std::string& name, size_t bytes, char c) {
  const std::string p = fs::Join(dir, name);
  EXPECT_TRUE(fs::WriteFileAtomic(p, std::string(bytes, c)).ok());
  return p;
}

TEST(PagesPoolTest, KeepsUnderItsCapAndGivesTheClosestFileAboveWhatIsAsked) {
  TempDir d;
  PagesPool pool({fs::Join(d.path, "pool"), 10000, nullptr});
  pool.Keep(FileOf(d.path, "pages-1.img", 3000, 'a'));
  pool.Keep(FileOf(d.path, "pages-2.img", 5000, 'b'));
  pool.Keep(FileOf(d.path, "pages-3.img", 4000, 'c'));  // over the cap: left where it is
  EXPECT_EQ(pool.files(), 2);
  EXPECT_EQ(pool.held(), 8000u);
  EXPECT_FALSE(fs::Exists(fs::Join(d.path, "pages-1.img"))) << "moved into the pool";
  EXPECT_TRUE(fs::Exists(fs::Join(d.path, "pages-3.img")));

  // 2500: the 3000-byte file (the smallest above), then 4500: the 5000-byte one.
  auto a = pool.Take(2500);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 3000u);
  auto body = fs::ReadFile(a->path);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)[0], 'a');
  EXPECT_EQ(pool.held(), 5000u);
  // Nothing above 9000: the largest.
  auto b = pool.Take(9000);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->bytes, 5000u);
  EXPECT_FALSE(pool.Take(1).has_value()) << "the pool is empty";

  // One given back as it is now (cut to 1000), the other renamed away by its taker: gone.
  ASSERT_EQ(::ftruncate(a->fd.get(), 1000), 0);
  pool.Return(*std::move(a));
  ASSERT_EQ(::rename(b->path.c_str(), fs::Join(d.path, "pages-9.img").c_str()), 0);
  EXPECT_EQ(pool.files(), 1);
  EXPECT_EQ(pool.held(), 1000u);
  auto again = pool.Take(100);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->bytes, 1000u);
}

TEST(PagesPoolTest, ANodeShortOfMemoryKeepsNothingAndGetsWhatWasKeptBack) {
  TempDir d;
  std::atomic<uint64_t> available{1u << 20};
  PagesPool pool({fs::Join(d.path, "pool"), 1u << 20, [&] { return available.load(); }, 4096});
  pool.Keep(FileOf(d.path, "pages-1.img", 8192, 'a'));
  pool.Keep(FileOf(d.path, "pages-2.img", 4096, 'b'));
  EXPECT_EQ(pool.files(), 2);

  available = 4096 + 8191;  // keeping 8192 more would go under the mark
  pool.Keep(FileOf(d.path, "pages-3.img", 8192, 'c'));
  EXPECT_EQ(pool.files(), 2);
  EXPECT_TRUE(fs::Exists(fs::Join(d.path, "pages-3.img")));

  available = 4095;  // under the mark: everything kept goes
  pool.Trim();
  EXPECT_EQ(pool.files(), 0);
  EXPECT_EQ(pool.held(), 0u);
  EXPECT_TRUE(fs::ListNames(fs::Join(d.path, "pool")).empty());
}

TEST(PagesPoolTest, WhatIsKeptGoesWithThePool) {
  TempDir d;
  {
    PagesPool pool({fs::Join(d.path, "pool"), 1u << 20, nullptr});
    pool.Keep(FileOf(d.path, "pages-1.img", 4096, 'a'));
    EXPECT_EQ(fs::ListNames(fs::Join(d.path, "pool")).size(), 1u);
  }
  EXPECT_TRUE(fs::ListNames(fs::Join(d.path, "pool")).empty());
}

}  // namespace
}  // namespace cryo::criu
