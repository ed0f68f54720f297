#include "daemon/criu/job_network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "daemon/criu/network_lock.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/netns.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"
#include "lib/base/subprocess.h"

namespace cryo::criu {
namespace {

constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

// An address as the kernel compares it: IPv4 (4 bytes) or IPv6 (16).
struct Ip {
  int family = 0;
  std::array<uint8_t, 16> a{};
  bool operator<(const Ip& o) const { return std::tie(family, a) < std::tie(o.family, o.a); }
};

std::optional<Ip> ParseIp(const std::string& text) {
  Ip ip;
  if (::inet_pton(AF_INET, text.c_str(), ip.a.data()) == 1) {
    ip.family = AF_INET;
    return ip;
  }
  if (::inet_pton(AF_INET6, text.c_str(), ip.a.data()) == 1) {
    ip.family = AF_INET6;
    return ip;
  }
  return std::nullopt;
}

std::string IpText(int family, const void* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family, a, buf, sizeof(buf));
  return buf;
}

// The map's pairs as the kernel compares addresses; a pair that is not two addresses of one
// family is left out (ValidateAddressMap refuses such a map).
std::map<Ip, Ip> IpMap(const AddressMap& map) {
  std::map<Ip, Ip> ips;
  for (const auto& [from, to] : map) {
    auto a = ParseIp(from), b = ParseIp(to);
    if (a && b && a->family == b->family && from != to) ips[*a] = *b;
  }
  return ips;
}

// Rewrites an address in place when `map` names it (a v4-mapped IPv6 address by its IPv4 part):
// `family` AF_INET for the first 4 bytes of `raw`, AF_INET6 for all 16. Whether it did.
bool Rewrite(int family, std::array<uint8_t, 16>* raw, const std::map<Ip, Ip>& map) {
  Ip key;
  uint8_t* at = raw->data();
  if (family == AF_INET6 && std::memcmp(raw->data(), kMapped, 12) == 0) {
    family = AF_INET;
    at += 12;
  }
  key.family = family;
  std::memcpy(key.a.data(), at, family == AF_INET ? 4 : 16);
  auto it = map.find(key);
  if (it == map.end()) return false;
  std::memcpy(at, it->second.a.data(), family == AF_INET ? 4 : 16);
  return true;
}

// The same for the address words of one socket end in CRIU's image (1 word IPv4, 4 IPv6).
bool Rewrite(google::protobuf::RepeatedField<uint32_t>* words, const std::map<Ip, Ip>& map) {
  std::array<uint8_t, 16> raw{};
  if (words->size() != 1 && words->size() != 4) return false;
  for (int i = 0; i < words->size(); ++i) {
    const uint32_t w = words->Get(i);
    std::memcpy(raw.data() + 4 * i, &w, 4);
  }
  if (!Rewrite(words->size() == 1 ? AF_INET : AF_INET6, &raw, map)) return false;
  for (int i = 0; i < words->size(); ++i) {
    uint32_t w;
    std::memcpy(&w, raw.data() + 4 * i, 4);
    words->Set(i, w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PodAddresses(pid_t netns_pid) {
  proc::ProcReader proc;
  std::set<std::string> out;
  absl::Status listed;
  CRYO_RETURN_IF_ERROR(InNetNamespace(proc.PidPath(netns_pid, "ns/net"), [&] {
    struct ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
      listed = ErrnoStatus(errno, "listing the pod's addresses");
      return;
    }
    for (struct ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      if (i->ifa_addr->sa_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
        const uint8_t first = reinterpret_cast<const uint8_t*>(&in->sin_addr)[0];
        const uint8_t second = reinterpret_cast<const uint8_t*>(&in->sin_addr)[1];
        if (first == 127 || (first == 169 && second == 254)) continue;
        out.insert(IpText(AF_INET, &in->sin_addr));
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) {
          continue;
        }
        out.insert(IpText(AF_INET6, &in6->sin6_addr));
      }
    }
    ::freeifaddrs(list);
  }));
  CRYO_RETURN_IF_ERROR(listed);
  return std::vector<std::string>(out.begin(), out.end());
}

absl::Status ValidateAddressMap(const AddressMap& map) {
  for (const auto& [from, to] : map) {
    auto a = ParseIp(from), b = ParseIp(to);
    if (!a || !b || a->family != b->family) {
      return absl::InvalidArgumentError(absl::StrCat("address map entry '", from, "' -> '", to,
                                                     "' is not two IP addresses of one family"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RewriteImageAddresses(const std::string& images_dir,
                                           const std::string& out_dir, const std::string& link_base,
                                           const AddressMap& map) {
  CRYO_RETURN_IF_ERROR(ValidateAddressMap(map));
  const std::map<Ip, Ip> ips = IpMap(map);
  auto entries = ReadImageEntries(images_dir, "files.img", kFilesMagic, true, kMaxFilesImage);
  if (absl::IsNotFound(entries.status()) || ips.empty()) return false;
  CRYO_RETURN_IF_ERROR(entries.status());
  std::vector<::criu::file_entry> files(entries->size());
  bool changed = false;
  for (size_t i = 0; i < entries->size(); ++i) {
    auto& fe = files[i];
    // Entries cryo does not know keep every field: the message keeps what it cannot parse.
    if (!fe.ParseFromString((*entries)[i])) {
      return absl::InvalidArgumentError("CRIU image files.img: an entry does not parse");
    }
    if (fe.type() != kInetSk || !fe.has_isk()) continue;
    auto* sk = fe.mutable_isk();
    const bool src = Rewrite(sk->mutable_src_addr(), ips);
    const bool dst = Rewrite(sk->mutable_dst_addr(), ips);
    changed = changed || src || dst;
  }
  if (!changed) return false;
  CRYO_ASSIGN_OR_RETURN(auto listing, ListImages(images_dir));
  for (const auto& e : listing) {
    if (e.name == "files.img") continue;
    const std::string link = fs::Join(out_dir, e.name);
    if (::symlink(fs::Join(link_base, e.name).c_str(), link.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("linking image ", e.name, " into ", out_dir));
    }
  }
  std::vector<const google::protobuf::MessageLite*> ptrs;
  for (const auto& fe : files) ptrs.push_back(&fe);
  CRYO_RETURN_IF_ERROR(fs::WriteFileAtomic(fs::Join(out_dir, "files.img"),
                                           FrameImage({kImgCommonMagic, kFilesMagic}, ptrs)));
  return true;
}

std::vector<Listener> RewriteListeners(std::vector<Listener> listeners, const AddressMap& map) {
  const std::map<Ip, Ip> ips = IpMap(map);
  for (Listener& l : listeners) Rewrite(l.family, &l.addr, ips);
  return listeners;
}

namespace {

constexpr char kAddressTable[] = "cryo-job-addresses";

}  // namespace

AddressMap ComposeAddressMaps(const AddressMap& moved, const AddressMap& earlier) {
  AddressMap all = moved;
  for (const auto& [from, to] : earlier) {
    auto it = moved.find(to);
    const std::string& now = it == moved.end() ? to : it->second;
    if (now != from && !all.count(from)) all[from] = now;
  }
  return all;
}

absl::Status KeepJobAddresses(const AddressMap& map, pid_t netns_pid, const std::string& nsexec) {
  CRYO_RETURN_IF_ERROR(ValidateAddressMap(map));
  if (map.empty()) return absl::OkStatus();
  if (FindExecutable("nft").empty()) {
    return absl::FailedPreconditionError(
        "nft is not on this node: connections the job opens to its members' old addresses "
        "will not reach them");
  }
  std::set<std::string> current;
  for (const auto& [from, to] : map) current.insert(to);
  // Created, emptied and filled in one transaction: a second restore into the same namespace
  // replaces the rules, and nothing is ever half there.
  std::string script = absl::StrCat("table inet ", kAddressTable, " {}\ndelete table inet ",
                                    kAddressTable, "\ntable inet ", kAddressTable,
                                    " {\n  chain output {\n    type nat hook output priority "
                                    "-100; policy accept;\n");
  for (const auto& [from, to] : map) {
    // An old address that is now another member's (a reused pod IP) means that member to
    // whoever learns the new addresses: it is not redirected.
    if (current.count(from)) {
      CRYO_LOG(Warning) << "job addresses: " << from << " is a member's address now; new "
                        << "connections to it are not redirected to " << to;
      continue;
    }
    const char* ip = from.find(':') == std::string::npos ? "ip" : "ip6";
    absl::StrAppend(&script, "    ", ip, " daddr ", from, " dnat ", ip, " to ", to,
                    " comment \"cryo ", from, ">", to, "\"\n");
  }
  absl::StrAppend(&script, "  }\n}\n");
  CRYO_ASSIGN_OR_RETURN(NftRun r, RunNft({"-f", "-"}, netns_pid, nsexec, script));
  if (!r.ok) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nft could not make the table that redirects the job's old addresses (does the kernel "
        "have nftables NAT?): ",
        r.output));
  }
  return absl::OkStatus();
}

absl::StatusOr<AddressMap> ReadJobAddresses(pid_t netns_pid, const std::string& nsexec) {
  if (FindExecutable("nft").empty()) return AddressMap{};  // then none was ever made
  CRYO_ASSIGN_OR_RETURN(NftRun r,
                        RunNft({"list", "table", "inet", kAddressTable}, netns_pid, nsexec));
  const std::string& out = r.output;
  if (!r.ok) {
    if (out.find("No such file or directory") != std::string::npos) return AddressMap{};
    return absl::InternalError(absl::StrCat("nft list table inet ", kAddressTable, ": ", out));
  }
  static const std::regex kRule(R"re(comment "cryo ([0-9A-Fa-f.:]+)>([0-9A-Fa-f.:]+)")re");
  AddressMap map;
  for (std::sregex_iterator it(out.begin(), out.end(), kRule), end; it != end; ++it) {
    map[(*it)[1].str()] = (*it)[2].str();
  }
  CRYO_RETURN_IF_ERROR(ValidateAddressMap(map));
  return map;
}

}  // namespace cryo::criu
