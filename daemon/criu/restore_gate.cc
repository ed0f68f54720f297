#include "daemon/criu/restore_gate.h"

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

absl::StatusOr<std::unique_ptr<RestoreGate>> RestoreGate::Open(std::string fifo,
                                                               std::string script) {
  ::unlink(fifo.c_str());
  if (::mkfifo(fifo.c_str(), 0600) != 0) {
    return absl::InternalError(
        absl::StrCat("making the restore gate ", fifo, ": ", std::strerror(errno)));
  }
  // O_RDWR: opening never waits for the other side, and the verdict stays in the FIFO until
  // the script reads it.
  UniqueFd fd(::open(fifo.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.ok()) {
    const int err = errno;
    ::unlink(fifo.c_str());
    return absl::InternalError(
        absl::StrCat("opening the restore gate ", fifo, ": ", std::strerror(err)));
  }
  return std::unique_ptr<RestoreGate>(
      new RestoreGate(std::move(fifo), std::move(script), std::move(fd)));
}

RestoreGate::~RestoreGate() { Withdraw(); }

void RestoreGate::Withdraw() { ::unlink(fifo_.c_str()); }

std::vector<std::string> RestoreGate::Args() const { return {"--action-script", script_}; }

std::vector<std::string> RestoreGate::Env() const {
  return {absl::StrCat(kGateFifoEnv, "=", fifo_), absl::StrCat(kGateOwnerEnv, "=", ::getpid())};
}

absl::Status RestoreGate::Tell(bool ok) {
  const std::string line = absl::StrCat(ok ? kGateOk : "refused", "\n");
  if (::write(fd_.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return absl::InternalError(
        absl::StrCat("telling the restore gate ", fifo_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int WaitAtRestoreGate(int poll_ms) {
  const char* action = std::getenv("CRTOOLS_SCRIPT_ACTION");
  if (action == nullptr || std::strcmp(action, kGateAction) != 0) return 0;
  auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "cryo restore gate: %s; the restored tasks are not resumed\n",
                 why.c_str());
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
