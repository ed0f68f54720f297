#include "daemon/gpu/fastpath_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/criu/credentials.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/netns.h"
#include "lib/base/status.h"
#include "lib/contract/gpu_fastpath.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "lib/contract/gpu_fastpath_wire.h"

namespace cryo::gpu {
namespace wire = contract::gpu_fastpath;

namespace {

// One reply of the library (T: its type), or an error naming the process. `stop` (may be empty)
// is asked at least every 100 ms.
template <typename T>
absl::StatusOr<T> Receive(int fd, const FastpathProcess& p, absl::Duration timeout,
                          const std::function<bool()>& stop = nullptr,
                          std::vector<UniqueFd>* attached = nullptr) {
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the channel to the GPU fast path of pid ", p.pid, " is closed"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  bool proved = false;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("the GPU fast path of pid ", p.pid,
                                                      " did not answer within ",
                                                      absl::FormatDuration(timeout)));
    }
    if (stop && stop()) {
      return absl::CancelledError(absl::StrCat(
          "stopped waiting for the GPU fast path of pid ", p.pid,
          " (the operation was cancelled, its deadline passed, or cryod is stopping)"));
    }
    pollfd pfd{fd, POLLIN, 0};
    const int64_t slice = std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 100);
    int r = ::poll(&pfd, 1, static_cast<int>(slice));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus(errno, "poll");
    if (r == 0) continue;
    std::string text;
    std::vector<UniqueFd> fds;  // closed as they go, unless the caller takes them
    if (!wire::ReceiveMessage(fd, &text, &fds)) {
      return absl::UnavailableError(absl::StrCat("the GPU fast path of pid ", p.pid,
                                                 " closed its channel without an answer"));
    }
    // A library of version kVersionProve first asks cryod to prove that it may read the job's
    // memory (gpu_fastpath.h), once per connection; then it answers the request.
    wire::Challenge challenge;
    if (!proved && wire::DecodeChallenge(text, &challenge)) {
      std::string why;
      if (!wire::AnswerChallenge(fd, p.pid, challenge, &why)) {
        return absl::PermissionDeniedError(
            absl::StrCat("the GPU fast path of pid ", p.pid, " asked cryod to prove that it may ",
                         "read the job's memory, and it could not: ", why));
      }
      proved = true;
      continue;
    }
    if (attached != nullptr) *attached = std::move(fds);
    return ParseFastpathReply<T>(text, p);
  }
}

absl::Status Send(int fd, const FastpathProcess& p, const wire::Request& req,
                  const std::vector<int>& files) {
  if (!wire::SendMessage(fd, wire::Encode(req), files)) {
    return ErrnoStatus(errno, absl::StrCat("sending to the GPU fast path of pid ", p.pid));
  }
  return absl::OkStatus();
}

// A drain or refill into or from cryod's memfd (`req` says memory) that one side follows
// (p.follow, gpu_fastpath.h "Following"): the memfd, then the progress page.
void AskToFollow(const FastpathProcess& p, const std::vector<int>& files, wire::Request* req) {
  req->follow = req->memory && p.follow && files.size() == 2;
  if (req->follow) req->version = wire::kVersionFollow;
}

// A process whose data is in cryod's memfd (p.memory) is given that memfd as its one file.
wire::Request RefillRequest(const FastpathProcess& p, int threads, const std::vector<int>& files,
                            const std::vector<FileDigest>& expected) {
  wire::Request req;
  req.op = wire::Op::kRefill;
  // (None while the library still holds its copy mapped: it refills from that.)
  req.memory = p.memory && !files.empty();
  req.version = req.memory ? wire::kVersionMemory : wire::kMinVersion;
  if (p.filled && p.park > 0 && files.size() == 1) {
    // Its data read into a park from the store (gpu_fastpath.h, "Filled"): the park alone.
    req.memory = false;
    req.filled = true;
    req.park = p.park;
    req.park_device = p.device;
    req.version = wire::kVersionFill;
  } else if (req.memory && p.parked && p.park > 0 && files.size() == 2) {
    // Back from its park (the memfd, then the park): nothing to follow.
    req.park = p.park;
    req.version = wire::kVersionPark;
  } else {
    AskToFollow(p, files, &req);
  }
  req.threads = threads;
  req.files = static_cast<int>(files.size());
  req.expected = expected;
  return req;
}

void LogRefill(const FastpathProcess& p, const wire::RefillReply& r) {
  CRYO_LOG(Info) << "fast path of pid " << p.pid << ": " << r.bytes << " bytes back on the GPU in "
                 << r.total_ms << " ms (allocate " << r.allocate_ms << ", copy " << r.copy_ms << ")"
                 << (p.parked   ? ", from its park on the GPU"
                     : p.filled ? ", from the GPU memory cryod read it into"
                     : p.memory ? ", from cryod's memory"
                                : "")
                 << (p.follow && !p.parked ? " as cryod read it from the store" : "");
}

absl::Status ReplyError(const wire::Error& e, const FastpathProcess& p) {
  const std::string msg =
      absl::StrCat("GPU fast path of pid ", p.pid, ": ", e.message,
                   e.rolled_back ? " (its memory is back on the GPU; the job runs on)" : "");
  switch (e.code) {
    case wire::ErrorCode::kDeadline:
      return absl::DeadlineExceededError(msg);
    case wire::ErrorCode::kDataLoss:
      return absl::DataLossError(msg);
    case wire::ErrorCode::kVersion:
      return absl::FailedPreconditionError(msg);
    case wire::ErrorCode::kDenied:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::AbortedError(msg);
  }
}

// What only a status reply says: whose it is, and which version of the library speaks.
absl::Status CheckStatus(const wire::StatusReply& st, const FastpathProcess& p) {
  const pid_t want = p.ns_pid > 0 ? p.ns_pid : p.pid;
  if (st.pid != want) {
    return absl::PermissionDeniedError(absl::StrCat("the GPU fast path of pid ", p.pid,
                                                    " answered for another process (pid ", st.pid,
                                                    "): refused"));
  }
  if (st.version < wire::kMinVersion || st.version > wire::kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", p.pid, " runs version ", st.version,
        " of the GPU fast-path library; this cryod speaks versions ", wire::kMinVersion, " to ",
        wire::kVersion,
        ": start the job with this node's library (or upgrade cryod). Nothing was stopped"));
  }
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::StatusOr<T> ParseFastpathReply(absl::string_view text, const FastpathProcess& p) {
  wire::Reply<T> r;
  std::string why;
  if (!wire::Decode(std::string(text), &r, &why)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the GPU fast path of pid ", p.pid, " sent a malformed reply: ", why));
  }
  if (!r.ok) return ReplyError(r.error, p);
  if constexpr (std::is_same_v<T, wire::StatusReply>) {
    CRYO_RETURN_IF_ERROR(CheckStatus(r.body, p));
  }
  return std::move(r.body);
}

template absl::StatusOr<wire::StatusReply> ParseFastpathReply(absl::string_view,
                                                              const FastpathProcess&);
template absl::StatusOr<wire::QuiescedReply> ParseFastpathReply(absl::string_view,
                                                                const FastpathProcess&);
template absl::StatusOr<wire::GatedReply> ParseFastpathReply(absl::string_view,
                                                             const FastpathProcess&);
template absl::StatusOr<wire::DrainedReply> ParseFastpathReply(absl::string_view,
                                                               const FastpathProcess&);
template absl::StatusOr<wire::ImportedReply> ParseFastpathReply(absl::string_view,
                                                                const FastpathProcess&);
template absl::StatusOr<wire::SavedReply> ParseFastpathReply(absl::string_view,
                                                             const FastpathProcess&);
template absl::StatusOr<wire::RefillReply> ParseFastpathReply(absl::string_view,
                                                              const FastpathProcess&);
template absl::StatusOr<wire::TrackReply> ParseFastpathReply(absl::string_view,
                                                             const FastpathProcess&);

std::string FastpathFileName(pid_t ns_pid, int k) {
  return absl::StrCat("gpu/fastpath-", ns_pid, ".", k, ".bin");
}

absl::StatusOr<std::vector<UniqueFd>> OpenFastpathFiles(const std::string& dir, pid_t ns_pid, int n,
                                                        bool write) {
  std::vector<UniqueFd> fds;
  if (write) CRYO_RETURN_IF_ERROR(fs::MakeDirs(absl::StrCat(dir, "/gpu"), 0700));
  for (int k = 0; k < n; ++k) {
    const std::string path = absl::StrCat(dir, "/", FastpathFileName(ns_pid, k));
    const int base = write ? O_WRONLY | O_CREAT | O_EXCL : O_RDONLY;
    // The store's data never passes through the page cache twice: written and read once.
    int fd = ::open(path.c_str(), base | O_CLOEXEC | O_NOFOLLOW | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), base | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", path));
    fds.emplace_back(fd);
  }
  return fds;
}

bool LoadsFastpathLibrary(const proc::ProcReader& proc, pid_t pid) {
  for (const std::string& path : proc.MappedPaths(pid)) {
    if (absl::EndsWith(path, absl::StrCat("/", wire::kLibraryName))) return true;
  }
  return false;
}

absl::StatusOr<UniqueFd> ConnectFastpath(const proc::ProcReader& proc, const FastpathProcess& p) {
  const pid_t own_pid = p.ns_pid > 0 ? p.ns_pid : p.pid;
  const std::string name = wire::SocketName(own_pid);
  const std::string theirs = proc.Link(p.pid, "ns/net");
  if (theirs.empty()) {
    return absl::NotFoundError(absl::StrCat("pid ", p.pid, " is gone"));
  }
  // By its name, or an alternate when another pid namespace's process on the same network
  // has its pid; only the job's own process is kept (SO_PEERCRED), never whoever holds a name.
  UniqueFd conn;
  int err = 0;
  pid_t held_by = 0;
  struct ucred cred {};
  if (theirs == proc::ProcReader().Link(::getpid(), "ns/net")) {
    conn = wire::ConnectToProcess(own_pid, p.pid, &held_by, &cred);
    err = errno;
  } else {
    // The socket lives in the job's network namespace: connect from a thread that joined it
    // (a socket stays in the namespace it was made in; the thread ends there).
    absl::Status entered = InNetNamespace(proc.PidPath(p.pid, "ns/net"), [&] {
      conn = wire::ConnectToProcess(own_pid, p.pid, &held_by, &cred);
      err = errno;
    });
    if (!entered.ok()) {
      return Annotate(entered, absl::StrCat("connecting to the GPU fast path of pid ", p.pid));
    }
  }
  if (!conn.ok()) {
    if (err == ECONNREFUSED || err == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("pid ", p.pid, " has no GPU fast path listening (@", name, ")"));
    }
    if (err == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the GPU fast path socket @", name, " of pid ", p.pid, " is held by pid ", held_by,
          ", not by the job (nor is any of its alternates): refused to talk to it"));
    }
    return ErrnoStatus(err, absl::StrCat("connecting to the GPU fast path of pid ", p.pid));
  }
  // Anyone in the job's network namespace can bind the name first: only the job's own process
  // (ConnectToProcess kept the peer whose pid is the job's), running as the job's user, is
  // spoken to (and given descriptors). The effective uid is the one a socket the job creates
  // carries.
  absl::StatusOr<criu::TaskCredentials> job = criu::ReadLiveCredentials(proc, p.pid);
  const int64_t job_uid = job.ok() ? int64_t{job->euid} : -1;
  if (cred.pid != p.pid || job_uid < 0 || static_cast<int64_t>(cred.uid) != job_uid) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the GPU fast path socket @", name, " of pid ", p.pid, " is held by pid ", cred.pid,
        " (uid ", cred.uid, "), not by the job (uid ", job_uid, "): refused to talk to it"));
  }
  return conn;
}

absl::StatusOr<wire::StatusReply> FastpathStatus(const proc::ProcReader& proc,
                                                 const FastpathProcess& p, absl::Duration timeout) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd fd, ConnectFastpath(proc, p));
  wire::Request req;
  req.op = wire::Op::kStatus;
  req.version = wire::kMinVersion;
  absl::Status st = Send(fd.get(), p, req, {});
  return st.ok() ? Receive<wire::StatusReply>(fd.get(), p, timeout) : st;
}

absl::StatusOr<WriteTracker> FastpathWriteTracker(const proc::ProcReader& proc,
                                                  const FastpathProcess& p,
                                                  absl::Duration timeout) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd fd, ConnectFastpath(proc, p));
  wire::Request req;
  req.op = wire::Op::kTrack;
  req.version = wire::kVersionTrack;
  CRYO_RETURN_IF_ERROR(Send(fd.get(), p, req, {}));
  std::vector<UniqueFd> fds;
  CRYO_ASSIGN_OR_RETURN(wire::TrackReply reply,
                        Receive<wire::TrackReply>(fd.get(), p, timeout, nullptr, &fds));
  if (fds.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the GPU fast path of pid ", p.pid, " sent ",
                                                   fds.size(), " descriptors for a userfaultfd"));
  }
  // Only a userfaultfd is taken: anything else the job sends is not cryod's to use.
  const std::string what = proc::ProcReader().Link(::getpid(), absl::StrCat("fd/", fds[0].get()));
  if (what != "anon_inode:[userfaultfd]") {
    return absl::InvalidArgumentError(absl::StrCat(
        "the GPU fast path of pid ", p.pid, " sent a descriptor of ", what, ", not a userfaultfd"));
  }
  return WriteTracker{std::move(fds[0]), reply.features, reply.fork_counter};
}

absl::StatusOr<std::unique_ptr<FastpathDrain>> FastpathDrain::Start(const proc::ProcReader& proc,
                                                                    const FastpathProcess& p,
                                                                    const FastpathDrainOptions& opt,
                                                                    const std::vector<int>& files) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd fd, ConnectFastpath(proc, p));
  std::unique_ptr<FastpathDrain> d(
      new FastpathDrain(std::move(fd), p, opt.reply_timeout, !files.empty(), opt.stop));
  wire::Request req;
  req.op = wire::Op::kDrain;
  req.version = wire::kMinVersion;
  req.threads = opt.threads;
  req.timeout_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(opt.quiesce_timeout));
  req.stripe_bytes = opt.stripe_bytes;
  req.files = static_cast<int>(files.size());
  if (p.memory) {
    // files is cryod's memfd (gpu_fastpath.h, "Memory").
    req.version = wire::kVersionMemory;
    req.memory = true;
    if (p.park > 0 && files.size() == 2) {
      // The memfd, then the park (gpu_fastpath.h, "Parking").
      req.version = wire::kVersionPark;
      req.park = p.park;
      req.park_device = p.device;
    } else {
      AskToFollow(p, files, &req);  // when cryod writes the files behind the drain
    }
  }
  if (opt.hold > absl::ZeroDuration()) {
    req.version = std::max(req.version, wire::kVersionCut);
    req.hold_ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(opt.hold), 1, wire::kMaxHoldMs);
    req.align = opt.align;
  }
  CRYO_RETURN_IF_ERROR(Send(d->fd_.get(), p, req, files));
  if (req.align) {
    CRYO_ASSIGN_OR_RETURN(d->gated_,
                          Receive<wire::GatedReply>(d->fd_.get(), p, opt.reply_timeout, opt.stop));
    d->held_ = true;
    return d;
  }
  if (req.hold_ms > 0) {
    CRYO_ASSIGN_OR_RETURN(
        d->quiesced_, Receive<wire::QuiescedReply>(d->fd_.get(), p, opt.reply_timeout, opt.stop));
    d->drained_.quiesce_ms = d->quiesced_.quiesce_ms;
    d->held_ = true;
    return d;
  }
  CRYO_ASSIGN_OR_RETURN(d->drained_,
                        Receive<wire::DrainedReply>(d->fd_.get(), p, opt.reply_timeout, opt.stop));
  return d;
}

absl::Status FastpathDrain::Align(uint64_t to, absl::Duration bound) {
  wire::Request req;
  req.op = wire::Op::kAlign;
  req.version = wire::kVersionCut;
  req.to = to;
  req.timeout_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(bound));
  CRYO_RETURN_IF_ERROR(Send(fd_.get(), p_, req, {}));
  absl::StatusOr<wire::QuiescedReply> q =
      Receive<wire::QuiescedReply>(fd_.get(), p_, timeout_, stop_);
  if (!q.ok()) {
    held_ = false;  // the library let go (or is gone): nothing left to release
    return q.status();
  }
  quiesced_ = *q;
  drained_.quiesce_ms = q->quiesce_ms;
  return absl::OkStatus();
}

absl::Status FastpathDrain::Go() {
  if (!held_) return absl::OkStatus();
  held_ = false;
  wire::Request req;
  req.op = wire::Op::kGo;
  req.version = wire::kVersionCut;
  CRYO_RETURN_IF_ERROR(Send(fd_.get(), p_, req, {}));
  CRYO_ASSIGN_OR_RETURN(drained_, Receive<wire::DrainedReply>(fd_.get(), p_, timeout_, stop_));
  return absl::OkStatus();
}

FastpathDrain::~FastpathDrain() {
  if (!fd_.ok()) return;
  if (held_) {
    // Let go of the cut and wait for the library's word that its gate is open again: the next
    // attempt at a cut must not find this one still held.
    ::shutdown(fd_.get(), SHUT_WR);
    // (No reply: the library is gone or its channel closed, which opens its gate too.)
    (void)Receive<wire::QuiescedReply>(fd_.get(), p_, absl::Seconds(10));
  }
}

absl::StatusOr<std::vector<FileDigest>> FastpathDrain::WaitSaved(
    bool stoppable, const std::function<bool()>& hard_stop) {
  if (!files_) return std::vector<FileDigest>{};
  if (saved_) return *saved_;
  absl::StatusOr<wire::SavedReply> saved =
      Receive<wire::SavedReply>(fd_.get(), p_, timeout_, stoppable ? stop_ : hard_stop);
  // Stopped waiting, the library still writing: the channel stays open for the undo, which
  // waits for the library's last word before it refills.
  if (absl::IsCancelled(saved.status())) return saved.status();
  fd_.reset();
  saved_ = saved.ok() ? absl::StatusOr<std::vector<FileDigest>>(saved->files)
                      : absl::StatusOr<std::vector<FileDigest>>(saved.status());
  return *saved_;
}

absl::StatusOr<wire::RefillReply> FastpathRefill(const proc::ProcReader& proc,
                                                 const FastpathProcess& p, int threads,
                                                 const std::vector<int>& files,
                                                 const std::vector<FileDigest>& expected,
                                                 absl::Duration timeout,
                                                 const std::function<bool()>& stop) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd fd, ConnectFastpath(proc, p));
  const wire::Request req = RefillRequest(p, threads, files, expected);
  absl::Status st = Send(fd.get(), p, req, files);
  absl::StatusOr<wire::RefillReply> r =
      st.ok() ? Receive<wire::RefillReply>(fd.get(), p, timeout, stop) : st;
  fd.reset();
  if (r.ok()) LogRefill(p, *r);
  return r;
}

absl::StatusOr<std::unique_ptr<FastpathHeldRefill>> FastpathHeldRefill::Start(
    const proc::ProcReader& proc, const FastpathProcess& p, int threads,
    const std::vector<int>& files, const std::vector<FileDigest>& expected, absl::Duration timeout,
    std::function<bool()> stop) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd fd, ConnectFastpath(proc, p));
  std::unique_ptr<FastpathHeldRefill> h(
      new FastpathHeldRefill(std::move(fd), p, timeout, std::move(stop)));
  wire::Request req = RefillRequest(p, threads, files, expected);
  req.version = std::max(req.version, wire::kVersionCut);
  // Its imports wait for the other processes' refills: as long as a refill may take.
  req.hold_ms = std::min<int64_t>(absl::ToInt64Milliseconds(timeout), wire::kMaxHoldMs);
  CRYO_RETURN_IF_ERROR(Send(h->fd_.get(), p, req, files));
  CRYO_ASSIGN_OR_RETURN(h->refilled_,
                        Receive<wire::RefillReply>(h->fd_.get(), p, timeout, h->stop_));
  LogRefill(p, h->refilled_);
  return h;
}

FastpathHeldRefill::~FastpathHeldRefill() = default;

absl::StatusOr<wire::ImportedReply> FastpathHeldRefill::Go(const std::vector<uint64_t>& ids,
                                                           const std::vector<int>& fds) {
  // At most kMaxFiles descriptors a message: more go in several, each but the last with "more"
  // (a library of version 4 or later; the checkpoint refused an older one with that many).
  const size_t batch = static_cast<size_t>(wire::kMaxFiles);
  for (size_t at = 0; at == 0 || at < fds.size(); at += batch) {
    const size_t n = std::min(batch, fds.size() - at);
    wire::Request req;
    req.op = wire::Op::kGo;
    req.more = at + n < fds.size();
    req.version = req.more ? wire::kVersionBatchedGo : wire::kVersionCut;
    req.imports.assign(ids.begin() + at, ids.begin() + at + n);
    req.files = static_cast<int>(n);
    CRYO_RETURN_IF_ERROR(
        Send(fd_.get(), p_, req, std::vector<int>(fds.begin() + at, fds.begin() + at + n)));
  }
  auto r = Receive<wire::ImportedReply>(fd_.get(), p_, timeout_, stop_);
  fd_.reset();
  return r;
}

namespace {

class ClientFastpath : public Fastpath {
 public:
  explicit ClientFastpath(const proc::ProcReader* proc) : proc_(*proc) {}

  absl::StatusOr<std::vector<FastpathProcess>> Find(const std::vector<pid_t>& pids) override {
    std::vector<FastpathProcess> out;
    for (pid_t pid : pids) {
      // Only a process that maps the library can have its channel: others are not asked.
      if (!LoadsFastpathLibrary(proc_, pid)) continue;
      FastpathProcess p{pid, proc_.NsPid(pid)};
      if (p.ns_pid <= 0) p.ns_pid = pid;
      absl::StatusOr<wire::StatusReply> st = FastpathStatus(proc_, p, absl::Seconds(10));
      if (absl::IsNotFound(st.status())) continue;  // loaded, CUDA not started: nothing to move
      if (absl::IsPermissionDenied(st.status())) {
        // Someone else holds the job's socket name: it is told nothing, and whatever the job
        // holds on the GPU goes the driver's way.
        CRYO_LOG(Warning) << st.status();
        continue;
      }
      if (!st.ok()) return st.status();
      if (!st->disabled.empty()) continue;
      if (auto mc = st->calls.find("cuMulticastCreate"); mc != st->calls.end() && mc->second > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "pid ", pid,
            " uses NVLink multicast (NVLS: cuMulticastCreate), which spans GPUs and which neither "
            "the driver nor cryo can save: run the job with NCCL_NVLS_ENABLE=0. Nothing was "
            "stopped"));
      }
      if (st->state != wire::State::kRunning) {
        return absl::FailedPreconditionError(absl::StrCat(
            "pid ", pid, ": its GPU memory is out of the GPU (fast path state '",
            wire::StateName(st->state),
            "'), left so by an operation that did not finish; cryod brings it back at its next "
            "start (or: cryo-gpuctl fastpath-refill)"));
      }
      p.bytes = st->owned_bytes;
      p.allocations = st->owned_allocations;
      p.version = st->version;
      p.host_registered = st->calls.count("cuMemHostRegister_v2") > 0;
      p.device = st->device;
      out.push_back(p);
    }
    return out;
  }

  absl::StatusOr<std::unique_ptr<FastpathDrainHandle>> Drain(
      const FastpathProcess& p, const FastpathDrainOptions& opt,
      const std::vector<int>& files) override {
    CRYO_ASSIGN_OR_RETURN(std::unique_ptr<FastpathDrain> d,
                          FastpathDrain::Start(proc_, p, opt, files));
    return std::unique_ptr<FastpathDrainHandle>(std::move(d));
  }

  // (30 minutes: the outer bound of a refill of a whole GPU's memory from a slow store; the
  // caller's `stop` ends the wait sooner.)
  absl::StatusOr<wire::RefillReply> Refill(const FastpathProcess& p, int threads,
                                           const std::vector<int>& files,
                                           const std::vector<FileDigest>& expected,
                                           const std::function<bool()>& stop) override {
    return FastpathRefill(proc_, p, threads, files, expected, absl::Minutes(30), stop);
  }

  absl::StatusOr<std::unique_ptr<FastpathRefillHandle>> RefillHeld(
      const FastpathProcess& p, int threads, const std::vector<int>& files,
      const std::vector<FileDigest>& expected, const std::function<bool()>& stop) override {
    CRYO_ASSIGN_OR_RETURN(
        std::unique_ptr<FastpathHeldRefill> h,
        FastpathHeldRefill::Start(proc_, p, threads, files, expected, absl::Minutes(30), stop));
    return std::unique_ptr<FastpathRefillHandle>(std::move(h));
  }

  absl::StatusOr<wire::StatusReply> Status(const FastpathProcess& p) override {
    return FastpathStatus(proc_, p, absl::Seconds(10));
  }

  absl::StatusOr<WriteTracker> TrackWrites(const FastpathProcess& p) override {
    return FastpathWriteTracker(proc_, p, absl::Seconds(10));
  }

 private:
  const proc::ProcReader& proc_;
};

}  // namespace

std::unique_ptr<Fastpath> NewFastpath(const proc::ProcReader* proc) {
  return std::make_unique<ClientFastpath>(proc);
}

}  // namespace cryo::gpu
