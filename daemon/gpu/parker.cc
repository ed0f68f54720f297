#include "daemon/gpu/parker.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/poll.h"
#include "lib/base/status.h"
#include "lib/base/subprocess.h"
#include "lib/contract/gpu_fastpath_wire.h"
#include "nlohmann/json.hpp"

namespace cryo::gpu {
namespace {

namespace wire = contract::gpu_fastpath;

// One message from the parking process within `timeout`: its JSON and descriptors.
absl::StatusOr<nlohmann::json> ReceiveFrom(int sock, absl::Duration timeout,
                                           std::vector<UniqueFd>* fds) {
  pollfd p{sock, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  } while (r < 0 && errno == EINTR);
  if (r == 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("the parking process said nothing within ", absl::FormatDuration(timeout)));
  }
  std::string text;
  if (r < 0 || !wire::ReceiveMessage(sock, &text, fds)) {
    return absl::UnavailableError("the parking process ended before it answered");
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return absl::InternalError("the parking process answered no JSON");
  if (!j.value("ok", false)) {
    return absl::UnavailableError(
        absl::StrCat("the parking process: ", j.value("error", std::string("failed"))));
  }
  return j;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Parker>> Parker::Start(const ParkerOptions& opt,
                                                      const std::string& device, uint64_t bytes,
                                                      uint32_t fill_files) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair for a parking process");
  }
  UniqueFd mine(sv[0]), theirs(sv[1]);
  SpawnOptions so;
  so.argv = {opt.binary, "--device", device, "--bytes", std::to_string(bytes)};
  if (fill_files > 0) {
    so.argv.push_back("--ring-files");
    so.argv.push_back(std::to_string(fill_files));
  }
  if (!opt.libcuda.empty()) {
    so.argv.push_back("--libcuda");
    so.argv.push_back(opt.libcuda);
  }
  so.stdin_fd = theirs.get();
  // Not die_with_parent: that signal follows the thread that spawns, and StartParkers spawns
  // from threads that end at once. The socket closing (with cryod, at the latest) ends it.
  so.die_with_parent = false;
  std::unique_ptr<Parker> p(new Parker());
  const absl::Time t0 = absl::Now();
  CRYO_ASSIGN_OR_RETURN(p->pid_, Spawn(so));
  theirs.reset();
  p->sock_ = std::move(mine);
  p->device_ = device;
  p->timeout_ = opt.timeout;
  std::vector<UniqueFd> fds;
  CRYO_ASSIGN_OR_RETURN(nlohmann::json hello, ReceiveFrom(p->sock_.get(), opt.timeout, &fds));
  if (fds.size() != 1 || !hello.contains("bytes") || !hello["bytes"].is_number_unsigned() ||
      hello["bytes"].get<uint64_t>() < bytes) {
    return absl::InternalError("the parking process answered without its memory");
  }
  p->bytes_ = hello["bytes"].get<uint64_t>();
  p->park_ = std::move(fds[0]);
  p->started_in_ = absl::Now() - t0;
  return p;
}

Parker::~Parker() {
  if (copied_.valid() || filled_.valid()) {
    // A copy nobody waits for (the checkpoint gave up): its wait ends with the socket.
    ::shutdown(sock_.get(), SHUT_RDWR);
    if (copied_.valid()) copied_.wait();
    if (filled_.valid()) filled_.wait();
  }
  sock_.reset();  // it ends on its own once the socket closes
  park_.reset();
  if (pid_ <= 0) return;
  if (!PollUntil([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, absl::Seconds(5))) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Parker::LetGoInBackground(std::vector<std::unique_ptr<Parker>> parkers) {
  std::erase(parkers, nullptr);
  if (parkers.empty()) return;
  for (auto& p : parkers) {
    if (p->copied_.valid() || p->filled_.valid()) continue;  // the destructor ends those
    p->sock_.reset();                                        // each begins to exit now
    p->park_.reset();
  }
  std::thread([ps = std::move(parkers), from = absl::Now()]() mutable {
    for (auto& p : ps) {
      const std::string device = p->device_;
      p.reset();
      CRYO_LOG(Info) << "parking process on GPU " << device << " ended "
                     << absl::ToInt64Milliseconds(absl::Now() - from) << " ms after it was let go";
    }
  }).detach();
}

absl::Status Parker::BeginCopy(int memfd, std::shared_ptr<const ProgressPage> page,
                               uint64_t bytes) {
  if (copied_.valid()) return absl::FailedPreconditionError("the park is being copied already");
  const std::string req = nlohmann::json{{"op", "copy"}, {"bytes", bytes}}.dump();
  if (!wire::SendMessage(sock_.get(), req, {memfd, page->fd()})) {
    page->FailIfPending();
    return ErrnoStatus(errno, "asking the parking process for its copy");
  }
  const int sock = sock_.get();
  const std::string device = device_;
  // Its answer comes once the copy is done: as long as the copy takes (minutes for a whole
  // GPU at the slowest), so only its death or a failure ends the wait early.
  copied_ = std::async(std::launch::async, [sock, page, bytes, device]() -> absl::Status {
    std::vector<UniqueFd> fds;
    absl::StatusOr<nlohmann::json> r = ReceiveFrom(sock, absl::Hours(1), &fds);
    if (!r.ok()) {
      page->FailIfPending();
      return r.status();
    }
    CRYO_LOG(Info) << "park on GPU " << device << ": " << bytes
                   << " bytes copied into cryod's memory in " << r->value("copy_ms", int64_t{-1})
                   << " ms; its GPU memory is free again";
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status Parker::WaitCopied() {
  if (!copied_.valid()) return absl::FailedPreconditionError("the park was never copied");
  return copied_.get();
}

absl::Status Parker::BeginFill(const std::vector<int>& files, uint64_t stripe, uint64_t bytes) {
  if (copied_.valid() || filled_.valid()) {
    return absl::FailedPreconditionError("the park is in use already");
  }
  const std::string req =
      nlohmann::json{{"op", "fill"}, {"bytes", bytes}, {"stripe", stripe}}.dump();
  if (!wire::SendMessage(sock_.get(), req, files)) {
    return ErrnoStatus(errno, "asking the parking process to read the GPU data");
  }
  const int sock = sock_.get();
  const size_t n = files.size();
  const std::string device = device_;
  const absl::Duration started = started_in_;
  // As long as the read takes (the store's pace): only its death or a failure ends it early.
  filled_ = std::async(
      std::launch::async,
      [sock, n, bytes, device, started]() -> absl::StatusOr<std::vector<FileDigest>> {
        std::vector<UniqueFd> fds;
        CRYO_ASSIGN_OR_RETURN(nlohmann::json r, ReceiveFrom(sock, absl::Hours(1), &fds));
        const nlohmann::json& list = r.contains("files") ? r["files"] : r;
        if (!list.is_array() || list.size() != n) {
          return absl::InternalError("the parking process answered the read without its files");
        }
        std::vector<FileDigest> out;
        for (const auto& f : list) {
          if (!f.is_object() || !f.contains("size") || !f["size"].is_number_unsigned() ||
              !f.contains("checksum") || !f["checksum"].is_string()) {
            return absl::InternalError(
                "the parking process answered a file without its size and checksum");
          }
          out.push_back({f["size"].get<uint64_t>(), f["checksum"].get<std::string>()});
        }
        CRYO_LOG(Info) << "park on GPU " << device << ": " << bytes << " bytes read from " << n
                       << " files of the store in " << r.value("fill_ms", int64_t{-1})
                       << " ms (waited " << r.value("setup_ms", int64_t{-1})
                       << " ms for the pinned ring; the first file done at "
                       << r.value("first_ms", int64_t{-1}) << " ms, the last at "
                       << r.value("last_ms", int64_t{-1}) << "); before it, the process took "
                       << absl::ToInt64Milliseconds(started) << " ms to start ("
                       << r.value("start_ms", int64_t{-1})
                       << " of them its driver and the park) and " << r.value("map_ms", int64_t{-1})
                       << " ms to map the park";
        return out;
      });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FileDigest>> Parker::WaitFilled() {
  if (!filled_.valid()) return absl::FailedPreconditionError("the park was never filled");
  return filled_.get();
}

}  // namespace cryo::gpu
