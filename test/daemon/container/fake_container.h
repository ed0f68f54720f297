#pragma once

// Container mode without containerd: a fake ContainerRuntime answering from a table, and a fake
// /proc tree describing a container (its cryo-init, its job, their namespaces, pipes and
// mounts). The processes named in the tree are real children of the test, so whatever the
// engine does to them (stop, resume, kill, signal) lands on processes of the test's own.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/container/runtime.h"
#include "lib/base/fs.h"
#include "lib/base/proc.h"
#include "lib/contract/cryo_init_protocol.h"

namespace cryo::testing {

class FakeContainerRuntime : public runtime::ContainerRuntime {
 public:
  std::map<std::string, runtime::ContainerInfo> containers;
  absl::Status list_error;
  absl::StatusOr<runtime::ContainerInfo> Inspect(const std::string& id) override {
    auto it = containers.find(id);
    if (it == containers.end()) {
      return absl::NotFoundError(absl::StrCat("container ", id, " not found"));
    }
    return it->second;
  }
  absl::StatusOr<std::vector<runtime::ContainerInfo>> ListRunning() override {
    if (!list_error.ok()) return list_error;
    std::vector<runtime::ContainerInfo> out;
    for (const auto& [id, c] : containers) {
      if (c.state == runtime::ContainerInfo::State::kRunning) out.push_back(c);
    }
    return out;
  }
  std::string name() const override { return "fake 1.0"; }
  std::string endpoint() const override { return "unix:///fake.sock"; }
};

// A real child that sleeps until killed.
inline pid_t SleepingChild() {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) ::pause();
  }
  return pid;
}

inline void Reap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Writes fake /proc/<pid> entries under `root`.
class FakeProc {
 public:
  explicit FakeProc(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }

  struct Process {
    pid_t pid = 0;
    pid_t ppid = 1;
    pid_t ns_pid = 0;  // 0: the host pid
    std::string comm = "job";
    std::string exe = "/bin/job";
    std::string pidns = "pid:[4026531836]";
    std::string userns;  // empty: no ns/user link
    std::string limits;  // /proc/<pid>/limits; empty: this test process's own
    std::vector<std::string> env;
    std::vector<std::string> cmdline;
    std::string fd1 = "pipe:[1001]";
    std::string fd2 = "pipe:[1002]";
    std::string mountinfo;
    char state = 'S';
    // Credential lines of its status (Uid:, Cap*:, ...); empty: this test process's own.
    std::string creds;
  };

  // Whole or not at all, as the kernel shows a process: written aside, then renamed into place
  // (swapped with the one of the same pid, if any, in one step): a reader in another thread
  // never sees it half written or missing (found on a loaded machine).
  void Add(const Process& p) {
    const std::string d = absl::StrCat(root_, "/.new-", p.pid);
    (void)fs::RemoveTree(d);
    Fill(d, p);
    const std::string at = absl::StrCat(root_, "/", p.pid);
    if (::renameat2(AT_FDCWD, d.c_str(), AT_FDCWD, at.c_str(), RENAME_EXCHANGE) == 0) {
      (void)fs::RemoveTree(d);  // the one it replaced
    } else {
      ::rename(d.c_str(), at.c_str());
    }
  }

  // The credential lines of /proc/self/status (what a restored fake job would have).
  static std::string OwnCredentialLines() {
    std::string out;
    auto st = fs::ReadFile("/proc/self/status");
    if (!st.ok()) return out;
    for (absl::string_view line : absl::StrSplit(*st, '\n')) {
      for (const char* k : {"Uid:", "Gid:", "Groups:", "Cap", "NoNewPrivs:", "Seccomp:"}) {
        if (absl::StartsWith(line, k)) absl::StrAppend(&out, line, "\n");
      }
    }
    return out;
  }

  void Remove(pid_t pid) { (void)fs::RemoveTree(absl::StrCat(root_, "/", pid)); }

 private:
  void Fill(const std::string& d, const Process& p) {
    Write(d + "/stat", absl::StrCat(p.pid, " (", p.comm, ") ", std::string(1, p.state), " ", p.ppid,
                                    " ", p.pid, " ", p.pid, " 0 -1 4194304 0 0 0 0 0 0 0",
                                    " 0 20 0 1 0 ", 1000 + p.pid, " 0 0"));
    Write(d + "/status",
          absl::StrCat("Name:\t", p.comm, "\nNSpid:\t",
                       p.ns_pid > 0 ? absl::StrCat(p.pid, "\t", p.ns_pid) : absl::StrCat(p.pid),
                       "\n", p.creds.empty() ? OwnCredentialLines() : p.creds));
    Write(d + "/environ", absl::StrJoin(p.env, std::string(1, '\0')));
    Write(d + "/cmdline", absl::StrJoin(p.cmdline, std::string(1, '\0')));
    Write(d + "/wchan", "do_sigtimedwait");
    Write(d + "/limits",
          p.limits.empty() ? fs::ReadFile("/proc/self/limits").value_or("") : p.limits);
    Write(d + "/mountinfo", p.mountinfo);
    (void)fs::MakeDirs(absl::StrCat(d, "/task/", p.pid));
    (void)fs::MakeDirs(d + "/fd");
    (void)fs::MakeDirs(d + "/ns");
    ::symlink(p.exe.c_str(), (d + "/exe").c_str());
    ::symlink(p.fd1.c_str(), (d + "/fd/1").c_str());
    ::symlink(p.fd2.c_str(), (d + "/fd/2").c_str());
    ::symlink(p.pidns.c_str(), (d + "/ns/pid").c_str());
    if (!p.userns.empty()) ::symlink(p.userns.c_str(), (d + "/ns/user").c_str());
  }

  static void Write(const std::string& path, const std::string& data) {
    (void)fs::MakeDirs(path.substr(0, path.rfind('/')));
    (void)fs::WriteFileAtomic(path, data);
  }
  std::string root_;
};

}  // namespace cryo::testing
