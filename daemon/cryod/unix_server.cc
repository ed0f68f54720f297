#include "daemon/cryod/unix_server.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::cryod {

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Create(const std::string& path,
                                                                   std::set<int> allowed_uids,
                                                                   grpc::Server* server) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    CRYO_RETURN_IF_ERROR(fs::MakeDirs(path.substr(0, slash), 0755));
  }
  // A leftover socket from a dead cryod is removed; a live one is not ours to take.
  if (fs::Exists(path)) {
    int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(probe);
    if (live) {
      return absl::FailedPreconditionError(
          absl::StrCat("another process is serving ", path, " (is cryod already running?)"));
    }
    ::unlink(path.c_str());
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, "socket");
  mode_t old = ::umask(0177);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int e = errno;
  ::umask(old);
  if (rc != 0) {
    ::close(fd);
    return ErrnoStatus(e, absl::StrCat("bind ", path));
  }
  if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 64) != 0) {
    int e2 = errno;
    ::close(fd);
    return ErrnoStatus(e2, absl::StrCat("listen ", path));
  }
  return std::unique_ptr<UnixListener>(new UnixListener(path, fd, std::move(allowed_uids), server));
}

UnixListener::UnixListener(std::string path, int fd, std::set<int> allowed, grpc::Server* server)
    : path_(std::move(path)), fd_(fd), allowed_(std::move(allowed)), server_(server) {
  thread_ = std::thread([this] { Loop(); });
}

UnixListener::~UnixListener() {
  wake_.Wake();
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
  ::unlink(path_.c_str());
}

void UnixListener::Loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_.read_fd(), POLLIN, 0}};
    int n = ::poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN)) return;
    if (!(p[0].revents & POLLIN)) continue;
    int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        !allowed_.count(static_cast<int>(cred.uid))) {
      CRYO_LOG(Warning) << "refused connection on " << path_ << " from uid " << cred.uid << " (pid "
                        << cred.pid << "): not in allowed_uids";
      ::close(conn);
      continue;
    }
    // gRPC takes ownership of the fd.
    ::fcntl(conn, F_SETFL, ::fcntl(conn, F_GETFL) | O_NONBLOCK);
    grpc::AddInsecureChannelFromFd(server_, conn);
  }
}

}  // namespace cryo::cryod
