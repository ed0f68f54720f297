// What a restore would create besides credentials, read from crafted CRIU images and bounded by
// a ceiling: hard limits, raw and packet sockets, privileged netlink groups, tun files and ghost
// device nodes are each refused by name; the OOM score floor is applied to live processes.

#include "daemon/criu/resources.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::criu {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kNetAdmin = uint64_t{1} << 12;
constexpr uint64_t kNetRaw = uint64_t{1} << 13;

CredentialCeiling Ceiling(uint64_t eff, std::vector<uint64_t> limits = {}) {
  CredentialCeiling c;
  c.caps.eff = eff;
  c.rlimit_max = std::move(limits);
  return c;
}

void WriteFiles(const std::string& dir, const std::vector<::criu::file_entry>& files) {
  std::vector<const google::protobuf::MessageLite*> ptrs;
  for (const auto& f : files) ptrs.push_back(&f);
  ASSERT_TRUE(
      fs::WriteFileAtomic(dir + "/files.img", FrameImage({kImgCommonMagic, kFilesMagic}, ptrs))
          .ok());
}

TEST(ResourcesTest, HardLimitsAreReadFromProc) {
  auto text = fs::ReadFile("/proc/self/limits");
  ASSERT_TRUE(text.ok());
  auto limits = ParseProcLimits(*text);
  ASSERT_TRUE(limits.ok()) << limits.status();
  ASSERT_GE(limits->size(), 16u);
  struct rlimit r;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_EQ((*limits)[RLIMIT_NOFILE], r.rlim_max);
  ASSERT_EQ(::getrlimit(RLIMIT_CPU, &r), 0);
  EXPECT_EQ((*limits)[RLIMIT_CPU], r.rlim_max);
  EXPECT_FALSE(ParseProcLimits("Limit   Soft Limit   Hard Limit\n").ok());
}

// A process whose image raises its hard RLIMIT_NOFILE above the target's is refused by name;
// at or below it, restored.
TEST(ResourcesTest, AHardLimitAboveTheTargetsIsRefusedByName) {
  TempDir d;
  std::vector<uint64_t> pod(16, RLIM_INFINITY);
  pod[RLIMIT_NOFILE] = 1024;
  auto core = [&](uint64_t nofile) {
    ::criu::core_entry c;
    c.set_mtype(1);
    auto* rl = c.mutable_tc()->mutable_rlimits();
    for (int i = 0; i < 16; ++i) {
      auto* e = rl->add_rlimits();
      e->set_cur(i == RLIMIT_NOFILE ? nofile : RLIM_INFINITY);
      e->set_max(i == RLIMIT_NOFILE ? nofile : RLIM_INFINITY);
    }
    ASSERT_TRUE(
        fs::WriteFileAtomic(d.path + "/core-7.img", FrameImage({kImgCommonMagic, kCoreMagic}, {&c}))
            .ok());
  };
  core(1024);
  EXPECT_TRUE(CheckImageResources(d.path, Ceiling(0, pod), "container c").ok());
  core(20000);
  absl::Status st = CheckImageResources(d.path, Ceiling(0, pod), "container c");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("process 7"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("RLIMIT_NOFILE of 20000, above the 1024"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("container c"));
  // A ceiling that records no limits (an older manifest) does not bound them.
  EXPECT_TRUE(CheckImageResources(d.path, Ceiling(0), "x").ok());
}

// Sockets the target could not create itself: each refused naming the file and the capability,
// and allowed where the target holds it.
TEST(ResourcesTest, SocketsTheTargetCouldNotCreateAreRefusedByName) {
  struct Case {
    const char* what;
    std::function<void(::criu::file_entry*)> make;
    uint64_t needs;
  };
  const Case cases[] = {
      {"a packet socket", [](::criu::file_entry* f) { f->set_type(10); }, kNetRaw},
      {"a raw IP socket",
       [](::criu::file_entry* f) {
         f->set_type(4);
         f->mutable_isk()->set_type(SOCK_RAW);
         f->mutable_isk()->set_proto(1);
       },
       kNetRaw},
      {"a netlink socket of family 9",
       [](::criu::file_entry* f) {
         f->set_type(13);
         f->mutable_nlsk()->set_protocol(NETLINK_AUDIT);
         f->mutable_nlsk()->add_groups(1);
       },
       kNetAdmin},
      {"a tun/tap device", [](::criu::file_entry* f) { f->set_type(15); }, kNetAdmin},
  };
  for (const auto& k : cases) {
    TempDir d;
    ::criu::file_entry f;
    f.set_id(3);
    k.make(&f);
    WriteFiles(d.path, {f});
    absl::Status st = CheckImageResources(d.path, Ceiling(0), "container c");
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << k.what;
    EXPECT_THAT(std::string(st.message()), HasSubstr(k.what));
    EXPECT_THAT(std::string(st.message()), HasSubstr("file 3"));
    EXPECT_TRUE(CheckImageResources(d.path, Ceiling(k.needs), "container c").ok()) << k.what;
  }
  // What any process may have: TCP, and route netlink in its groups.
  TempDir d;
  ::criu::file_entry tcp, route;
  tcp.set_type(4);
  tcp.mutable_isk()->set_type(SOCK_STREAM);
  route.set_type(13);
  route.mutable_nlsk()->set_protocol(NETLINK_ROUTE);
  route.mutable_nlsk()->add_groups(1);
  WriteFiles(d.path, {tcp, route});
  EXPECT_TRUE(CheckImageResources(d.path, Ceiling(0), "container c").ok());
}

// The ghost-file trick: a deleted device node that CRIU would mknod for the job. Refused, with
// the device named; a deleted regular file (what ghost files are for) is not.
TEST(ResourcesTest, AGhostDeviceNodeIsRefusedAndAGhostRegularFileIsNot) {
  TempDir d;
  auto ghost = [&](uint32_t mode, uint32_t rdev) {
    ::criu::ghost_file_entry g;
    g.set_uid(0);
    g.set_gid(0);
    g.set_mode(mode);
    g.set_rdev(rdev);
    std::string img = FrameImage({kImgCommonMagic, kGhostFileMagic}, {&g});
    img += std::string(4096, 'd');  // the file's data follows the entry
    ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/ghost-file-5.img", img).ok());
  };
  ghost(S_IFREG | 0600, 0);
  EXPECT_TRUE(CheckImageResources(d.path, Ceiling(~uint64_t{0}), "container c").ok());
  ghost(S_IFCHR | 0600, makedev(1, 11));  // /dev/kmsg
  absl::Status st = CheckImageResources(d.path, Ceiling(~uint64_t{0}), "container c");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("ghost-file-5.img"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("character device node (1:11)"));
  ghost(S_IFBLK | 0600, makedev(8, 0));
  EXPECT_THAT(std::string(CheckImageResources(d.path, Ceiling(0), "c").message()),
              HasSubstr("block device node (8:0)"));
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/ghost-file-5.img", "short").ok());
  EXPECT_EQ(CheckImageResources(d.path, Ceiling(0), "c").code(),
            absl::StatusCode::kInvalidArgument);
}

// CRIU restored an OOM score below the container's: raised to it, never lowered.
TEST(ResourcesTest, OomScoresBelowTheFloorAreRaisedAndOthersLeftAlone) {
  pid_t low = ::fork();
  if (low == 0) {
    for (;;) ::pause();
  }
  pid_t high = ::fork();
  if (high == 0) {
    for (;;) ::pause();
  }
  auto set = [](pid_t p, int v) {
    const int fd = ::open(absl::StrCat("/proc/", p, "/oom_score_adj").c_str(), O_WRONLY);
    const std::string t = absl::StrCat(v);
    const bool ok = fd >= 0 && ::write(fd, t.data(), t.size()) == static_cast<ssize_t>(t.size());
    if (fd >= 0) ::close(fd);
    return ok;
  };
  auto get = [](pid_t p) {
    return std::string(fs::ReadFile(absl::StrCat("/proc/", p, "/oom_score_adj")).value_or(""));
  };
  // Raising needs no privilege (the test may lack CAP_SYS_RESOURCE to lower).
  const int base = std::stoi(get(::getpid()));
  ASSERT_LE(base, 100);
  ASSERT_TRUE(set(high, 900));
  proc::ProcReader proc;
  auto raised = RaiseOomScoreAdj(proc, {low, high}, 500);
  EXPECT_EQ(raised, std::vector<pid_t>{low});
  EXPECT_EQ(get(low), "500\n");
  EXPECT_EQ(get(high), "900\n") << "never lowered";
  for (pid_t p : {low, high}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
}

}  // namespace
}  // namespace cryo::criu
