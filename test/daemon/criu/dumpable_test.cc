#include "daemon/criu/dumpable.h"

#include <sys/stat.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::criu {
namespace {

// A /proc of one process, 4242, with the descriptors and maps given.
class FakeProc {
 public:
  explicit FakeProc(const std::vector<std::string>& fd_targets, const std::string& maps = "") {
    const std::string pid = dir_.path + "/4242";
    EXPECT_TRUE(fs::MakeDirs(pid + "/fd").ok());
    for (size_t i = 0; i < fd_targets.size(); ++i) {
      EXPECT_EQ(::symlink(fd_targets[i].c_str(), (pid + "/fd/" + std::to_string(i)).c_str()), 0);
    }
    EXPECT_TRUE(fs::WriteFileAtomic(pid + "/maps", maps).ok());
    EXPECT_TRUE(fs::WriteFileAtomic(pid + "/cmdline",
                                    std::string("python3\0-m\0torch.distributed.run\0", 33))
                    .ok());
  }
  proc::ProcReader reader() const { return proc::ProcReader(dir_.path); }

 private:
  TempDir dir_;
};

TEST(CheckDumpable, AnIoUringDescriptorOrMappingIsRefusedNamingTheProcess) {
  FakeProc fd({"/dev/null", "socket:[123]", "anon_inode:[io_uring]"});
  absl::Status st = CheckDumpable(fd.reader(), {4242});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("pid 4242 (python3 -m torch.distributed.run)"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("USE_LIBUV=0"), std::string::npos) << st;
  EXPECT_NE(st.message().find("Nothing was stopped"), std::string::npos) << st;

  // The descriptor closed, the rings still mapped.
  FakeProc mapped({"/dev/null"},
                  "7f95beab8000-7f95beabc000 rw-s 10000000 00:10 17538    anon_inode:[io_uring]\n");
  EXPECT_EQ(CheckDumpable(mapped.reader(), {4242}).code(), absl::StatusCode::kFailedPrecondition);

  FakeProc plain({"/dev/null", "anon_inode:[eventfd]", "pipe:[7]"},
                 "7f0000000000-7f0000001000 r-xp 00000000 fe:00 1   /usr/lib/libc.so.6\n");
  EXPECT_TRUE(CheckDumpable(plain.reader(), {4242}).ok());
  EXPECT_TRUE(CheckDumpable(plain.reader(), {4243}).ok()) << "a process that ended holds nothing";
}

// NCCL over InfiniBand or RoCE (issue 37): the verbs device open, or only its doorbell pages
// mapped, is refused before anything stops, naming how to run NCCL over sockets instead.
TEST(CheckDumpable, AnRdmaDeviceOpenOrMappedIsRefusedNamingTheSocketTransport) {
  FakeProc open({"/dev/null", "/dev/infiniband/uverbs0", "socket:[9]"});
  absl::Status st = CheckDumpable(open.reader(), {4242});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("pid 4242 (python3 -m torch.distributed.run) holds the RDMA device "
                              "/dev/infiniband/uverbs0"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("NCCL_IB_DISABLE=1"), std::string::npos) << st;
  EXPECT_NE(st.message().find("NCCL_NET=Socket"), std::string::npos) << st;
  EXPECT_NE(st.message().find("Nothing was stopped"), std::string::npos) << st;

  FakeProc cm({"/dev/infiniband/rdma_cm"});
  EXPECT_EQ(CheckDumpable(cm.reader(), {4242}).code(), absl::StatusCode::kFailedPrecondition);

  FakeProc mapped({"/dev/null"},
                  "7f95beab8000-7f95beab9000 rw-s 00000000 00:06 812    /dev/infiniband/uverbs1\n");
  st = CheckDumpable(mapped.reader(), {4242});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("/dev/infiniband/uverbs1"), std::string::npos) << st;

  // NCCL's socket transport holds sockets only.
  FakeProc sockets({"socket:[11]", "socket:[12]", "/dev/nvidiactl"});
  EXPECT_TRUE(CheckDumpable(sockets.reader(), {4242}).ok());
}

}  // namespace
}  // namespace cryo::criu
