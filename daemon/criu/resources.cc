#include "daemon/criu/resources.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"

namespace cryo::criu {
namespace {

constexpr uint32_t kMaxGhostEntry = 4096;
constexpr uint64_t kCapNetAdmin = uint64_t{1} << 12;
constexpr uint64_t kCapNetRaw = uint64_t{1} << 13;
// fd_types (CRIU's fdinfo.proto).
constexpr uint32_t kPacketSk = 10, kNetlinkSk = 13, kTunFile = 15;

// The names /proc/<pid>/limits gives the RLIMIT_* resources, in their order.
constexpr const char* kLimitNames[] = {
    "RLIMIT_CPU",      "RLIMIT_FSIZE", "RLIMIT_DATA",   "RLIMIT_STACK",
    "RLIMIT_CORE",     "RLIMIT_RSS",   "RLIMIT_NPROC",  "RLIMIT_NOFILE",
    "RLIMIT_MEMLOCK",  "RLIMIT_AS",    "RLIMIT_LOCKS",  "RLIMIT_SIGPENDING",
    "RLIMIT_MSGQUEUE", "RLIMIT_NICE",  "RLIMIT_RTPRIO", "RLIMIT_RTTIME"};

std::string LimitName(size_t i) {
  return i < std::size(kLimitNames) ? kLimitNames[i] : absl::StrCat("resource ", i);
}

std::string LimitValue(uint64_t v) { return v == RLIM_INFINITY ? "unlimited" : absl::StrCat(v); }

// Netlink families whose multicast groups any process may join (the kernel sets
// NL_CFG_F_NONROOT_RECV for them); the others need CAP_NET_ADMIN.
bool AnyoneMayListen(uint32_t protocol) {
  return protocol == NETLINK_ROUTE || protocol == NETLINK_SELINUX ||
         protocol == NETLINK_KOBJECT_UEVENT || protocol == NETLINK_GENERIC;
}

absl::Status CheckLimits(const std::string& images_dir, const std::string& name,
                         const CredentialCeiling& c, absl::string_view whose) {
  if (c.rlimit_max.empty()) return absl::OkStatus();
  CRYO_ASSIGN_OR_RETURN(::criu::core_entry core, ReadCoreImage(images_dir, name));
  if (!core.has_tc() || !core.tc().has_rlimits()) return absl::OkStatus();
  const auto& rl = core.tc().rlimits().rlimits();
  for (int i = 0; i < rl.size() && static_cast<size_t>(i) < c.rlimit_max.size(); ++i) {
    const uint64_t max = rl.Get(i).max();
    if (max > c.rlimit_max[static_cast<size_t>(i)]) {
      const std::string pid(absl::StripSuffix(absl::StripPrefix(name, "core-"), ".img"));
      return absl::PermissionDeniedError(
          absl::StrCat("checkpoint would restore process ", pid, " with a hard ",
                       LimitName(static_cast<size_t>(i)), " of ", LimitValue(max), ", above the ",
                       LimitValue(c.rlimit_max[static_cast<size_t>(i)]), " that ", whose,
                       " has; refused before anything started"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFiles(const std::string& images_dir, const CredentialCeiling& c,
                        absl::string_view whose) {
  CRYO_ASSIGN_OR_RETURN(
      auto entries, ReadImageEntries(images_dir, "files.img", kFilesMagic, true, kMaxFilesImage));
  const uint64_t caps = c.caps.eff;
  auto deny = [&](uint32_t id, absl::string_view what, absl::string_view cap) {
    return absl::PermissionDeniedError(absl::StrCat("checkpoint would restore file ", id, ", ",
                                                    what, ", which needs ", cap, " that ", whose,
                                                    " does not have; refused before anything "
                                                    "started"));
  };
  for (const std::string& raw : entries) {
    ::criu::file_entry f;
    if (!f.ParseFromString(raw)) {
      return absl::InvalidArgumentError("CRIU image files.img: an entry does not parse");
    }
    if (f.type() == kPacketSk && !(caps & kCapNetRaw)) {
      return deny(f.id(), "a packet socket", "CAP_NET_RAW");
    }
    if (f.type() == kInetSk && f.isk().type() == SOCK_RAW && !(caps & kCapNetRaw)) {
      return deny(f.id(), absl::StrCat("a raw IP socket (protocol ", f.isk().proto(), ")"),
                  "CAP_NET_RAW");
    }
    if (f.type() == kNetlinkSk && f.nlsk().groups_size() > 0 &&
        !AnyoneMayListen(f.nlsk().protocol()) && !(caps & kCapNetAdmin)) {
      return deny(
          f.id(),
          absl::StrCat("a netlink socket of family ", f.nlsk().protocol(), " in multicast groups"),
          "CAP_NET_ADMIN");
    }
    if (f.type() == kTunFile && !(caps & kCapNetAdmin)) {
      return deny(f.id(), "a tun/tap device", "CAP_NET_ADMIN");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGhost(const std::string& images_dir, const std::string& name) {
  CRYO_ASSIGN_OR_RETURN(std::string raw, ReadFirstImageEntry(images_dir, name, kGhostFileMagic,
                                                             true, kMaxGhostEntry));
  ::criu::ghost_file_entry g;
  if (!g.ParseFromString(raw)) {
    return absl::InvalidArgumentError(absl::StrCat("CRIU image ", name, " does not parse"));
  }
  if (S_ISCHR(g.mode()) || S_ISBLK(g.mode())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "image ", name, " would have CRIU create a ", S_ISCHR(g.mode()) ? "character" : "block",
        " device node (", major(g.rdev()), ":", minor(g.rdev()),
        ") for the job: device access comes from the pod's spec, never from a checkpoint; "
        "refused before anything started"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> ParseProcLimits(absl::string_view text) {
  // "%-25s %-20s %-20s %-10s": the name, the soft limit, the hard limit, the units.
  std::vector<uint64_t> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "Limit ")) continue;
    if (line.size() < 48) return absl::InvalidArgumentError(absl::StrCat("limits line: ", line));
    std::vector<absl::string_view> w =
        absl::StrSplit(line.substr(47), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint64_t v = 0;
    if (w.empty()) return absl::InvalidArgumentError(absl::StrCat("limits line: ", line));
    if (w[0] == "unlimited") {
      v = RLIM_INFINITY;
    } else if (!absl::SimpleAtoi(w[0], &v)) {
      return absl::InvalidArgumentError(absl::StrCat("limits line: ", line));
    }
    out.push_back(v);
  }
  if (out.size() < 16) return absl::InvalidArgumentError("limits: fewer than 16 resources");
  return out;
}

absl::StatusOr<std::vector<uint64_t>> ReadLiveHardLimits(const proc::ProcReader& proc, pid_t pid) {
  CRYO_ASSIGN_OR_RETURN(std::string text, fs::ReadFile(proc.PidPath(pid, "limits")));
  auto limits = ParseProcLimits(text);
  if (!limits.ok()) return Annotate(limits.status(), absl::StrCat("pid ", pid));
  return limits;
}

absl::Status CheckImageResources(const std::string& images_dir, const CredentialCeiling& ceiling,
                                 absl::string_view ceiling_name) {
  CRYO_ASSIGN_OR_RETURN(auto listing, ListImages(images_dir));
  const std::string whose(ceiling_name);
  for (const auto& e : listing) {
    if (absl::StartsWith(e.name, "core-") && absl::EndsWith(e.name, ".img")) {
      CRYO_RETURN_IF_ERROR(CheckLimits(images_dir, e.name, ceiling, whose));
    } else if (absl::StartsWith(e.name, "ghost-file-")) {
      CRYO_RETURN_IF_ERROR(CheckGhost(images_dir, e.name));
    } else if (e.name == "files.img") {
      CRYO_RETURN_IF_ERROR(CheckFiles(images_dir, ceiling, whose));
    }
  }
  return absl::OkStatus();
}

std::vector<pid_t> RaiseOomScoreAdj(const proc::ProcReader& proc, const std::vector<pid_t>& pids,
                                    int floor) {
  std::vector<pid_t> raised;
  for (pid_t pid : pids) {
    const std::string path = proc.PidPath(pid, "oom_score_adj");
    auto now = fs::ReadFile(path);
    int v = 0;
    if (!now.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*now), &v) || v >= floor) {
      continue;
    }
    // Raising needs no privilege; written by cryod (CAP_SYS_RESOURCE) it is also the least the
    // process may later set itself.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const std::string text = absl::StrCat(floor);
    if (::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size())) {
      raised.push_back(pid);
    }
    ::close(fd);
  }
  return raised;
}

}  // namespace cryo::criu
