#include "lib/contract/gpu_fastpath_wire.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/contract/gpu_fastpath.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "lib/contract/hex.h"

namespace cryo::contract::gpu_fastpath {

bool SendMessage(int fd, const std::string& text, const std::vector<int>& fds) {
  if (fds.size() > static_cast<size_t>(kMaxFiles) || text.size() > kMaxMessage) {
    errno = EMSGSIZE;
    return false;
  }
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> cbuf;
  if (!fds.empty()) {
    cbuf.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
    msg.msg_control = cbuf.data();
    msg.msg_controllen = cbuf.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    return n == static_cast<ssize_t>(text.size());
  }
}

bool ReceiveMessage(int fd, std::string* text, std::vector<UniqueFd>* fds) {
  std::string buf(kMaxMessage + 1, '\0');
  iovec iov{buf.data(), buf.size()};
  std::vector<char> cbuf(CMSG_SPACE(sizeof(int) * kMaxFiles), 0);
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf.data();
  msg.msg_controllen = cbuf.size();
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  fds->clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(got);
    }
  }
  const bool too_big = n > static_cast<ssize_t>(kMaxMessage) || (msg.msg_flags & MSG_CTRUNC) != 0;
  if (n <= 0 || too_big) {
    fds->clear();
    if (too_big) errno = EMSGSIZE;
    return false;
  }
  text->assign(buf.data(), n);
  return true;
}

std::string SocketName(pid_t pid) { return std::string(kSocketPrefix) + std::to_string(pid); }

std::string AlternateSocketName(pid_t pid, int k) {
  return k == 0 ? SocketName(pid) : SocketName(pid) + "." + std::to_string(k);
}

UniqueFd ConnectToProcess(pid_t pid, pid_t peer_pid, pid_t* held_by, ucred* peer) {
  bool someone = false;
  for (int k = 0; k < kAlternateNames; ++k) {
    UniqueFd fd = ConnectAbstract(AlternateSocketName(pid, k));
    if (!fd.ok()) continue;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid == peer_pid &&
        peer_pid > 0) {
      if (peer != nullptr) *peer = cred;
      return fd;
    }
    if (!someone && held_by != nullptr) *held_by = cred.pid;
    someone = true;
  }
  errno = someone ? EPERM : ECONNREFUSED;
  return UniqueFd();
}

UniqueFd ConnectAbstract(const std::string& name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(a.sun_path)) {
    errno = ENAMETOOLONG;
    return UniqueFd();
  }
  memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return fd;
  int r;
  do {
    r = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), len);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    const int e = errno;
    fd.reset();
    errno = e;  // (close may have set its own)
  }
  return fd;
}

bool AnswerChallenge(int fd, pid_t pid, const Challenge& c, std::string* why) {
  unsigned char bytes[kChallengeBytes];
  const size_t n = c.length < sizeof(bytes) ? c.length : sizeof(bytes);
  iovec local{bytes, n};
  iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(c.address)), n};
  if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(n)) {
    *why = std::string("reading the library's challenge in pid ") + std::to_string(pid) + ": " +
           strerror(errno);
    return false;
  }
  Request proof;
  proof.op = Op::kProve;
  proof.version = kVersionProve;
  proof.secret = HexEncode(bytes, n);
  if (!SendMessage(fd, Encode(proof))) {
    *why = std::string("sending the proof: ") + strerror(errno);
    return false;
  }
  return true;
}

}  // namespace cryo::contract::gpu_fastpath
