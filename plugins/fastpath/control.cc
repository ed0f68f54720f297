#include "plugins/fastpath/control.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "lib/base/fd.h"  // header-only: UniqueFd
#include "lib/contract/gpu_fastpath.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "lib/contract/gpu_fastpath_wire.h"
#include "lib/contract/hex.h"
#include "plugins/fastpath/legacy_ipc.h"

namespace cryo::fastpath {
namespace wire = contract::gpu_fastpath;
using wire::Encode;
using wire::ErrorCode;
using wire::Op;

namespace {

// Every reply is checked (SendMessage is [[nodiscard]]): the callers that act when cryod did not
// get it check it themselves (a drain nobody heard of is taken back, a held job let go); the rest
// Answer, where a lost reply leaves nothing to take back (the peer that would read it is gone),
// and it says so on the job's stderr.
void Answer(int conn, const std::string& text, const std::vector<int>& fds = {}) {
  if (!wire::SendMessage(conn, text, fds))
    Say(std::string("a reply to cryod was lost: ") + strerror(errno));
}

void Answer(int conn, const Result& r) { Answer(conn, Encode(r.Reply())); }

// How long a peer may take to send its request: the channel serves one peer at a time, so one
// that connects and says nothing must not hold off cryod's next checkpoint.
constexpr int kFirstMessageMs = 2000;

// Only root (cryod) and the job's own user may connect; of those, only a peer that proves it may
// read this process's memory (PeerProves) may drive it.
bool PeerAllowed(int conn) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == 0 || cred.uid == ::geteuid();
}

// Whether the peer's request arrives within kFirstMessageMs.
bool Speaks(int conn) {
  pollfd p{conn, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, kFirstMessageMs);
  } while (n < 0 && errno == EINTR);
  return n == 1 && (p.revents & POLLIN) != 0;
}

// Whether the peer reads kChallengeBytes of fresh random bytes out of this process's memory
// (process_vm_readv) and sends them back within kFirstMessageMs. The kernel lets only a peer that
// may ptrace this process read them (CAP_SYS_PTRACE over it, as cryod holds, or its own
// credentials with no fewer capabilities), so a root peer without capabilities (a sidecar, a
// debug container, a pod on the host's network) is refused, and whoever passes could have read
// and written the job's memory, GPU data included, without the channel.
bool PeerProves(int conn) {
  alignas(16) unsigned char nonce[wire::kChallengeBytes];
  if (::getrandom(nonce, sizeof(nonce), 0) != static_cast<ssize_t>(sizeof(nonce))) return false;
  bool proved = false;
  if (wire::SendMessage(conn, Encode(wire::Challenge{reinterpret_cast<uintptr_t>(nonce),
                                                     static_cast<uint32_t>(sizeof(nonce))}))) {
    std::string text, why;
    std::vector<UniqueFd> fds;
    wire::Request proof;
    unsigned char sent[sizeof(nonce)];
    if (Speaks(conn) && wire::ReceiveMessage(conn, &text, &fds) &&
        wire::Decode(text, &proof, &why) && proof.op == Op::kProve &&
        contract::HexDecode(proof.secret, sent, sizeof(sent))) {
      unsigned diff = 0;  // compared in constant time
      for (size_t i = 0; i < sizeof(nonce); ++i) diff |= static_cast<unsigned>(sent[i] ^ nonce[i]);
      proved = diff == 0;
    }
  }
  explicit_bzero(nonce, sizeof(nonce));
  return proved;
}

}  // namespace

Result Control::Start(pid_t pid) {
  if (started_.exchange(true)) return {};
  pid_ = pid != 0 ? pid : ::getpid();
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Result::Failed(std::string("socket: ") + strerror(errno));
  // The name is another process's when a process of another pid namespace on this network
  // namespace has our pid (pods on the host's network): then the next free alternate.
  std::string name;
  int bound = -1;
  for (int k = 0; k < wire::kAlternateNames && bound != 0; ++k) {
    name = wire::AlternateSocketName(pid_, k);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path + 1, name.data(), name.size());
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
    bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
    if (bound != 0 && errno != EADDRINUSE) break;
  }
  if (bound != 0 || ::listen(fd, 4) != 0) {
    Result err = Result::Failed(std::string("listening on @") + name + ": " + strerror(errno));
    ::close(fd);
    return err;
  }
  listen_fd_ = fd;
  // The job's signals are for the job's threads: this one (and the threads it starts) takes none.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  std::thread t([this] { Loop(); });
  pthread_setname_np(t.native_handle(), "cryo-fastpath");
  t.detach();  // lives as long as the process; CRIU saves it with the rest
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return {};
}

void Control::ForgetAfterFork() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void Control::Loop() {
  GateGuard::MarkLibraryThread();
  for (;;) {
    int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (listen_fd_ < 0) return;
      // A restore may briefly leave the socket unusable; never spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (PeerAllowed(conn)) Serve(conn);
    ::close(conn);
  }
}

namespace {

std::vector<wire::ShareRef> Refs(const std::vector<Share>& shares) {
  std::vector<wire::ShareRef> out;
  for (const Share& s : shares) out.push_back({s.id, s.fd});
  return out;
}

}  // namespace

wire::StatusReply Control::Status() {
  RegistryStats st = reg_.Stats();
  wire::StatusReply r;
  r.version = wire::kVersion;
  r.pid = pid_ != 0 ? pid_ : ::getpid();
  r.state = mover_.state();
  r.owned_bytes = st.owned_bytes;
  r.owned_allocations = st.owned_allocations;
  r.owned_cumemalloc = st.owned_cumemalloc;
  r.foreign_allocations = st.foreign_allocations;
  r.min_bytes = reg_.min_bytes();
  r.exports = Refs(reg_.CurrentShares().exports);
  r.imports = st.imports;
  r.device = mover_.Device();
  if (extra_status_) extra_status_(r);
  return r;
}

void Control::Serve(int conn) {
  std::string text;
  std::vector<UniqueFd> fds;
  if (!Speaks(conn) || !wire::ReceiveMessage(conn, &text, &fds)) return;
  wire::Request req;
  std::string why;
  try {
    if (!wire::Decode(text, &req, &why)) {
      Answer(conn, Result::Failed("bad request: " + why, ErrorCode::kBadRequest));
    } else if (req.version < wire::kMinVersion || req.version > wire::kVersion) {
      Answer(conn, Result::Failed("request of version " + std::to_string(req.version) +
                                      "; this library speaks versions " +
                                      std::to_string(wire::kMinVersion) + " to " +
                                      std::to_string(wire::kVersion),
                                  ErrorCode::kVersion));
    } else if ((req.op == Op::kStatus || req.op == Op::kDrain || req.op == Op::kRefill ||
                req.op == Op::kTrack) &&
               !PeerProves(conn)) {
      // ("share" carries its own secret: the job's other processes, which may not ptrace this
      // one, ask for its exports with it. A stray "go" or "align" is refused below.)
      Answer(conn, Result::Failed("refused: the peer did not prove that it may read this "
                                  "process's memory (only cryod, or a process that may ptrace "
                                  "the job, drives its GPU memory)",
                                  ErrorCode::kDenied));
    } else if (req.op == Op::kStatus) {
      Answer(conn, Encode(Status()));
    } else if (req.op == Op::kDrain) {
      HandleDrain(conn, req, fds);
    } else if (req.op == Op::kRefill) {
      HandleRefill(conn, req, fds);
    } else if (req.op == Op::kShare) {
      HandleShare(conn, req);
    } else if (req.op == Op::kTrack) {
      HandleTrack(conn);
    } else {
      Answer(conn, Result::Failed(std::string("\"") + wire::OpName(req.op) + "\" with no " +
                                      (req.op == Op::kProve ? "challenge" : "drain held") +
                                      " on this connection",
                                  ErrorCode::kBadRequest));
    }
  } catch (const std::exception& e) {
    // Nothing may escape into the job; the state says what happened.
    Answer(conn, Result::Failed(std::string("fast path: ") + e.what()));
  }
}

namespace {

// Whether the other end of `conn` closed it (cryod gone).
bool PeerGone(int conn) {
  pollfd pfd{conn, POLLRDHUP, 0};
  return ::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

// A drain's or refill's descriptors from cryod's memory (gpu_fastpath.h, "Memory", "Following",
// "Parking"), lent from `fds`: the memfd, then the progress page if followed, then the park.
struct MemoryFds {
  int memfd = -1, progress = -1, park = -1;
};
// False, with *why, when `fds` is not that (`what`: "a drain into memory", ...).
bool TakeMemoryFds(const wire::Request& req, const std::vector<UniqueFd>& fds, const char* what,
                   MemoryFds* out, std::string* why) {
  const size_t want = 1 + (req.follow ? 1 : 0) + (req.park > 0 ? 1 : 0);
  if (fds.size() != want) {
    *why = std::string(what) +
           " carries a memfd, then a progress page if followed, then a park if parked: " +
           std::to_string(want) + " descriptors, not " + std::to_string(fds.size());
    return false;
  }
  out->memfd = fds[0].get();
  if (req.follow) out->progress = fds[1].get();
  if (req.park > 0) out->park = fds.back().get();
  return true;
}

}  // namespace

void Control::HandleDrain(int conn, const wire::Request& req, std::vector<UniqueFd>& fds) {
  DrainOptions opt;
  opt.threads = req.threads;
  opt.timeout = std::chrono::milliseconds(req.timeout_ms);
  if (req.stripe_bytes != 0) opt.stripe_bytes = req.stripe_bytes;
  if (req.files != static_cast<int>(fds.size())) {
    Answer(conn, Result("the request names " + std::to_string(req.files) + " files but carries " +
                            std::to_string(fds.size()),
                        true));
    return;
  }
  if (req.memory) {
    MemoryFds m;
    std::string why;
    if (!TakeMemoryFds(req, fds, "a drain into memory", &m, &why)) {
      Answer(conn, Result(why, true));
      return;
    }
    opt.memfd = m.memfd;
    opt.progress = m.progress;
    opt.park = m.park;
    opt.park_bytes = req.park;
    opt.park_device = req.park_device;
  } else {
    opt.fds = Borrow(fds);
  }
  if (req.hold_ms > 0 && !HoldForGo(conn, req)) return;
  DrainResult r;
  Result o = mover_.Drain(opt, &r);
  if (!o.ok()) {
    Answer(conn, o);
    return;
  }
  // If nobody heard that the memory is out, nobody will bring it back: do it now.
  if (!wire::SendMessage(conn, Encode(r))) {
    if (!mover_.Abort()) Say("a drain cryod did not hear of could not be taken back");
    return;
  }
  if (fds.empty()) return;
  // Into cryod's memory: once this process lets go of it, only cryod holds the data. A cryod
  // gone by now cannot give it back, so the job takes its memory back from it instead.
  if (req.memory && PeerGone(conn)) {
    if (!mover_.Abort()) Say("a drain whose cryod left could not be taken back");
    return;
  }
  SaveResult s;
  o = mover_.FinishSave(&s);
  fds.clear();  // before the reply: CRIU must find no descriptor of the store in the job
  // A saved reply that is lost leaves the data in the files: cryod's journal refills the job
  // from them when it comes back (its undo), so the answer is all there is to do here.
  if (!o.ok()) {
    Answer(conn, o);
    return;
  }
  Answer(conn, Encode(s));
}

namespace {

// Waits up to hold_ms for cryod's next request on `conn`, which must be `want` ("go", "align"):
// ok with it (and its descriptors), else why not.
Result WaitFor(int conn, int64_t hold_ms, Op want, wire::Request* next,
               std::vector<UniqueFd>* fds) {
  pollfd pfd{conn, POLLIN, 0};
  int r;
  do {
    r = ::poll(&pfd, 1, static_cast<int>(hold_ms));
  } while (r < 0 && errno == EINTR);
  std::string text, bad;
  const std::string name = std::string("\"") + wire::OpName(want) + "\"";
  if (r == 0) {
    return Result::Failed("no " + name + " came within " + std::to_string(hold_ms) + " ms");
  }
  const Result gone = Result::Failed("cryod let go before its " + name);
  if (r < 0 || !wire::ReceiveMessage(conn, &text, fds)) return gone;
  if (wire::Decode(text, next, &bad) && next->op == want) return {};
  fds->clear();
  return gone;
}

}  // namespace

bool Control::HoldForGo(int conn, const wire::Request& req) {
  wire::QuiescedReply q;
  const std::chrono::milliseconds timeout(req.timeout_ms);
  Result o;
  if (req.align) {
    // Gates shut; then on to the collective every rank reaches (cryod's "align"), then held.
    wire::GatedReply g;
    o = mover_.GateShut(timeout, &g.collectives);
    g.counting = mover_.collectives().counting();
    if (o.ok() && !wire::SendMessage(conn, Encode(g))) {
      mover_.Unhold();
      return false;
    }
    if (o.ok()) {
      wire::Request align;
      std::vector<UniqueFd> fds;
      const Result got = WaitFor(conn, req.hold_ms, Op::kAlign, &align, &fds);
      fds.clear();
      if (!got.ok()) {
        mover_.Unhold();
        Answer(conn, Result("the cut was called off before its align", true));
        return false;
      }
      o = mover_.Align(align.to, std::chrono::milliseconds(align.timeout_ms), &q.quiesce_ms);
    }
  } else {
    o = mover_.Hold(timeout, &q.quiesce_ms);
  }
  if (!o.ok()) {
    Answer(conn, o);
    return false;
  }
  // What it shares, for cryod to find who imports what (nothing changes it while held).
  const Shares shares = reg_.CurrentShares();
  q.exports = Refs(shares.exports);
  q.imports = Refs(shares.imports);
  q.foreign_shares = reg_.Stats().foreign_allocations;
  if (!wire::SendMessage(conn, Encode(q))) {
    mover_.Unhold();
    return false;
  }
  // The job stays held only as long as cryod says so: its "go" within hold_ms, on this
  // connection. Whatever else happens, the job goes on untouched.
  wire::Request go;
  std::vector<UniqueFd> fds;
  Result got = WaitFor(conn, req.hold_ms, Op::kGo, &go, &fds);
  if (got.ok()) return true;
  mover_.Unhold();
  Answer(conn, Result("the cut was called off: " + got.error, true));
  return false;
}

void Control::HandleShare(int conn, const wire::Request& req) {
  uint64_t secret[2] = {0, 0};
  int fd = -1;
  uint64_t size = 0;
  const Registry::IpcLookup found = SecretFromHex(req.secret, secret)
                                        ? reg_.IpcShare(req.id, secret, &fd, &size)
                                        : Registry::IpcLookup::kUnknown;
  if (found == Registry::IpcLookup::kBusy) {
    Answer(conn, Result::Failed("its memory is out of the GPU for a checkpoint", ErrorCode::kBusy));
    return;
  }
  if (found != Registry::IpcLookup::kFound) {
    Answer(conn, Result::Failed("no legacy IPC export " + std::to_string(req.id) +
                                    " with that secret in this process",
                                ErrorCode::kBadRequest));
    return;
  }
  // A share that does not arrive: the asking process sees its channel close and asks again.
  Answer(conn, Encode(wire::ShareReply{size}), {fd});
  ::close(fd);
}

namespace {
// Newer than Debian 12's kernel headers: WP_UNPOPULATED (6.4), WP_ASYNC (6.7). PAGEMAP_SCAN
// reports anonymous memory as tracked only with both.
constexpr uint64_t kUffdFeatureWpUnpopulated = 1ull << 13;
constexpr uint64_t kUffdFeatureWpAsync = 1ull << 15;

// The process's forks, counted at fork(): cryod reads the count at its copy of the process's
// shared memory and again at the freeze, since a child that inherits such memory writes it
// beyond this process's userfaultfd ("Tracking", gpu_fastpath.h). Read by cryod with
// process_vm_readv, so a plain word at a fixed address.
volatile uint64_t g_forks = 0;
void CountFork() { __atomic_add_fetch(&g_forks, 1, __ATOMIC_SEQ_CST); }
}  // namespace

void Control::HandleTrack(int conn) {
  // User-mode faults only: what an unprivileged process may create (vm.unprivileged_userfaultfd
  // 0). The kernel resolves the write-protect faults itself (WP_ASYNC), so kernel-mode writes
  // into the job's memory are not refused either.
  UniqueFd fd(
      static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY)));
  if (!fd.ok()) {
    Answer(conn, Result::Failed(std::string("userfaultfd: ") + strerror(errno)));
    return;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kUffdFeatureWpAsync | kUffdFeatureWpUnpopulated;
  // Shared memory too where the kernel protects it (5.19): cryod then copies it ahead as well.
  uffdio_api with_shared = api;
  with_shared.features |= UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
  if (::ioctl(fd.get(), UFFDIO_API, &with_shared) == 0) {
    api = with_shared;
  } else if (::ioctl(fd.get(), UFFDIO_API, &api) != 0) {
    Answer(conn, Result::Failed(
                     std::string("userfaultfd without write-protect resolved by the "
                                 "kernel (UFFD_FEATURE_WP_ASYNC and WP_UNPOPULATED, Linux 6.7): ") +
                     strerror(errno)));
    return;
  }
  static pthread_once_t counting = PTHREAD_ONCE_INIT;
  pthread_once(&counting, [] { pthread_atfork(CountFork, nullptr, nullptr); });
  // Sent, then closed here (fd's destructor): only cryod holds it.
  Answer(conn, Encode(wire::TrackReply{api.features, reinterpret_cast<uintptr_t>(&g_forks)}),
         {fd.get()});
}

void Control::HandleRefill(int conn, const wire::Request& req, std::vector<UniqueFd>& fds) {
  RefillOptions opt;
  opt.threads = req.threads;
  if (req.filled) {
    // (gpu_fastpath.h, "Filled") the park alone.
    if (req.memory || req.park == 0 || fds.size() != 1) {
      Answer(conn, Result::Failed("a refill from a filled park carries the park alone"));
      return;
    }
    opt.filled = true;
    opt.park = fds[0].get();
    opt.park_bytes = req.park;
    opt.park_device = req.park_device;
  } else if (req.memory) {
    MemoryFds m;
    std::string why;
    if (!TakeMemoryFds(req, fds, "a refill from memory", &m, &why)) {
      Answer(conn, Result::Failed(why));
      return;
    }
    opt.memfd = m.memfd;
    opt.progress = m.progress;
    opt.park = m.park;
    opt.park_bytes = req.park;
  } else {
    opt.fds = Borrow(fds);
  }
  opt.expected = req.expected;
  RefillResult r;
  Result o = mover_.Refill(opt, &r);
  fds.clear();
  if (!o.ok()) {
    Answer(conn, o);
    return;
  }
  r.importing = mover_.state() == State::kImporting;
  r.exports = Refs(reg_.CurrentShares().exports);
  if (!r.importing) {
    // The job runs again whether or not cryod hears it: nothing to take back.
    Answer(conn, Encode(r));
    return;
  }
  // Memory it imported from other processes of the job comes back only with their new
  // descriptors, which cryod brings in its "go": until then the gate stays shut.
  if (req.hold_ms <= 0) {
    Answer(conn, Result::Failed("its own memory is back, but what it imported from other "
                                "processes waits for their descriptors (a held refill)"));
    return;
  }
  // Unheard, no "go" follows: the gate stays shut, as for any refill whose imports never came.
  if (!wire::SendMessage(conn, Encode(r))) {
    Say("a held refill's reply was lost: its imports wait for cryod");
    return;
  }
  ImportAndAnswer(conn, req.hold_ms);
}

void Control::ImportAndAnswer(int conn, int64_t hold_ms) {
  wire::Request go;
  std::vector<UniqueFd> go_fds;
  // Its imports, in one "go" or, past what one message carries, several ("more").
  std::map<uint64_t, int> by_id;  // lent from all_fds
  std::vector<UniqueFd> all_fds;
  for (;;) {
    if (Result got = WaitFor(conn, hold_ms, Op::kGo, &go, &go_fds); !got.ok()) {
      Answer(conn, Result::Failed("imports wait: " + got.error));
      return;
    }
    for (size_t i = 0; i < go.imports.size() && i < go_fds.size(); ++i)
      by_id[go.imports[i]] = go_fds[i].get();
    for (UniqueFd& f : go_fds) all_fds.push_back(std::move(f));
    go_fds.clear();
    if (!go.more) break;
    if (all_fds.size() > wire::kMaxShares) {
      Answer(conn, Result::Failed("imports wait: more descriptors than " +
                                  std::to_string(wire::kMaxShares)));
      return;
    }
  }
  wire::ImportedReply done;
  done.imports = by_id.size();
  Result o = mover_.Import(by_id, &done.import_ms);
  all_fds.clear();
  if (!o.ok()) {
    Answer(conn, o);
    return;
  }
  Answer(conn, Encode(done));
}

}  // namespace cryo::fastpath
