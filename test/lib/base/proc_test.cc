#include "lib/base/proc.h"

#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::proc {
namespace {

// A fake /proc entry: only what ProcReader reads.
void FakeProc(const std::string& root, int pid, int ppid, const std::string& comm, uint64_t flags,
              char state = 'S') {
  std::string dir = absl::StrCat(root, "/", pid);
  ASSERT_TRUE(fs::MakeDirs(dir + "/task/" + std::to_string(pid)).ok());
  // Fields after comm: state ppid pgrp session tty tpgid flags ... starttime is field 22.
  std::string stat = absl::StrCat(pid, " (", comm, ") ", std::string(1, state), " ", ppid, " ", pid,
                                  " ", pid, " 0 -1 ", flags);
  for (int f = 10; f <= 22; ++f) absl::StrAppend(&stat, " ", f == 22 ? 4242 : 0);
  absl::StrAppend(&stat, " 0 0\n");
  ASSERT_TRUE(fs::WriteFileAtomic(dir + "/stat", stat).ok());
}

TEST(Proc, ReadsFakeProcAndSpotsKernelThreads) {
  TempDir d;
  FakeProc(d.path, 2, 0, "kthreadd", 0x00208040);
  FakeProc(d.path, 100, 1, "my job) (x", 0x00400100);
  FakeProc(d.path, 101, 100, "child", 0x00400100);
  FakeProc(d.path, 102, 101, "grandchild", 0x00400100, 'T');
  FakeProc(d.path, 200, 1, "other", 0x00400100);
  ProcReader r(d.path);
  auto k = r.Read(2);
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->kernel_thread);
  auto j = r.Read(100);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE(j->kernel_thread);
  EXPECT_EQ(j->comm, "my job) (x");  // parentheses inside comm do not confuse the parser
  EXPECT_EQ(j->ppid, 1);
  EXPECT_EQ(j->start_time, 4242u);
  auto tree = r.Tree(100);
  ASSERT_TRUE(tree.ok());
  ASSERT_EQ(tree->size(), 3u);
  EXPECT_EQ((*tree)[0].pid, 100);
  EXPECT_EQ((*tree)[2].pid, 102);
  EXPECT_TRUE(r.Stopped(102));
  EXPECT_TRUE(r.Alive(100, 4242));
  EXPECT_FALSE(r.Alive(100, 4243)) << "a reused pid is not the same process";
  EXPECT_EQ(r.Read(999).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.Read(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Proc, ReadsARealProcess) {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ProcReader r;
  auto self = r.Tree(::getpid());
  ASSERT_TRUE(self.ok());
  bool found = false;
  for (const auto& p : *self) found |= p.pid == child;
  EXPECT_TRUE(found);
  EXPECT_FALSE(r.Threads(::getpid()).empty());
  EXPECT_GT(r.MemoryBytes(::getpid()), 0u);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(r.Alive(child));
}

}  // namespace
TEST(Proc, KernelReleaseAndArchAreUnames) {
  struct utsname u;
  ASSERT_EQ(::uname(&u), 0);
  EXPECT_EQ(KernelRelease(), u.release);
  EXPECT_EQ(MachineArch(), u.machine);
  EXPECT_NE(MachineArch(), "unknown");
}

}  // namespace cryo::proc
