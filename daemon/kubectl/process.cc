#include "daemon/kubectl/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace cryo::kubectl {
namespace {

// Input goes through an anonymous file, not a pipe: no SIGPIPE when the child does not read
// it, and no deadlock between writing stdin and draining stdout.
int InputFd(const std::string& input) {
  int fd = ::memfd_create("kubectl-stdin", MFD_CLOEXEC);
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

}  // namespace

std::string FindInPath(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string p = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (executable(p)) return p;
  }
  return "";
}

absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::string& input,
                                         const std::vector<std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  const std::string exe = FindInPath(argv[0]);
  if (exe.empty()) return absl::NotFoundError(absl::StrCat(argv[0], ": not found in PATH"));

  // Everything the child needs is built before fork: after it, only exec.
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    vars[kv.substr(0, kv.find('='))] = kv;
  }
  for (const auto& kv : env) vars[kv.substr(0, kv.find('='))] = kv;
  std::vector<std::string> env_strings;
  for (auto& [k, kv] : vars) env_strings.push_back(kv);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  int in = InputFd(input);
  if (in < 0)
    return absl::InternalError(absl::StrCat("stdin for ", argv[0], ": ", strerror(errno)));
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in);
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(in);
    ::close(out[0]);
    ::close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(exe.c_str(), args.data(), envp.data());
    ::_exit(127);
  }
  ::close(in);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  ProcessResult r;
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
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
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace cryo::kubectl
