#include "lib/base/proc.h"

#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"

namespace cryo::proc {
namespace {
constexpr uint64_t kPfKthread = 0x00200000;  // PF_KTHREAD in <linux/sched.h>
}

absl::StatusOr<ProcInfo> ProcReader::Read(pid_t pid) const {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
  auto stat = fs::ReadFile(absl::StrCat(root_, "/", pid, "/stat"));
  if (!stat.ok()) return absl::NotFoundError(absl::StrCat("no process with pid ", pid));
  // comm is in parentheses and may itself contain spaces and ')'.
  const std::string& s = *stat;
  auto open = s.find('('), close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 > s.size()) {
    return absl::InternalError(absl::StrCat("cannot parse /proc/", pid, "/stat"));
  }
  ProcInfo info;
  info.pid = pid;
  info.comm = s.substr(open + 1, close - open - 1);
  std::vector<std::string> f = absl::StrSplit(s.substr(close + 2), ' ');
  // f[0] is field 3 (state) of proc(5).
  if (f.size() < 20) return absl::InternalError(absl::StrCat("short /proc/", pid, "/stat"));
  info.state = f[0].empty() ? '?' : f[0][0];
  int64_t v;
  if (absl::SimpleAtoi(f[1], &v)) info.ppid = v;
  if (absl::SimpleAtoi(f[2], &v)) info.pgid = v;
  if (absl::SimpleAtoi(f[3], &v)) info.sid = v;
  // The start time tells a pid from its reuse: a stat line without it is not trusted.
  if (!absl::SimpleAtoi(f[6], &info.flags) || !absl::SimpleAtoi(f[19], &info.start_time)) {
    return absl::InternalError(absl::StrCat("cannot parse /proc/", pid, "/stat"));
  }
  info.kernel_thread = (info.flags & kPfKthread) != 0;
  return info;
}

std::vector<pid_t> ProcReader::AllPids() const {
  std::vector<pid_t> out;
  auto entries = fs::ListDir(root_);
  if (!entries.ok()) return out;
  for (const auto& e : *entries) {
    int v;
    if (absl::SimpleAtoi(e.name, &v) && v > 0) out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<ProcInfo>> ProcReader::Tree(pid_t root) const {
  auto r = Read(root);
  if (!r.ok()) return r.status();
  std::map<pid_t, std::vector<ProcInfo>> children;
  for (pid_t p : AllPids()) {
    auto i = Read(p);
    if (i.ok()) children[i->ppid].push_back(*i);
  }
  std::vector<ProcInfo> out{*r};
  std::deque<pid_t> todo{root};
  while (!todo.empty()) {
    pid_t p = todo.front();
    todo.pop_front();
    for (const auto& c : children[p]) {
      out.push_back(c);
      todo.push_back(c.pid);
    }
  }
  return out;
}

std::vector<pid_t> ProcReader::Threads(pid_t pid) const {
  std::vector<pid_t> out;
  auto entries = fs::ListDir(absl::StrCat(root_, "/", pid, "/task"));
  if (!entries.ok()) return out;
  for (const auto& e : *entries) {
    int v;
    if (absl::SimpleAtoi(e.name, &v)) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> ProcReader::Cmdline(pid_t pid) const {
  auto s = fs::ReadFile(absl::StrCat(root_, "/", pid, "/cmdline"));
  if (!s.ok() || s->empty()) return {};
  std::string v = *s;
  if (v.back() == '\0') v.pop_back();
  return absl::StrSplit(v, '\0');
}

uint64_t ProcReader::MemoryBytes(pid_t pid) const {
  auto s = fs::ReadFile(absl::StrCat(root_, "/", pid, "/smaps_rollup"));
  if (!s.ok()) return 0;
  uint64_t total = 0;
  for (absl::string_view line : absl::StrSplit(*s, '\n')) {
    // Anonymous pages plus shared ones (shmem is dumped too); file-backed clean pages are not.
    for (absl::string_view key : {"Anonymous:", "Shared_Dirty:"}) {
      if (absl::ConsumePrefix(&line, key)) {
        uint64_t kb = 0;
        std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
        if (!parts.empty() && absl::SimpleAtoi(parts[0], &kb)) total += kb * 1024;
      }
    }
  }
  return total;
}

bool ProcReader::Alive(pid_t pid, uint64_t start_time) const {
  auto i = Read(pid);
  if (!i.ok()) return false;
  return start_time == 0 || i->start_time == start_time;
}

bool ProcReader::Stopped(pid_t pid) const {
  auto i = Read(pid);
  return i.ok() && (i->state == 'T' || i->state == 't' || i->state == 'Z');
}

std::vector<pid_t> ProcReader::Children(pid_t pid) const {
  std::vector<pid_t> out;
  for (pid_t p : AllPids()) {
    auto i = Read(p);
    if (i.ok() && i->ppid == pid) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

pid_t ProcReader::Tgid(pid_t pid) const {
  auto s = fs::ReadFile(absl::StrCat(root_, "/", pid, "/status"));
  if (!s.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*s, '\n')) {
    if (!absl::ConsumePrefix(&line, "Tgid:")) continue;
    int v = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &v)) return v;
  }
  return 0;
}

pid_t ProcReader::NsPid(pid_t pid) const {
  auto s = fs::ReadFile(absl::StrCat(root_, "/", pid, "/status"));
  if (!s.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*s, '\n')) {
    if (!absl::ConsumePrefix(&line, "NSpid:")) continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int v = 0;
    if (!parts.empty() && absl::SimpleAtoi(parts.back(), &v)) return v;
  }
  return 0;
}

std::string ProcReader::Link(pid_t pid, const std::string& rel) const {
  std::string path = absl::StrCat(root_, "/", pid, "/", rel);
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, n) : std::string();
}

std::vector<std::string> ProcReader::Environ(pid_t pid) const {
  auto s = fs::ReadFile(absl::StrCat(root_, "/", pid, "/environ"));
  if (!s.ok()) return {};
  return absl::StrSplit(*s, '\0', absl::SkipEmpty());
}

absl::StatusOr<std::map<std::string, std::string>> ProcReader::EnvironMap(pid_t pid) const {
  CRYO_ASSIGN_OR_RETURN(std::string text, fs::ReadFile(PidPath(pid, "environ")));
  std::map<std::string, std::string> env;
  for (absl::string_view kv : absl::StrSplit(text, '\0', absl::SkipEmpty())) {
    size_t eq = kv.find('=');
    if (eq == absl::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

bool ProcReader::Exists(pid_t pid) const { return fs::Exists(absl::StrCat(root_, "/", pid)); }

std::string ProcReader::PidPath(pid_t pid, absl::string_view rel) const {
  return absl::StrCat(root_, "/", pid, "/", rel);
}

std::vector<std::string> ProcReader::FdTargets(pid_t pid) const {
  std::vector<std::string> out;
  const std::string dir = PidPath(pid, "fd");
  for (const std::string& name : fs::ListNames(dir)) {
    std::string target = Link(pid, absl::StrCat("fd/", name));
    if (!target.empty()) out.push_back(std::move(target));
  }
  return out;
}

std::vector<std::string> ProcReader::MappedPaths(pid_t pid) const {
  std::vector<std::string> out;
  auto text = fs::ReadFile(PidPath(pid, "maps"));
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    // address perms offset dev inode pathname: the path starts at the first '/'.
    size_t slash = line.find('/');
    if (slash == absl::string_view::npos) continue;
    out.emplace_back(line.substr(slash));
  }
  return out;
}

std::string KernelRelease() {
  struct utsname u;
  return ::uname(&u) == 0 ? u.release : "unknown";
}

std::string MachineArch() {
  struct utsname u;
  return ::uname(&u) == 0 ? u.machine : "unknown";
}

uint64_t ProcReader::UptimeTicks() const {
  auto text = fs::ReadFile(absl::StrCat(root_, "/uptime"));
  if (!text.ok()) return 0;
  double seconds = 0;
  const std::vector<absl::string_view> w = absl::StrSplit(*text, ' ');
  if (w.empty() || !absl::SimpleAtod(w[0], &seconds) || seconds < 0) return 0;
  return static_cast<uint64_t>(seconds * static_cast<double>(::sysconf(_SC_CLK_TCK)));
}

void WriteToStderrOf(int pid, const std::string& line) {
  if (pid <= 0) return;
  const int fd =
      ::open(absl::StrCat("/proc/", pid, "/fd/2").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  const std::string l = line + "\n";
  (void)!::write(fd, l.data(), l.size());
  ::close(fd);
}

}  // namespace cryo::proc
