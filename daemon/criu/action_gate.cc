#include "daemon/criu/action_gate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cryo::criu {
namespace {

std::string ArrivedFifo(const std::string& fifo) { return fifo + ".arrived"; }

// A FIFO made afresh and held open for reading and writing: opening never waits for the other
// side, and what is written stays in it until the other side reads it.
absl::StatusOr<UniqueFd> MakeGateFifo(const std::string& path) {
  ::unlink(path.c_str());
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return absl::InternalError(absl::StrCat("making the gate ", path, ": ", std::strerror(errno)));
  }
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.ok()) {
    const int err = errno;
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat("opening the gate ", path, ": ", std::strerror(err)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ActionGate>> ActionGate::Open(std::string fifo, std::string script,
                                                             std::string action) {
  auto fd = MakeGateFifo(fifo);
  if (!fd.ok()) return fd.status();
  auto arrived = MakeGateFifo(ArrivedFifo(fifo));
  if (!arrived.ok()) {
    ::unlink(fifo.c_str());
    return arrived.status();
  }
  return std::unique_ptr<ActionGate>(new ActionGate(
      std::move(fifo), std::move(script), std::move(action), *std::move(fd), *std::move(arrived)));
}

ActionGate::~ActionGate() { Withdraw(); }

void ActionGate::Withdraw() {
  ::unlink(fifo_.c_str());
  ::unlink(ArrivedFifo(fifo_).c_str());
}

std::vector<std::string> ActionGate::Args() const { return {"--action-script", script_}; }

std::vector<std::string> ActionGate::Env() const {
  return {absl::StrCat(kGateFifoEnv, "=", fifo_), absl::StrCat(kGateOwnerEnv, "=", ::getpid()),
          absl::StrCat(kGateActionEnv, "=", action_)};
}

bool ActionGate::WaitArrival(absl::Duration timeout) {
  pollfd p{arrived_.get(), POLLIN, 0};
  const int ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout)));
  if (::poll(&p, 1, ms) <= 0) return false;
  char buf[64];
  return ::read(arrived_.get(), buf, sizeof(buf)) > 0;
}

absl::Status ActionGate::Tell(bool ok) {
  const std::string line = absl::StrCat(ok ? kGateOk : "refused", "\n");
  if (::write(fd_.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return absl::InternalError(
        absl::StrCat("telling the gate ", fifo_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int WaitAtGate(int poll_ms) {
  const char* action = std::getenv("CRTOOLS_SCRIPT_ACTION");
  const char* gated = std::getenv(kGateActionEnv);
  if (gated == nullptr) gated = kRestoreAction;  // fails closed where it was not told
  if (action == nullptr || std::strcmp(action, gated) != 0) return 0;
  auto refuse = [action](const std::string& why) {
    std::fprintf(stderr, "cryo gate at CRIU's %s: %s; CRIU undoes its call\n", action, why.c_str());
    return 1;
  };
  const char* fifo = std::getenv(kGateFifoEnv);
  const char* owner_text = std::getenv(kGateOwnerEnv);
  int owner = 0;
  if (fifo == nullptr || owner_text == nullptr || !absl::SimpleAtoi(owner_text, &owner) ||
      owner <= 0) {
    return refuse(absl::StrCat(kGateFifoEnv, " and ", kGateOwnerEnv, " must name the gate"));
  }
  // Read and write, like cryod: never waits to open, and is not ended by cryod's close (whose
  // being gone is seen by its pid instead).
  const UniqueFd fd(::open(fifo, O_RDWR | O_CLOEXEC));
  if (!fd.ok()) return refuse(absl::StrCat("opening ", fifo, ": ", std::strerror(errno)));
  {
    const std::string arrived_path = ArrivedFifo(fifo);
    const UniqueFd arrived(::open(arrived_path.c_str(), O_RDWR | O_CLOEXEC));
    const std::string line = absl::StrCat(action, "\n");
    if (!arrived.ok() ||
        ::write(arrived.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return refuse(absl::StrCat("telling cryod at ", arrived_path, ": ", std::strerror(errno)));
    }
  }
  std::string got;
  for (;;) {
    pollfd p{fd.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, poll_ms);
    if (n < 0 && errno != EINTR) return refuse(absl::StrCat("poll: ", std::strerror(errno)));
    if (n > 0) {
      char buf[64];
      const ssize_t r = ::read(fd.get(), buf, sizeof(buf));
      if (r <= 0) return refuse("the gate closed without a verdict");
      got.append(buf, static_cast<size_t>(r));
      if (got.find('\n') != std::string::npos) break;
      if (got.size() > 256) return refuse("an unreadable verdict");
      continue;
    }
    if (::kill(owner, 0) != 0 && errno == ESRCH) {
      return refuse(absl::StrCat("cryod (pid ", owner, ") is gone"));
    }
    if (::access(fifo, F_OK) != 0) return refuse("cryod withdrew the gate without a verdict");
  }
  const std::string verdict(absl::StripAsciiWhitespace(got.substr(0, got.find('\n'))));
  if (verdict == kGateOk) return 0;
  return refuse(absl::StrCat("cryod's verdict: ", verdict));
}

}  // namespace cryo::criu
