#include "daemon/criu/network_lock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/subprocess.h"

namespace cryo::criu {
absl::StatusOr<NftRun> RunNft(const std::vector<std::string>& args, pid_t netns_pid,
                              const std::string& nsexec, const std::string& script) {
  RunOptions ro;
  ro.argv = {FindExecutable("nft")};
  ro.argv.insert(ro.argv.end(), args.begin(), args.end());
  if (netns_pid > 0) {
    ro.argv.insert(ro.argv.begin(), {nsexec, "--target", std::to_string(netns_pid), "--"});
  }
  ro.input = script;
  ro.timeout = absl::Seconds(30);
  ro.merge_stderr = true;
  CRYO_ASSIGN_OR_RETURN(RunOutput r, Run(ro));
  return NftRun{r.exit.exited && r.exit.code == 0, std::move(r.out)};
}

void RemoveNetworkLock(const std::string& dump_log, pid_t container_init,
                       const std::string& nsexec) {
  auto log = fs::ReadFile(dump_log);
  if (!log.ok()) return;
  static const std::regex kTable("CRIU-[A-Za-z0-9_-]+");
  std::set<std::string> tables;
  for (std::sregex_iterator it(log->begin(), log->end(), kTable), end; it != end; ++it) {
    tables.insert(it->str());
  }
  if (FindExecutable("nft").empty()) return;
  for (const auto& t : tables) {
    auto r = RunNft({"delete", "table", "inet", t}, container_init, nsexec);
    if (r.ok() && r->ok) {
      CRYO_LOG(Info) << "removed CRIU network lock table " << t;
    }
  }
}

int LeaveTcpRepair(const std::vector<pid_t>& pids) {
  int left = 0;
  for (pid_t pid : pids) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) continue;  // gone: nothing of it to resume
    const std::string dir = absl::StrCat("/proc/", pid, "/fd");
    auto fds = fs::ListDir(dir);
    for (const auto& e : fds.ok() ? *fds : std::vector<fs::Entry>{}) {
      const std::string& name = e.name;
      int target = 0;
      if (!absl::SimpleAtoi(name, &target)) continue;
      char link[64] = {};
      const std::string path = absl::StrCat(dir, "/", name);
      if (::readlink(path.c_str(), link, sizeof(link) - 1) <= 0 ||
          std::string_view(link).rfind("socket:", 0) != 0) {
        continue;
      }
      const int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, target, 0));
      if (fd < 0) continue;
      int repair = 0;
      socklen_t len = sizeof(repair);
      int domain = 0;
      socklen_t dlen = sizeof(domain);
      // Only TCP sockets CRIU put in repair mode: TCP_REPAIR off on any other would send a
      // window probe and reset its address reuse.
      if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) == 0 &&
          (domain == AF_INET || domain == AF_INET6) &&
          ::getsockopt(fd, SOL_TCP, TCP_REPAIR, &repair, &len) == 0 && repair == 1) {
        int off = TCP_REPAIR_OFF;
        if (::setsockopt(fd, SOL_TCP, TCP_REPAIR, &off, sizeof(off)) == 0) {
          ++left;
        } else {
          CRYO_LOG(Warning) << "taking pid " << pid << "'s fd " << target
                            << " out of TCP repair mode: " << std::strerror(errno);
        }
      }
      ::close(fd);
    }
    ::close(pidfd);
  }
  if (left > 0) CRYO_LOG(Info) << left << " TCP connection(s) taken out of repair mode";
  return left;
}

namespace {

std::string Addr(int family, const std::array<uint8_t, 16>& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family, a.data(), buf, sizeof(buf));
  return buf;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionLock>> ConnectionLock::Take(
    const std::string& name, const std::vector<Connection>& conns, pid_t netns_pid,
    const std::string& nsexec) {
  if (FindExecutable("nft").empty()) {
    return absl::FailedPreconditionError(
        "nft is not on this node: the job's connections cannot be held while its members are "
        "restored");
  }
  const std::string table = absl::StrCat("cryo-lock-", name).substr(0, 60);
  std::string script = absl::StrCat("table inet ", table, " {\n");
  for (const char* hook : {"input", "output"}) {
    absl::StrAppend(&script, "  chain ", hook, " {\n    type filter hook ", hook,
                    " priority -150; policy accept;\n");
    for (const auto& c : conns) {
      const char* ip = c.family == AF_INET6 ? "ip6" : "ip";
      const std::string src = Addr(c.family, c.src), dst = Addr(c.family, c.dst);
      // Both directions: whichever member is restored first, nothing of it reaches the other.
      absl::StrAppend(&script, "    ", ip, " saddr ", src, " tcp sport ", c.sport, " ", ip,
                      " daddr ", dst, " tcp dport ", c.dport, " drop\n");
      absl::StrAppend(&script, "    ", ip, " saddr ", dst, " tcp sport ", c.dport, " ", ip,
                      " daddr ", src, " tcp dport ", c.sport, " drop\n");
    }
    absl::StrAppend(&script, "  }\n");
  }
  absl::StrAppend(&script, "}\n");
  CRYO_ASSIGN_OR_RETURN(NftRun r, RunNft({"-f", "-"}, netns_pid, nsexec, script));
  if (!r.ok) {
    return absl::InternalError(
        absl::StrCat("holding the job's connections (nft table ", table, "): ", r.output));
  }
  CRYO_LOG(Info) << "holding " << conns.size() << " TCP connection(s) of the job (nft table "
                 << table << ")";
  return std::unique_ptr<ConnectionLock>(new ConnectionLock(table, netns_pid, nsexec));
}

absl::Status ConnectionLock::Release() {
  if (!held_) return absl::OkStatus();
  held_ = false;
  CRYO_ASSIGN_OR_RETURN(NftRun r, RunNft({"delete", "table", "inet", table_}, netns_pid_, nsexec_));
  if (!r.ok)
    return absl::InternalError(absl::StrCat("releasing nft table ", table_, ": ", r.output));
  return absl::OkStatus();
}

ConnectionLock::~ConnectionLock() {
  if (absl::Status s = Release(); !s.ok()) CRYO_LOG(Warning) << s;
}

}  // namespace cryo::criu
