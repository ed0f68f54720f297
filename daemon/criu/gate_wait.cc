// The gate's side alone (cryo-gate, and cryo-nsexec run as the action script): a library of its
// own, so that the program CRIU starts at each action loads only what this needs.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/criu/action_gate.h"

namespace cryo::criu {

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
    const std::string arrived_path = GateArrivalFifo(fifo);
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
