#include "lib/base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"

extern char** environ;

namespace cryo {

std::string ExitInfo::Describe() const {
  if (exited) return absl::StrCat("exit code ", code);
  return absl::StrCat("killed by signal ", code, " (", strsignal(code), ")");
}

absl::StatusOr<pid_t> Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return absl::InvalidArgumentError("empty argv");
  // Build everything before fork: only async-signal-safe calls after it.
  std::map<std::string, std::string> envmap;
  for (char** e = environ; *e; ++e) {
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

  int out = ::open(opts.stdout_path.empty() ? "/dev/null" : opts.stdout_path.c_str(),
                   O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out < 0) return ErrnoStatus(errno, absl::StrCat("open ", opts.stdout_path));
  int err = out;
  if (!opts.stderr_path.empty()) {
    err = ::open(opts.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (err < 0) {
      int e = errno;
      ::close(out);
      return ErrnoStatus(e, absl::StrCat("open ", opts.stderr_path));
    }
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");

  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(out);
    if (err != out) ::close(err);
    return ErrnoStatus(e, "fork");
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(devnull, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::fcntl(pipefd[1], F_SETFD, FD_CLOEXEC);
    if (!opts.cwd.empty() && ::chdir(opts.cwd.c_str()) != 0) {
      int e = errno;
      ssize_t u = ::write(pipefd[1], &e, sizeof(e));
      (void)u;
      ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    int e = errno;
    ssize_t u = ::write(pipefd[1], &e, sizeof(e));
    (void)u;
    ::_exit(127);
  }
  ::close(pipefd[1]);
  ::close(out);
  if (err != out) ::close(err);
  ::close(devnull);
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
  ExitInfo info;
  if (WIFEXITED(status)) {
    info.exited = true;
    info.code = WEXITSTATUS(status);
  } else {
    info.code = WTERMSIG(status);
  }
  return info;
}

absl::StatusOr<RunResult> RunCapture(const std::vector<std::string>& argv,
                                     absl::Duration timeout) {
  char tmpl[] = "/tmp/cryo-run-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return ErrnoStatus(errno, "mkstemp");
  ::close(fd);
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = tmpl;
  auto pid = Spawn(o);
  if (!pid.ok()) {
    ::unlink(tmpl);
    return pid.status();
  }
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(*pid, &status, WNOHANG);
    if (r == *pid) break;
    if (r < 0 && errno != EINTR) {
      ::unlink(tmpl);
      return ErrnoStatus(errno, "waitpid");
    }
    if (absl::Now() > deadline) {
      ::kill(-*pid, SIGKILL);
      ::waitpid(*pid, &status, 0);
      ::unlink(tmpl);
      return absl::DeadlineExceededError(
          absl::StrCat(argv[0], " did not finish within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  RunResult res;
  res.exit.exited = WIFEXITED(status);
  res.exit.code = res.exit.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  auto text = fs::ReadFile(tmpl);
  ::unlink(tmpl);
  if (text.ok()) res.output = *text;
  return res;
}

std::string FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = ::getenv("PATH");
  std::vector<std::string> dirs = absl::StrSplit(path ? path : "", ':', absl::SkipEmpty());
  for (const char* d : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin"}) {
    dirs.push_back(d);
  }
  for (const auto& d : dirs) {
    std::string p = fs::Join(d, name);
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace cryo
