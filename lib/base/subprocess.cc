#include "lib/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"

extern char** environ;

namespace cryo {
namespace {

int OpenAppend(const std::string& path) {
  return ::open(path.empty() ? "/dev/null" : path.c_str(),
                O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

// Input goes through an anonymous file, not a pipe: no SIGPIPE when the child does not read
// it, and no deadlock between writing stdin and draining stdout.
int InputFd(const std::string& input) {
  int fd = ::memfd_create("cryo-stdin", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < input.size()) {
    ssize_t n = ::write(fd, input.data() + off, input.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return -1;
    }
    off += n;
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

ExitInfo FromWaitStatus(int status) {
  ExitInfo info;
  if (WIFEXITED(status)) {
    info.exited = true;
    info.code = WEXITSTATUS(status);
  } else {
    info.code = WTERMSIG(status);
  }
  return info;
}

}  // namespace

std::string ExitInfo::Describe() const {
  if (exited) return absl::StrCat("exit code ", code);
  return absl::StrCat("killed by signal ", code, " (", strsignal(code), ")");
}

absl::StatusOr<pid_t> Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return absl::InvalidArgumentError("empty argv");
  const std::string exe = FindExecutable(opts.argv[0]);
  if (exe.empty()) {
    return absl::NotFoundError(absl::StrCat(opts.argv[0], ": no such executable"));
  }
  // Build everything before fork: only async-signal-safe calls after it.
  std::map<std::string, std::string> envmap;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) envmap[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& kv : opts.env) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) envmap[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::vector<std::string> envs;
  for (const auto& [k, v] : envmap) envs.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> argv, envp;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  // Descriptors we open here are closed here; the caller's are the caller's.
  std::vector<int> ours;
  auto close_ours = [&] {
    for (int fd : ours) ::close(fd);
  };
  int in = opts.stdin_fd;
  if (in < 0) {
    in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ours.push_back(in);
  }
  int out = opts.stdout_fd;
  if (out < 0) {
    out = OpenAppend(opts.stdout_path);
    if (out < 0) {
      int e = errno;
      close_ours();
      return ErrnoStatus(e, absl::StrCat("open ", opts.stdout_path));
    }
    ours.push_back(out);
  }
  int err = opts.stderr_fd;
  if (err < 0) {
    if (opts.stderr_path.empty()) {
      err = out;
    } else {
      err = OpenAppend(opts.stderr_path);
      if (err < 0) {
        int e = errno;
        close_ours();
        return ErrnoStatus(e, absl::StrCat("open ", opts.stderr_path));
      }
      ours.push_back(err);
    }
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    int e = errno;
    close_ours();
    return ErrnoStatus(e, "pipe");
  }
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    close_ours();
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return ErrnoStatus(e, "fork");
  }
  if (pid == 0) {
    auto fail = [&](int e) {
      ssize_t u = ::write(pipefd[1], &e, sizeof(e));
      (void)u;
      ::_exit(127);
    };
    if (opts.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
    }
    if (opts.new_session) {
      ::setsid();
    } else if (opts.own_process_group) {
      ::setpgid(0, 0);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    // dup2 clears close-on-exec on the copies; the originals (O_CLOEXEC) go with exec.
    if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) fail(errno);
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    if (!opts.cwd.empty() && ::chdir(opts.cwd.c_str()) != 0) fail(errno);
    ::execve(exe.c_str(), argv.data(), envp.data());
    fail(errno);
  }
  ::close(pipefd[1]);
  close_ours();
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(pipefd[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (n == sizeof(child_errno)) {
    ::waitpid(pid, nullptr, 0);
    return ErrnoStatus(child_errno, absl::StrCat("exec ", opts.argv[0]));
  }
  return pid;
}

absl::StatusOr<ExitInfo> WaitChild(pid_t pid) {
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) break;
    if (r < 0 && errno == EINTR) continue;
    return ErrnoStatus(errno, absl::StrCat("waitpid ", pid));
  }
  return FromWaitStatus(status);
}

absl::StatusOr<RunOutput> Run(const RunOptions& opts) {
  int in = InputFd(opts.input);
  if (in < 0) return ErrnoStatus(errno, "stdin memfd");
  int out[2], err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(in);
    return ErrnoStatus(e, "pipe");
  }
  if (!opts.merge_stderr && ::pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(in);
    ::close(out[0]);
    ::close(out[1]);
    return ErrnoStatus(e, "pipe");
  }
  SpawnOptions so;
  so.argv = opts.argv;
  so.env = opts.env;
  so.stdin_fd = in;
  so.stdout_fd = out[1];
  so.stderr_fd = opts.merge_stderr ? out[1] : err[1];
  absl::StatusOr<pid_t> pid = Spawn(so);
  ::close(in);
  ::close(out[1]);
  if (err[1] >= 0) ::close(err[1]);
  if (!pid.ok()) {
    ::close(out[0]);
    if (err[0] >= 0) ::close(err[0]);
    return pid.status();
  }
  RunOutput r;
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = err[0] >= 0 ? 2 : 1;
  const absl::Time deadline = opts.timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                                       : absl::Now() + opts.timeout;
  bool timed_out = false;
  char buf[65536];
  while (open_fds > 0) {
    int wait_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      wait_ms =
          static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    }
    int ready = ::poll(p, 2, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0 && absl::Now() >= deadline) {
      timed_out = true;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || p[i].revents == 0) continue;
      ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        ::close(p[i].fd);
        p[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& x : p) {
    if (x.fd >= 0) ::close(x.fd);
  }
  if (timed_out) ::kill(-*pid, SIGKILL);
  absl::StatusOr<ExitInfo> exit = WaitChild(*pid);
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(opts.argv[0], " did not finish within ", absl::FormatDuration(opts.timeout)));
  }
  if (!exit.ok()) return exit.status();
  r.exit = *exit;
  return r;
}

absl::StatusOr<RunResult> RunCapture(const std::vector<std::string>& argv, absl::Duration timeout) {
  RunOptions o;
  o.argv = argv;
  o.timeout = timeout;
  o.merge_stderr = true;
  CRYO_ASSIGN_OR_RETURN(RunOutput out, Run(o));
  return RunResult{out.exit, std::move(out.out)};
}

std::string FindExecutable(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = ::getenv("PATH");
  std::vector<std::string> dirs = absl::StrSplit(path ? path : "", ':', absl::SkipEmpty());
  for (const char* d : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin"}) {
    dirs.push_back(d);
  }
  for (const auto& d : dirs) {
    std::string p = fs::Join(d, name);
    if (executable(p)) return p;
  }
  return "";
}

}  // namespace cryo
