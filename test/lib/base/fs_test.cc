#include "lib/base/fs.h"

#include <sys/stat.h>

#include "gtest/gtest.h"
#include "test/daemon/test_util.h"

namespace cryo::fs {
namespace {

mode_t Mode(const std::string& p) {
  struct stat st;
  ::stat(p.c_str(), &st);
  return st.st_mode & 0777;
}

TEST(Fs, AtomicWriteReplacesWholeFileWithMode) {
  TempDir d;
  ASSERT_TRUE(WriteFileAtomic(d.path + "/f", "one").ok());
  ASSERT_TRUE(WriteFileAtomic(d.path + "/f", "two").ok());
  EXPECT_EQ(*ReadFile(d.path + "/f"), "two");
  EXPECT_EQ(Mode(d.path + "/f"), 0600u);
  auto files = ListFilesRecursive(d.path);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->size(), 1u) << "no temporaries left behind";
}

TEST(Fs, MakeDirsRestrictModesAndRemoveTree) {
  TempDir d;
  ASSERT_TRUE(MakeDirs(d.path + "/a/b/c", 0700).ok());
  ASSERT_TRUE(WriteFileAtomic(d.path + "/a/b/c/x", "x", 0644).ok());
  ASSERT_TRUE(RestrictModes(d.path + "/a").ok());
  EXPECT_EQ(Mode(d.path + "/a/b"), 0700u);
  EXPECT_EQ(Mode(d.path + "/a/b/c/x"), 0600u);
  EXPECT_EQ(TreeBytes(d.path + "/a"), 1u);
  ASSERT_TRUE(RemoveTree(d.path + "/a").ok());
  EXPECT_FALSE(Exists(d.path + "/a"));
  EXPECT_TRUE(RemoveTree(d.path + "/missing").ok());
}

TEST(Fs, RenameNoReplaceRefusesExistingTarget) {
  TempDir d;
  ASSERT_TRUE(MakeDirs(d.path + "/src").ok());
  ASSERT_TRUE(MakeDirs(d.path + "/dst").ok());
  absl::Status s = RenameNoReplace(d.path + "/src", d.path + "/dst");
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_TRUE(RenameNoReplace(d.path + "/src", d.path + "/new").ok());
}

TEST(Fs, ErrorsCarryUsefulCodes) {
  EXPECT_EQ(ReadFile("/nonexistent/x").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cryo::fs
