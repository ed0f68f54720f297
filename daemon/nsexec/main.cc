// cryo-nsexec: runs a host program, or applies a rootfs diff, inside a container.
//
//   cryo-nsexec --target PID [--join-cgroups] [--far-pid] [--last-pid N] [--fd N=PATH[:w]]...
//               (--apply-rootfs-diff DIR | -- PROGRAM [ARG...])
//
// Joins the ipc, uts, net, pid and mount namespaces of PID (the container's init; optionally its
// cgroups first), then forks into its pid namespace. The container's mount namespace has none
// of the host's files, so everything from the host is opened before the switch and reached
// through /proc/self/fd afterwards: PROGRAM is started through the host's dynamic loader with
// the host's library directories (`{fd:N}` in an ARG becomes /proc/self/fd/N), and --fd opens
// host paths as fixed descriptors (":w" opens for writing, e.g. the container init's stdout
// pipe). --far-pid gives the child a pid at the top of the pid range, so that it cannot take a
// pid that a restore needs; --last-pid N moves the namespace's next pid above N, so that the
// processes the child forks (CRIU's helpers) do not either. The exit status is the child's
// (128+N when killed by signal N).
//
// cryod runs it for CRIU in container mode. It must stay single-threaded: setns into a mount
// namespace is refused to a multi-threaded process.
//
// Run with no arguments by CRIU as its action script (CRTOOLS_SCRIPT_ACTION set), it is cryod's
// gate instead (daemon/criu/action_gate.h): at post-restore it waits for cryod's verdict on the
// images CRIU read; at post-dump, for cryod to write the pages of the job's anonymous memory.
#include <elf.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/container/rootfs.h"
#include "daemon/criu/action_gate.h"
#include "lib/base/flags.h"
#include "lib/base/fs.h"
#include "lib/contract/archive.h"

namespace {

constexpr int kExitUsage = 125;  // like cryo-init: a failure of the helper, not of the program

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "cryo-nsexec: %s\n", msg.c_str());
  std::exit(kExitUsage);
}

[[noreturn]] void DieErrno(const std::string& what) {
  Die(absl::StrCat(what, ": ", strerror(errno)));
}

struct Options {
  pid_t target = 0;
  bool join_cgroups = false;
  bool far_pid = false;
  pid_t last_pid = 0;
  std::vector<std::pair<int, std::string>> fds;  // N -> PATH[:w]
  std::string diff_dir;
  std::vector<std::string> program;  // PROGRAM ARGS...
};

Options Parse(int argc, char** argv) {
  Options o;
  cryo::flags::FlagSet flag_set;
  flag_set.Custom(
      "target",
      [&](absl::string_view v) {
        if (!absl::SimpleAtoi(v, &o.target) || o.target <= 0) {
          return absl::InvalidArgumentError("--target needs a pid");
        }
        return absl::OkStatus();
      },
      "host pid of the container's init", "PID");
  flag_set.Bool("join-cgroups", &o.join_cgroups, "join every cgroup of the target");
  flag_set.Bool("far-pid", &o.far_pid, "run the program at a pid far above the checkpoint's");
  flag_set.Custom(
      "last-pid",
      [&](absl::string_view v) {
        if (!absl::SimpleAtoi(v, &o.last_pid) || o.last_pid <= 0) {
          return absl::InvalidArgumentError("--last-pid needs a pid");
        }
        return absl::OkStatus();
      },
      "highest pid the program must stay above", "N");
  flag_set.Custom(
      "fd",
      [&](absl::string_view v) {
        size_t eq = v.find('=');
        int n = 0;
        if (eq == absl::string_view::npos || !absl::SimpleAtoi(v.substr(0, eq), &n) || n < 3) {
          return absl::InvalidArgumentError(
              absl::StrCat("--fd wants N=PATH with N >= 3, got '", v, "'"));
        }
        o.fds.emplace_back(n, std::string(v.substr(eq + 1)));
        return absl::OkStatus();
      },
      "host path opened as descriptor N (\":w\" for writing)", "N=PATH[:w]");
  flag_set.String("apply-rootfs-diff", &o.diff_dir, "put a saved writable layer back", "DIR");
  auto r = flag_set.Parse(std::vector<std::string>(argv + 1, argv + argc),
                          {.allow_unknown = false, .stop_at_positional = true});
  if (!r.ok()) {
    Die(absl::StrCat(r.status().message(),
                     "; usage: cryo-nsexec --target PID [--join-cgroups] [--far-pid] "
                     "[--last-pid N] [--fd N=PATH[:w]]... (--apply-rootfs-diff DIR | -- PROGRAM "
                     "[ARG...])"));
  }
  o.program = r->positional;

  if (o.target == 0) Die("--target is required");
  if (o.program.empty() == o.diff_dir.empty()) {
    Die("give either --apply-rootfs-diff DIR or -- PROGRAM");
  }
  return o;
}

// Opens `path` as descriptor `n`, inherited by the program.
void OpenFixed(int n, std::string path) {
  int flags = O_RDONLY;
  if (absl::EndsWith(path, ":w")) {
    path.resize(path.size() - 2);
    // Non-blocking so that a pipe without a reader fails instead of hanging; cleared after.
    flags = O_WRONLY | O_NONBLOCK;
  } else if (cryo::fs::IsDir(path)) {
    flags = O_PATH | O_DIRECTORY;
  }
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) DieErrno(absl::StrCat("open ", path));
  if (flags & O_NONBLOCK) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (fd != n) {
    if (::dup2(fd, n) < 0) DieErrno(absl::StrCat("dup2 to ", n));
    ::close(fd);
  }
}

// PT_INTERP of an ELF executable; empty for a static one.
std::string Interpreter(const std::string& path) {
  auto data = cryo::fs::ReadFile(path);
  if (!data.ok()) Die(std::string(data.status().message()));
  const std::string& d = *data;
  if (d.size() < sizeof(Elf64_Ehdr) || std::memcmp(d.data(), ELFMAG, SELFMAG) != 0 ||
      d[EI_CLASS] != ELFCLASS64) {
    Die(absl::StrCat(path, " is not a 64-bit ELF executable"));
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, d.data(), sizeof(eh));
  for (int i = 0; i < eh.e_phnum; ++i) {
    size_t off = eh.e_phoff + static_cast<size_t>(i) * eh.e_phentsize;
    if (off + sizeof(Elf64_Phdr) > d.size()) break;
    Elf64_Phdr ph;
    std::memcpy(&ph, d.data() + off, sizeof(ph));
    if (ph.p_type == PT_INTERP && ph.p_offset + ph.p_filesz <= d.size()) {
      return std::string(d.data() + ph.p_offset, strnlen(d.data() + ph.p_offset, ph.p_filesz));
    }
  }
  return "";
}

// Directories of the shared libraries the loader resolves for `program` on the host.
std::vector<std::string> LibraryDirs(const std::string& interp, const std::string& program) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) DieErrno("pipe");
  pid_t pid = ::fork();
  if (pid < 0) DieErrno("fork");
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::execl(interp.c_str(), interp.c_str(), "--list", program.c_str(), nullptr);
    _exit(127);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die(absl::StrCat(interp, " --list ", program, " failed:\n", out));
  }
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    size_t arrow = line.find("=> /");
    if (arrow == absl::string_view::npos) continue;
    absl::string_view lib = line.substr(arrow + 3);
    lib = lib.substr(0, lib.find(' '));
    std::string dir(lib.substr(0, lib.rfind('/')));
    if (seen.insert(dir).second) dirs.push_back(dir);
  }
  return dirs;
}

void JoinCgroups(pid_t target) {
  auto own = cryo::fs::ReadFile("/proc/self/mountinfo");
  auto theirs = cryo::fs::ReadFile(absl::StrCat("/proc/", target, "/cgroup"));
  if (!own.ok() || !theirs.ok()) Die("cannot read cgroup facts");
  auto mounts = cryo::container::ParseMountInfo(*own);
  if (!mounts.ok()) Die(std::string(mounts.status().message()));
  const std::string self = std::to_string(::getpid());
  for (absl::string_view line : absl::StrSplit(*theirs, '\n', absl::SkipEmpty())) {
    // hierarchy-id:controllers:path
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    std::vector<std::string> want = absl::StrSplit(f[1], ',', absl::SkipEmpty());
    const cryo::container::MountEntry* hit = nullptr;
    for (const auto& m : *mounts) {
      if (want.empty() ? m.fstype != "cgroup2" : m.fstype != "cgroup") continue;
      std::vector<std::string> opts = absl::StrSplit(m.super_options, ',');
      bool all = true;
      for (const auto& w : want) {
        if (std::find(opts.begin(), opts.end(), w) == opts.end()) all = false;
      }
      if (all) {
        hit = &m;
        break;
      }
    }
    if (hit == nullptr) {
      // A hierarchy this node does not mount (e.g. a named one of another init): nothing to
      // join, and nothing the job could be limited by either.
      continue;
    }
    std::string path = f[2];
    if (hit->root != "/" && absl::StartsWith(path, hit->root)) path = path.substr(hit->root.size());
    std::string procs = absl::StrCat(hit->mount_point, path, "/cgroup.procs");
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, self.data(), self.size()) < 0) {
      DieErrno(absl::StrCat("joining cgroup ", procs));
    }
    ::close(fd);
  }
}

void JoinNamespaces(pid_t target) {
  // Opened first, joined after: once in the target's mount namespace, /proc/<target> may
  // not be what it was.
  const char* kinds[] = {"ipc", "uts", "net", "pid", "mnt"};
  int fds[5];
  for (int i = 0; i < 5; ++i) {
    std::string p = absl::StrCat("/proc/", target, "/ns/", kinds[i]);
    fds[i] = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fds[i] < 0) DieErrno(absl::StrCat("open ", p));
  }
  for (int i = 0; i < 5; ++i) {
    if (::setns(fds[i], 0) != 0) DieErrno(absl::StrCat("setns ", kinds[i], " of pid ", target));
    ::close(fds[i]);
  }
  if (::chdir("/") != 0) DieErrno("chdir /");
}

pid_t ForkFar() {
  auto max = cryo::fs::ReadFile("/proc/sys/kernel/pid_max");
  int pid_max = 0;
  if (!max.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*max), &pid_max)) {
    Die("cannot read /proc/sys/kernel/pid_max");
  }
  for (int k = 1; k <= 64; ++k) {
    pid_t tid = pid_max - k;
    struct clone_args args;
    std::memset(&args, 0, sizeof(args));
    args.exit_signal = SIGCHLD;
    args.set_tid = reinterpret_cast<uint64_t>(&tid);
    args.set_tid_size = 1;
    long r = ::syscall(SYS_clone3, &args, sizeof(args));
    if (r >= 0) return static_cast<pid_t>(r);
    if (errno != EEXIST) DieErrno("clone3 with a chosen pid");
  }
  Die("no free pid at the top of the pid range");
}

int ApplyDiff(const std::string& dir_path, int dir_fd) {
  // Both from the store: no link followed, regular files only, deleted.files bounded.
  auto tar = cryo::container::OpenDiffFile(dir_fd, cryo::contract::archive::kRootfsDiff);
  if (!tar.ok()) Die(absl::StrCat(dir_path, ": ", tar.status().message()));
  auto deleted = cryo::container::ReadDeletedFiles(dir_fd, cryo::contract::archive::kDeletedFiles);
  if (!deleted.ok()) Die(absl::StrCat(dir_path, ": ", deleted.status().message()));
  absl::Status s = cryo::container::ApplyRootfsDiff("/", tar->get(), *deleted);
  if (!s.ok()) {
    std::fprintf(stderr, "cryo-nsexec: applying the rootfs diff: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1 && std::getenv("CRTOOLS_SCRIPT_ACTION") != nullptr) {
    return cryo::criu::WaitAtGate();
  }
  Options o = Parse(argc, argv);
  for (const auto& [n, path] : o.fds) OpenFixed(n, path);

  int diff_fd = -1;
  std::vector<std::string> exec_argv;
  int exec_fd = -1;
  if (!o.diff_dir.empty()) {
    diff_fd = ::open(o.diff_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (diff_fd < 0) DieErrno(absl::StrCat("open ", o.diff_dir));
  } else {
    const std::string program = o.program[0];
    if (program.empty() || program[0] != '/') Die("PROGRAM must be an absolute host path");
    const std::string interp = Interpreter(program);
    // Kept open across exec: the loader and the program reach the host through them.
    int prog_fd = ::open(program.c_str(), O_PATH);
    if (prog_fd < 0) DieErrno(absl::StrCat("open ", program));
    std::vector<std::string> args(o.program.begin() + 1, o.program.end());
    for (auto& a : args) {
      for (const auto& [n, path] : o.fds) {
        a = absl::StrReplaceAll(
            a, {{absl::StrCat("{fd:", n, "}"), absl::StrCat("/proc/self/fd/", n)}});
      }
    }
    if (interp.empty()) {
      exec_fd = prog_fd;
      exec_argv.push_back(program);
    } else {
      int root_fd = ::open("/", O_PATH | O_DIRECTORY);
      if (root_fd < 0) DieErrno("open /");
      std::vector<std::string> dirs;
      for (const auto& d : LibraryDirs(interp, program)) {
        dirs.push_back(absl::StrCat("/proc/self/fd/", root_fd, d));
      }
      exec_fd = ::open(interp.c_str(), O_PATH | O_CLOEXEC);
      if (exec_fd < 0) DieErrno(absl::StrCat("open ", interp));
      exec_argv = {interp,
                   "--library-path",
                   absl::StrJoin(dirs, ":"),
                   "--argv0",
                   program.substr(program.rfind('/') + 1),
                   absl::StrCat("/proc/self/fd/", prog_fd)};
    }
    exec_argv.insert(exec_argv.end(), args.begin(), args.end());
  }

  // The host's: a container's /proc/sys is mounted read-only.
  int last_pid_fd = -1;
  if (o.last_pid > 0) {
    last_pid_fd = ::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
    if (last_pid_fd < 0) DieErrno("open /proc/sys/kernel/ns_last_pid");
  }
  if (o.join_cgroups) JoinCgroups(o.target);
  JoinNamespaces(o.target);

  pid_t child = o.far_pid ? ForkFar() : ::fork();
  if (child < 0) DieErrno("fork");
  if (child == 0) {
    // ns_last_pid acts on the writer's pid namespace: only the child, inside it, can set it.
    if (last_pid_fd >= 0) {
      const std::string v = std::to_string(o.last_pid);
      if (::write(last_pid_fd, v.data(), v.size()) != static_cast<ssize_t>(v.size())) {
        DieErrno("setting ns_last_pid");
      }
      ::close(last_pid_fd);
    }
    if (diff_fd >= 0) _exit(ApplyDiff(o.diff_dir, diff_fd));
    std::vector<char*> cargv;
    for (auto& a : exec_argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::syscall(SYS_execveat, exec_fd, "", cargv.data(), environ, AT_EMPTY_PATH);
    std::fprintf(stderr, "cryo-nsexec: exec %s: %s\n", exec_argv[0].c_str(), strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) DieErrno("waitpid");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}
