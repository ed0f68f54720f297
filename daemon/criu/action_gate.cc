#include "daemon/criu/action_gate.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cryo::criu {
namespace {

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
  auto arrived = MakeGateFifo(GateArrivalFifo(fifo));
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
  ::unlink(GateArrivalFifo(fifo_).c_str());
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

}  // namespace cryo::criu
