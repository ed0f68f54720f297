#include "daemon/criu/listen_ports.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "lib/base/fs.h"
#include "lib/base/netns.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"

namespace cryo::criu {
namespace {

constexpr uint32_t kTcpEstablished = 1;
constexpr uint32_t kTcpListen = 10;

const char* StateName(int st) {
  static const char* const kNames[] = {"?",          "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
                                       "FIN_WAIT1",  "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
                                       "CLOSE_WAIT", "LAST_ACK",    "LISTEN",    "CLOSING"};
  return st > 0 && st < 12 ? kNames[st] : "?";
}

std::string AddrText(int family, const std::array<uint8_t, 16>& a, uint16_t port) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family, a.data(), buf, sizeof(buf));
  return family == AF_INET6 ? absl::StrCat("[", buf, "]:", port) : absl::StrCat(buf, ":", port);
}

// An address as the kernel compares it: IPv4 (a v4-mapped IPv6 address included) or IPv6,
// and whether it is the wildcard.
struct Norm {
  bool v4;
  std::array<uint8_t, 16> a{};
  bool any;
};

Norm Normalize(int family, const std::array<uint8_t, 16>& a) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  Norm n{family == AF_INET, {}, false};
  if (family == AF_INET6 && std::memcmp(a.data(), kMapped, 12) == 0) {
    n.v4 = true;
    std::memcpy(n.a.data(), a.data() + 12, 4);
  } else {
    n.a = a;
  }
  if (n.v4) std::fill(n.a.begin() + 4, n.a.end(), 0);
  n.any = std::all_of(n.a.begin(), n.a.end(), [](uint8_t b) { return b == 0; });
  return n;
}

// Whether a socket at `s` takes `l`'s port (a generous reading: it only chooses what to name
// and which TIME_WAIT sockets to clear once a bind has failed).
bool Overlaps(const Listener& l, const TcpSocket& s) {
  if (l.port != s.local_port) return false;
  const Norm a = Normalize(l.family, l.addr), b = Normalize(s.family, s.local);
  return a.any || b.any || (a.v4 == b.v4 && a.a == b.a);
}

// Binds a socket as CRIU will bind `l` and closes it: 0 or the errno of the bind.
int ProbeBind(const Listener& l) {
  const int fd = ::socket(l.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (l.family == AF_INET6) {
    if (l.v6only) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(l.port);
    std::memcpy(&sa.sin6_addr, l.addr.data(), 16);
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  } else {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(l.port);
    std::memcpy(&sa.sin_addr, l.addr.data(), 4);
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

// Destroys one socket through the kernel's socket diagnostics: 0 or an errno (ENOENT: gone).
int DestroySocket(const TcpSocket& s) {
  const int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return errno;
  struct {
    nlmsghdr h;
    inet_diag_req_v2 r;
  } m{};
  m.h.nlmsg_len = sizeof(m);
  m.h.nlmsg_type = SOCK_DESTROY;
  m.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  m.r.sdiag_family = static_cast<uint8_t>(s.family);
  m.r.sdiag_protocol = IPPROTO_TCP;
  m.r.idiag_states = ~0u;
  m.r.id.idiag_sport = htons(s.local_port);
  m.r.id.idiag_dport = htons(s.remote_port);
  const size_t n = s.family == AF_INET6 ? 16 : 4;
  std::memcpy(m.r.id.idiag_src, s.local.data(), n);
  std::memcpy(m.r.id.idiag_dst, s.remote.data(), n);
  m.r.id.idiag_cookie[0] = m.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  int err = 0;
  if (::send(nl, &m, sizeof(m), 0) != static_cast<ssize_t>(sizeof(m))) {
    err = errno;
  } else {
    alignas(nlmsghdr) char buf[512];
    const ssize_t got = ::recv(nl, buf, sizeof(buf), 0);
    const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
    if (got < 0) {
      err = errno;
    } else if (static_cast<size_t>(got) < NLMSG_LENGTH(sizeof(nlmsgerr)) ||
               h->nlmsg_type != NLMSG_ERROR) {
      err = EPROTO;
    } else {
      err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
    }
  }
  ::close(nl);
  return err;
}

// The socket inodes a process holds open ("socket:[123]" among its descriptors).
std::vector<uint64_t> SocketInodes(const proc::ProcReader& proc, pid_t pid) {
  std::vector<uint64_t> out;
  for (const std::string& t : proc.FdTargets(pid)) {
    absl::string_view l = t;
    uint64_t ino = 0;
    if (absl::ConsumePrefix(&l, "socket:[") && absl::ConsumeSuffix(&l, "]") &&
        absl::SimpleAtoi(l, &ino)) {
      out.push_back(ino);
    }
  }
  return out;
}

// The processes holding socket inode `ino`, as "pid 12 (name)"; for messages only.
std::string HolderOf(uint64_t ino) {
  if (ino == 0) return "";
  proc::ProcReader proc;
  std::vector<std::string> who;
  for (pid_t pid : proc.AllPids()) {
    const std::vector<uint64_t> held = SocketInodes(proc, pid);
    if (std::find(held.begin(), held.end(), ino) == held.end()) continue;
    auto info = proc.Read(pid);
    who.push_back(absl::StrCat("pid ", pid, " (", info.ok() ? info->comm : "?", ")"));
  }
  return absl::StrJoin(who, ", ");
}

// The TCP table (IPv4 and IPv6) under `net_dir`, a /proc/.../net directory. A missing IPv6
// table is a kernel without IPv6; a missing IPv4 one is an error when `need_ipv4`.
absl::StatusOr<std::vector<TcpSocket>> ReadTcpTable(const std::string& net_dir, bool need_ipv4) {
  std::vector<TcpSocket> all;
  for (auto [name, family] : {std::pair{"tcp", AF_INET}, std::pair{"tcp6", AF_INET6}}) {
    auto text = fs::ReadFile(absl::StrCat(net_dir, "/", name));
    if (!text.ok()) {
      if (family == AF_INET && need_ipv4) return text.status();
      continue;
    }
    CRYO_ASSIGN_OR_RETURN(auto socks, ParseProcNetTcp(*text, family));
    all.insert(all.end(), socks.begin(), socks.end());
  }
  return all;
}

// Runs `fn` in the network namespace of `pid` (0: here).
template <typename T>
T InNetns(pid_t pid, const std::function<T()>& fn) {
  if (pid == 0) return fn();
  std::optional<T> out;
  absl::Status entered =
      InNetNamespace(absl::StrCat("/proc/", pid, "/ns/net"), [&] { out = fn(); });
  if (!entered.ok()) return entered;
  return *std::move(out);
}

}  // namespace

std::string Listener::Address() const { return AddrText(family, addr, port); }

namespace {

// Each TCP socket in state `state` in files.img of `images_dir` (none when there is no such
// image), its addresses checked: INVALID_ARGUMENT for an entry that does not parse or holds an
// address no socket has.
absl::Status ForEachTcpSocket(const std::string& images_dir, uint32_t state, const char* what,
                              const std::function<void(const ::criu::inet_sk_entry&)>& fn) {
  auto entries = ReadImageEntries(images_dir, "files.img", kFilesMagic, true, kMaxFilesImage);
  if (absl::IsNotFound(entries.status())) return absl::OkStatus();
  CRYO_RETURN_IF_ERROR(entries.status());
  for (const auto& raw : *entries) {
    ::criu::file_entry fe;
    if (!fe.ParseFromString(raw)) {
      return absl::InvalidArgumentError("CRIU image files.img: an entry does not parse");
    }
    if (fe.type() != kInetSk || !fe.has_isk()) continue;
    const auto& sk = fe.isk();
    if (sk.type() != SOCK_STREAM || sk.proto() != IPPROTO_TCP || sk.state() != state) continue;
    const int family = static_cast<int>(sk.family());
    if ((family != AF_INET && family != AF_INET6) || sk.src_port() > 0xffff ||
        sk.dst_port() > 0xffff || sk.src_addr_size() > 4 || sk.dst_addr_size() > 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("CRIU image files.img: TCP ", what, " ", sk.id(), " has a bad address"));
    }
    fn(sk);
  }
  return absl::OkStatus();
}

// The address bytes, as CRIU copies them into words.
std::array<uint8_t, 16> AddrOf(const google::protobuf::RepeatedField<uint32_t>& words) {
  std::array<uint8_t, 16> a{};
  for (int i = 0; i < words.size(); ++i) {
    const uint32_t w = words.Get(i);
    std::memcpy(a.data() + 4 * i, &w, 4);
  }
  return a;
}

}  // namespace

absl::StatusOr<std::vector<Listener>> ReadImageListeners(const std::string& images_dir) {
  std::vector<Listener> out;
  std::set<std::tuple<int, std::array<uint8_t, 16>, uint16_t>> seen;
  CRYO_RETURN_IF_ERROR(
      ForEachTcpSocket(images_dir, kTcpListen, "listener", [&](const ::criu::inet_sk_entry& sk) {
        Listener l;
        l.family = static_cast<int>(sk.family());
        l.port = static_cast<uint16_t>(sk.src_port());
        l.v6only = sk.v6only();
        l.addr = AddrOf(sk.src_addr());
        if (seen.insert({l.family, l.addr, l.port}).second) out.push_back(l);
      }));
  return out;
}

absl::StatusOr<std::vector<Connection>> ReadImageConnections(const std::string& images_dir) {
  std::set<Connection> out;
  CRYO_RETURN_IF_ERROR(ForEachTcpSocket(images_dir, kTcpEstablished, "connection",
                                        [&](const ::criu::inet_sk_entry& sk) {
                                          Connection c;
                                          c.family = static_cast<int>(sk.family());
                                          c.sport = static_cast<uint16_t>(sk.src_port());
                                          c.dport = static_cast<uint16_t>(sk.dst_port());
                                          c.src = AddrOf(sk.src_addr());
                                          c.dst = AddrOf(sk.dst_addr());
                                          out.insert(c);
                                        }));
  return std::vector<Connection>(out.begin(), out.end());
}

absl::Status WriteImageListeners(const std::string& images_dir,
                                 const std::vector<Listener>& listeners) {
  std::vector<::criu::file_entry> fes(listeners.size());
  std::vector<const google::protobuf::MessageLite*> ptrs;
  for (size_t i = 0; i < listeners.size(); ++i) {
    const Listener& l = listeners[i];
    auto& fe = fes[i];
    fe.set_type(kInetSk);
    fe.set_id(static_cast<uint32_t>(i + 1));
    auto* sk = fe.mutable_isk();
    sk->set_id(static_cast<uint32_t>(i + 1));
    sk->set_family(static_cast<uint32_t>(l.family));
    sk->set_type(SOCK_STREAM);
    sk->set_proto(IPPROTO_TCP);
    sk->set_state(kTcpListen);
    sk->set_src_port(l.port);
    sk->set_v6only(l.v6only);
    for (int w = 0; w < (l.family == AF_INET6 ? 4 : 1); ++w) {
      uint32_t v;
      std::memcpy(&v, l.addr.data() + 4 * w, 4);
      sk->add_src_addr(v);
    }
    ptrs.push_back(&fe);
  }
  return fs::WriteFileAtomic(fs::Join(images_dir, "files.img"),
                             FrameImage({kImgCommonMagic, kFilesMagic}, ptrs));
}

absl::StatusOr<std::vector<TcpSocket>> ParseProcNetTcp(absl::string_view text, int family) {
  std::vector<TcpSocket> out;
  const size_t words = family == AF_INET6 ? 4 : 1;
  auto addr = [&](absl::string_view f, std::array<uint8_t, 16>* a, uint16_t* port) {
    std::vector<absl::string_view> ap = absl::StrSplit(f, ':');
    if (ap.size() != 2 || ap[0].size() != 8 * words || ap[1].size() != 4) return false;
    for (size_t w = 0; w < words; ++w) {
      uint32_t v;
      if (!absl::SimpleHexAtoi(ap[0].substr(8 * w, 8), &v)) return false;
      std::memcpy(a->data() + 4 * w, &v, 4);  // the kernel prints each word as it lies in memory
    }
    uint32_t p;
    if (!absl::SimpleHexAtoi(ap[1], &p) || p > 0xffff) return false;
    *port = static_cast<uint16_t>(p);
    return true;
  };
  bool header = true;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    if (header) {  // "  sl  local_address rem_address   st ..."
      header = false;
      continue;
    }
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    TcpSocket s;
    s.family = family;
    uint32_t st = 0;
    if (f.size() < 10 || !addr(f[1], &s.local, &s.local_port) ||
        !addr(f[2], &s.remote, &s.remote_port) || !absl::SimpleHexAtoi(f[3], &st) ||
        !absl::SimpleAtoi(f[9], &s.inode)) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected TCP table line: ", line));
    }
    s.state = static_cast<int>(st);
    out.push_back(s);
  }
  return out;
}

absl::StatusOr<FreePortsReport> FreeListenPorts(const std::vector<Listener>& listeners,
                                                const FreePortsOptions& opts) {
  FreePortsReport rep;
  if (listeners.empty()) return rep;
  const absl::Time start = absl::Now();
  const absl::Time give_up = std::min(opts.deadline, start + opts.max_wait);
  bool can_destroy = true;
  std::string cannot_destroy;
  std::set<std::string> held;
  // One look at every port: OK(true) when all bind, OK(false) while TIME_WAIT sockets that
  // cannot be destroyed still hold one.
  std::function<absl::StatusOr<bool>()> round = [&]() -> absl::StatusOr<bool> {
    bool pending = false;
    for (const Listener& l : listeners) {
      int err = ProbeBind(l);
      if (err == 0) continue;
      if (err == EADDRNOTAVAIL) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the job listened on ", l.Address(),
            ", an address this node (network namespace) does not have, so its restore would "
            "fail; a job resumed in another pod or on another node must listen on loopback or "
            "on every address (a one-pod torchrun/NCCL job: NCCL_SOCKET_IFNAME=lo and "
            "MASTER_ADDR=127.0.0.1). The checkpoint is kept"));
      }
      if (err != EADDRINUSE) return ErrnoStatus(err, absl::StrCat("test bind of ", l.Address()));
      held.insert(l.Address());
      // thread-self: the table of the namespace this thread entered, not the process's.
      CRYO_ASSIGN_OR_RETURN(auto table, ReadTcpTable("/proc/thread-self/net", true));
      std::vector<TcpSocket> tw;
      std::vector<std::string> live;
      for (const auto& s : table) {
        if (!Overlaps(l, s)) continue;
        if (s.state == kTcpTimeWait) {
          tw.push_back(s);
          continue;
        }
        const std::string who = HolderOf(s.inode);
        live.push_back(absl::StrCat(AddrText(s.family, s.local, s.local_port), " ",
                                    StateName(s.state), who.empty() ? "" : " held by ", who));
      }
      if (!live.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the job's listener ", l.Address(), " cannot be restored: the port is in use (",
            absl::StrJoin(live, "; "), "); free it and restore again. The checkpoint is kept"));
      }
      if (tw.empty()) {
        if (ProbeBind(l) == 0) continue;  // a TIME_WAIT socket ended between the two looks
        return absl::FailedPreconditionError(absl::StrCat(
            "the job's listener ", l.Address(),
            " cannot be restored: the port is bound by a socket that neither listens nor "
            "connects (not in the kernel's TCP table); free it and restore again. The "
            "checkpoint is kept"));
      }
      if (can_destroy) {
        for (const auto& s : tw) {
          const int d = DestroySocket(s);
          if (d == 0 || d == ENOENT) {
            ++rep.cleared;
          } else {
            can_destroy = false;
            cannot_destroy = std::strerror(d);
            break;
          }
        }
      }
      if (ProbeBind(l) != 0) pending = true;
    }
    return !pending;
  };
  for (;;) {
    CRYO_ASSIGN_OR_RETURN(bool done, InNetns(opts.netns_pid, round));
    if (done) break;
    if (opts.stop && opts.stop()) {
      return absl::CancelledError(absl::StrCat("cancelled while waiting for TIME_WAIT sockets on ",
                                               absl::StrJoin(held, ", "), " to end"));
    }
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "TIME_WAIT sockets of the job's closed connections still hold ",
          absl::StrJoin(held, ", "), " after ", absl::FormatDuration(absl::Now() - start),
          " (this kernel cannot destroy them: ", cannot_destroy,
          "); restore again once they end, at most 60 s after the checkpoint. The checkpoint "
          "is kept"));
    }
    absl::SleepFor(opts.poll);
  }
  rep.waited = absl::Now() - start;
  rep.ports.assign(held.begin(), held.end());
  return rep;
}

absl::Status CheckPortableSockets(const std::vector<TcpSocket>& table,
                                  const std::vector<uint64_t>& inodes, bool tcp_close) {
  const std::set<uint64_t> mine(inodes.begin(), inodes.end());
  auto loopback = [](const Norm& n) {
    static constexpr std::array<uint8_t, 16> kV6Loopback = {0, 0, 0, 0, 0, 0, 0, 0,
                                                            0, 0, 0, 0, 0, 0, 0, 1};
    return n.v4 ? n.a[0] == 127 : n.a == kV6Loopback;
  };
  for (const auto& s : table) {
    if (s.inode == 0 || !mine.count(s.inode)) continue;
    const Norm local = Normalize(s.family, s.local);
    if (local.any || loopback(local)) continue;
    const Norm remote = Normalize(s.family, s.remote);
    const bool listener = s.state == static_cast<int>(kTcpListen);
    // Connections to other hosts are not the pod's to carry (they follow tcp_established /
    // tcp_close); one whose both ends are the pod's own address is between its processes.
    const bool in_pod = !listener && remote.v4 == local.v4 && remote.a == local.a;
    if (!listener && !(in_pod && !tcp_close)) continue;
    const std::string what =
        listener ? absl::StrCat("listener ", AddrText(s.family, s.local, s.local_port))
                 : absl::StrCat("connection ", AddrText(s.family, s.local, s.local_port), " -> ",
                                AddrText(s.family, s.remote, s.remote_port));
    return absl::FailedPreconditionError(absl::StrCat(
        "the job's TCP ", what,
        " uses the pod's own IP address, which the pod it resumes in will not have, so it could "
        "not be restored: make the job's processes talk over loopback (a one-pod torchrun/NCCL "
        "job: NCCL_SOCKET_IFNAME=lo and MASTER_ADDR=127.0.0.1)",
        listener ? "" : ", or checkpoint with tcp-close to restore such connections closed",
        ". Nothing was stopped; the job runs on"));
  }
  return absl::OkStatus();
}

absl::Status CheckPortableSockets(const std::vector<pid_t>& pids, pid_t netns_pid, bool tcp_close) {
  proc::ProcReader proc;
  std::vector<uint64_t> inodes;
  for (pid_t pid : pids) {
    // One that ended holds nothing; the dump will say so if it matters.
    for (uint64_t ino : SocketInodes(proc, pid)) inodes.push_back(ino);
  }
  if (inodes.empty()) return absl::OkStatus();
  // A table that cannot be read (the pod's init ended) shows nothing: the checkpoint fails later.
  auto table = ReadTcpTable(proc.PidPath(netns_pid, "net"), false);
  if (!table.ok()) return table.status();
  return CheckPortableSockets(*table, inodes, tcp_close);
}

}  // namespace cryo::criu
