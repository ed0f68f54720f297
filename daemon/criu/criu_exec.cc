#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "daemon/criu/criu.h"
#include "lib/base/fd.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"
#include "lib/base/subprocess.h"

namespace cryo::criu {
namespace {

std::string LastErrors(absl::string_view log, int max_lines) {
  std::vector<absl::string_view> errs;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "Error (") || absl::StartsWith(line, "Error")) {
      errs.push_back(line);
    }
  }
  if (errs.size() > static_cast<size_t>(max_lines)) {
    errs.erase(errs.begin(), errs.end() - max_lines);
  }
  std::vector<std::string> cleaned;
  for (auto l : errs) {
    // Drop CRIU's "(00.123456) Error (criu/x.c:12): " prefix; the message is what helps.
    auto pos = l.find("): ");
    if (pos != absl::string_view::npos && pos < 80) l.remove_prefix(pos + 3);
    cleaned.emplace_back(l);
  }
  return absl::StrJoin(cleaned, "; ");
}

class CriuExec final : public Criu {
 public:
  CriuExec(CriuConfig cfg, std::string path, std::string version, std::string check_error)
      : cfg_(std::move(cfg)),
        path_(std::move(path)),
        version_(std::move(version)),
        check_error_(std::move(check_error)) {}

  std::string version() const override { return version_; }
  std::string path() const override { return path_; }
  std::string check_error() const override { return check_error_; }
  absl::Status CheckUsable() const override {
    // A package upgrade or a cleanup may take the binary away under a running cryod.
    if (::access(path_.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("CRIU at ", path_, " cannot be run: ", std::strerror(errno)));
    }
    return Criu::CheckUsable();
  }

  absl::Status Dump(const DumpOptions& o, const std::function<void(pid_t)>& started) override {
    Paths p = PathsFor(o.images_dir, o.work_dir, o.in_container);
    std::vector<std::string> argv = Prefix(o.in_container, o.images_dir, o.work_dir, false);
    argv.insert(argv.end(), {path_, "dump", "--tree", std::to_string(o.pid), "--images-dir",
                             p.images, "--work-dir", p.work, "--log-file", "dump.log",
                             absl::StrCat("-v", cfg_.log_level), "--file-locks"});
    argv.push_back(o.leave_running ? "--leave-running" : "--leave-stopped");
    const std::vector<std::string> job = o.job.DumpArgs();
    argv.insert(argv.end(), job.begin(), job.end());
    argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
    return RunCriu("dump", argv, o.work_dir, "dump.log", o.env, started);
  }

  absl::StatusOr<pid_t> Restore(const RestoreOptions& o,
                                const std::function<void(pid_t)>& started) override {
    std::string pidfile = fs::Join(o.work_dir, "restore.pid");
    ::unlink(pidfile.c_str());
    Paths p = PathsFor(o.images_dir, o.work_dir, o.in_container);
    std::vector<std::string> argv = Prefix(o.in_container, o.images_dir, o.work_dir, true);
    argv.insert(argv.end(),
                {path_, "restore", "--images-dir", p.images, "--work-dir", p.work, "--log-file",
                 "restore.log", absl::StrCat("-v", cfg_.log_level), "--restore-detached",
                 "--pidfile", fs::Join(p.work, "restore.pid"), "--file-locks"});
    if (o.in_container) {
      // The new container's runtime made its cgroups; cryo-nsexec already put CRIU in them.
      argv.push_back("--manage-cgroups=ignore");
    }
    const std::vector<std::string> job = o.job.RestoreArgs(o.network_lock_held);
    argv.insert(argv.end(), job.begin(), job.end());
    argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
    CRYO_RETURN_IF_ERROR(
        RunCriu("restore", argv, o.work_dir, "restore.log", o.env, started, o.deadline, o.stop));
    auto text = fs::ReadFile(pidfile);
    int pid = 0;
    if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) || pid <= 0) {
      return absl::InternalError(
          absl::StrCat("criu restore succeeded but wrote no pid to ", pidfile));
    }
    return pid;
  }

 private:
  // Descriptor numbers cryo-nsexec gives the image and work directories inside the container.
  static constexpr int kImagesFd = 3;
  static constexpr int kWorkFd = 4;

  struct Paths {
    std::string images;
    std::string work;
  };

  // Inside a container, CRIU reaches the host's directories through inherited descriptors.
  static Paths PathsFor(const std::string& images, const std::string& work,
                        const std::optional<InContainer>& c) {
    if (!c) return {images, work};
    return {absl::StrCat("{fd:", kImagesFd, "}"), absl::StrCat("{fd:", kWorkFd, "}")};
  }

  // cryo-nsexec and its options, or nothing in process mode.
  static std::vector<std::string> Prefix(const std::optional<InContainer>& c,
                                         const std::string& images, const std::string& work,
                                         bool restore) {
    if (!c) return {};
    std::vector<std::string> argv = {c->nsexec, "--target", std::to_string(c->init_pid)};
    if (restore) argv.insert(argv.end(), {"--join-cgroups", "--far-pid"});
    if (restore && c->last_pid > 0) {
      argv.insert(argv.end(), {"--last-pid", std::to_string(c->last_pid)});
    }
    argv.insert(argv.end(), {"--fd", absl::StrCat(kImagesFd, "=", images), "--fd",
                             absl::StrCat(kWorkFd, "=", work)});
    for (const auto& [n, path] : c->fds) {
      argv.insert(argv.end(), {"--fd", absl::StrCat(n, "=", path)});
    }
    argv.push_back("--");
    return argv;
  }

  absl::Status RunCriu(absl::string_view action, const std::vector<std::string>& argv,
                       const std::string& work_dir, const std::string& log_name,
                       const std::vector<std::string>& env,
                       const std::function<void(pid_t)>& started,
                       absl::Time deadline = absl::InfiniteFuture(),
                       const std::function<bool()>& stop = nullptr) {
    CRYO_RETURN_IF_ERROR(fs::MakeDirs(work_dir, 0700));
    SpawnOptions so;
    so.argv = argv;
    so.env = env;
    const bool fault_set = ::getenv("CRIU_FAULT") != nullptr ||
                           std::any_of(env.begin(), env.end(), [](const std::string& e) {
                             return absl::StartsWith(e, "CRIU_FAULT=");
                           });
    if (!cfg_.hw_breakpoints && !fault_set) so.env.push_back("CRIU_FAULT=130");
    so.stdout_path = fs::Join(work_dir, absl::StrCat(action, ".out"));
    CRYO_LOG(Debug) << "running " << absl::StrJoin(argv, " ");
    CRYO_ASSIGN_OR_RETURN(pid_t pid, Spawn(so));
    if (started) started(pid);
    if (deadline != absl::InfiniteFuture() || stop) {
      CRYO_RETURN_IF_ERROR(WaitOrEnd(pid, action, work_dir, log_name, deadline, stop));
    }
    CRYO_ASSIGN_OR_RETURN(ExitInfo ei, WaitChild(pid));
    if (ei.exited && ei.code == 0) return absl::OkStatus();
    std::string log_path = fs::Join(work_dir, log_name);
    auto log = fs::ReadFile(log_path);
    std::string text = log.ok() ? *log : "";
    if (auto out = fs::ReadFile(so.stdout_path); out.ok()) text += *out;
    return StatusFromLog(absl::StrCat("criu ", action), text, log_path, ei.Describe());
  }

  // Waits until CRIU (pid) has exited, leaving it to be reaped; past `deadline` or when `stop`
  // says so, kills it and every process below it (a half-restored tree, cryo-nsexec's child),
  // reaps it and says why.
  static absl::Status WaitOrEnd(pid_t pid, absl::string_view action, const std::string& work_dir,
                                const std::string& log_name, absl::Time deadline,
                                const std::function<bool()>& stop) {
    bool late = false;
    // Woken by CRIU's exit itself (a pidfd polls readable then), so that a restore is not
    // longer by up to a tick; the deadline and `stop` are still looked at every 20 ms.
    const UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    for (;;) {
      siginfo_t si{};
      if (::waitid(P_PID, pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
        return absl::OkStatus();
      }
      late = absl::Now() > deadline;
      if (late || (stop && stop())) break;
      if (pidfd.ok()) {
        pollfd p{pidfd.get(), POLLIN, 0};
        (void)::poll(&p, 1, 20);
      } else {
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
    // Children first, deepest last read: a stopped tree cannot fork meanwhile once CRIU is
    // frozen, so stop CRIU, collect, then kill everything.
    ::kill(pid, SIGSTOP);
    proc::ProcReader proc;
    auto tree = proc.Tree(pid);
    if (tree.ok()) {
      for (auto it = tree->rbegin(); it != tree->rend(); ++it) ::kill(it->pid, SIGKILL);
    }
    ::kill(pid, SIGKILL);
    (void)WaitChild(pid);  // reaped only: the error the caller returns is the timeout
    const std::string why = absl::StrCat(
        "criu ", action, " did not finish ",
        late ? "by the caller's deadline" : "before it was cancelled",
        "; it and the processes it had restored were killed, nothing was left running (log: ",
        fs::Join(work_dir, log_name), ")");
    return late ? absl::DeadlineExceededError(why) : absl::CancelledError(why);
  }

  CriuConfig cfg_;
  std::string path_;
  std::string version_;
  std::string check_error_;
};

// "Version: 4.1.1" -> {4,1,1}
bool ParseVersion(absl::string_view s, int* major, int* minor) {
  std::vector<std::string> p = absl::StrSplit(s, '.');
  return p.size() >= 2 && absl::SimpleAtoi(p[0], major) && absl::SimpleAtoi(p[1], minor);
}

}  // namespace

std::optional<int> CompareVersions(absl::string_view a, absl::string_view b) {
  std::vector<std::string> pa = absl::StrSplit(a, '.'), pb = absl::StrSplit(b, '.');
  for (size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {
    int x = 0, y = 0;
    if (i < pa.size() && !absl::SimpleAtoi(pa[i], &x)) return std::nullopt;
    if (i < pb.size() && !absl::SimpleAtoi(pb[i], &y)) return std::nullopt;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

absl::Status StatusFromLog(absl::string_view action, absl::string_view log,
                           absl::string_view log_path, absl::string_view exit_desc) {
  std::string errs = LastErrors(log, 3);
  std::string msg = absl::StrCat(action, " failed (", exit_desc, ")",
                                 errs.empty() ? "" : absl::StrCat(": ", errs), "; log: ", log_path);
  if (absl::StrContains(log, "No space left on device") ||
      absl::StrContains(log, "Disk quota exceeded")) {
    return absl::ResourceExhaustedError(absl::StrCat("checkpoint store is full: ", msg));
  }
  if (absl::StrContains(log, "Read-only file system")) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint store is read-only: ", msg));
  }
  // The tree changed under CRIU: a task exited before or while it was seized.
  if (absl::StrContains(log, "No such process") || absl::StrContains(log, "Can't seize") ||
      absl::StrContains(log, "Unable to seize") || absl::StrContains(log, "is a zombie") ||
      absl::StrContains(log, "Unexpected state")) {
    return absl::AbortedError(
        absl::StrCat("the process tree changed during the checkpoint "
                     "(a process exited?): ",
                     msg));
  }
  // CRIU's advice names its own flags; a cryo user sets cryo's option instead.
  struct Hint {
    const char* in_log;
    const char* what;
    const char* option;  // cryo's name: --flag, criu_<key>, <prefix>/criu-<key>
  };
  static const Hint kHints[] = {
      {"increase limit", "the job holds a deleted but open file larger than the ghost limit",
       "ghost-limit"},
      {"Use link-remap option", "the job holds an open file unlinked while another link remains",
       "link-remap"},
      {"Consider using --ext-unix-sk", "the job has a unix socket connected outside it",
       "ext-unix-sk"},
      {"Consider using the --ext-unix-sk", "the checkpoint holds a unix socket connected outside",
       "ext-unix-sk"},
      {"In-flight connections can be ignored", "a TCP connection waits in a listener's queue",
       "skip-in-flight"},
      // Before the general TCP hint: a log that asks for --tcp-close may carry both.
      {"Need to set the --tcp-close", "the checkpoint was taken with TCP connections to close",
       "tcp-close"},
      {"Connected TCP socket, consider using", "the job has established TCP connections",
       "tcp-established (or tcp-close)"},
  };
  for (const Hint& h : kHints) {
    if (!absl::StrContains(log, h.in_log)) continue;
    std::string key(h.option);
    key = key.substr(0, key.find(' '));
    std::string underscored = key;
    for (char& c : underscored) c = c == '-' ? '_' : c;
    return absl::FailedPreconditionError(
        absl::StrCat(h.what, ": allow it with cryo's ", h.option, " option (cryo checkpoint --",
                     key, ", node config criu_", underscored, ", pod annotation cryo.dev/criu-",
                     key, "); see docs/operations.md, CRIU options. ", msg));
  }
  if (absl::StrContains(log, "Can't fork for") || absl::StrContains(log, "File exists") ||
      absl::StrContains(log, "PID already in use") || absl::StrContains(log, "ns_last_pid")) {
    return absl::FailedPreconditionError(
        absl::StrCat("a pid of the checkpoint is in use on this node: ", msg));
  }
  return absl::InternalError(msg);
}

absl::StatusOr<std::unique_ptr<Criu>> CreateCriuExec(const CriuConfig& cfg) {
  std::string path = FindExecutable(cfg.path.empty() ? "criu" : cfg.path);
  if (path.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CRIU not found (", cfg.path.empty() ? "searched PATH" : cfg.path,
                     "); install CRIU >= 4.1 (scripts/setup.sh builds 4.1.1)"));
  }
  CRYO_ASSIGN_OR_RETURN(RunResult v, RunCapture({path, "--version"}));
  std::string version;
  for (absl::string_view line : absl::StrSplit(v.output, '\n')) {
    if (absl::ConsumePrefix(&line, "Version:")) {
      version = std::string(absl::StripAsciiWhitespace(line));
    }
  }
  int major = 0, minor = 0;
  if (!ParseVersion(version, &major, &minor)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " --version printed no version: ", v.output));
  }
  if (major < 4 || (major == 4 && minor < 1)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is CRIU ", version,
                     "; cryo needs >= 4.1 (older CRIU cannot handle the vDSO of kernels >= 6.13)"));
  }
  std::string check_error;
  auto check = RunCapture({path, "check"}, absl::Seconds(60));
  if (!check.ok()) {
    check_error = check.status().ToString();
  } else if (!(check->exit.exited && check->exit.code == 0)) {
    check_error = std::string(absl::StripAsciiWhitespace(check->output));
  }
  return std::unique_ptr<Criu>(new CriuExec(cfg, path, version, check_error));
}

}  // namespace cryo::criu
