// What container mode reads from outside: the runtime's verbose info and the writable-layer
// files of a checkpoint in the store. Every parse returns an error, never throws.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "daemon/container/rootfs.h"
#include "daemon/container/runtime.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::container {
namespace {

// Found on 2026-11-24: `info.value("sandboxID", "")` threw on a sandboxID that was not a string.
TEST(VerboseInfo, WrongTypesAreErrorsNeverExceptions) {
  runtime::ContainerInfo c;
  ASSERT_TRUE(runtime::ParseVerboseInfo(
                  R"({"pid": 42, "sandboxID": "sb", "runtimeSpec": {"process": {}}})", &c)
                  .ok());
  EXPECT_EQ(c.pid, 42);
  EXPECT_EQ(c.pod_sandbox_id, "sb");
  EXPECT_TRUE(c.runtime_spec.is_object());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& bad :
       {std::string(R"({"sandboxID": 7})"), std::string(R"({"pid": "42"})"),
        std::string(R"({"pid": 1e300})"), std::string(R"({"pid": 4294967296})"),
        std::string(R"({"runtimeSpec": "x"})"), std::string("[]"), std::string("{"),
        R"({"runtimeSpec": )" + deep + "}"}) {
    runtime::ContainerInfo d;
    EXPECT_EQ(runtime::ParseVerboseInfo(bad, &d).code(), absl::StatusCode::kInvalidArgument)
        << bad.substr(0, 40);
  }
}

TEST(DeletedFiles, WrongTypesAndNestingAreErrors) {
  auto ok = ParseDeletedFiles(R"(["/etc/gone", "var/x"])");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), 2u);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& bad :
       {std::string("[1]"), std::string(R"({"a": "b"})"), std::string(R"([["x"]])"),
        std::string(R"(["../etc"])"), std::string("nope"), deep}) {
    EXPECT_FALSE(ParseDeletedFiles(bad).ok()) << bad.substr(0, 40);
  }
}

// Found on 2026-11-24: cryo-nsexec read deleted.files through links, of any size, and would
// block forever on a FIFO. It now reads it through ReadDeletedFiles.
TEST(DeletedFiles, ReadOnlyARegularBoundedFileWithoutFollowingLinks) {
  TempDir d;
  int dir = ::open(d.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  auto none = ReadDeletedFiles(dir, "deleted.files");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty()) << "absent: nothing was deleted";

  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/deleted.files", R"(["a/b"])").ok());
  auto one = ReadDeletedFiles(dir, "deleted.files");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{"a/b"});

  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/elsewhere", R"(["etc/shadow"])").ok());
  ASSERT_EQ(::symlink((d.path + "/elsewhere").c_str(), (d.path + "/linked").c_str()), 0);
  EXPECT_EQ(ReadDeletedFiles(dir, "linked").status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(::mkfifo((d.path + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(ReadDeletedFiles(dir, "fifo").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(OpenDiffFile(dir, "fifo").status().code(), absl::StatusCode::kFailedPrecondition);
  int fd = ::open((d.path + "/huge").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, int64_t{64} << 30), 0);
  ::close(fd);
  EXPECT_EQ(ReadDeletedFiles(dir, "huge").status().code(), absl::StatusCode::kFailedPrecondition);
  ::close(dir);
}

}  // namespace
}  // namespace cryo::container
