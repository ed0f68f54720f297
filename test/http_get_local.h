// One plain HTTP/1.0 GET to a server on loopback, for tests of cryod's and the shim's HTTP
// endpoints (unit and e2e alike).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace cryo {

// The whole answer (status line, headers, body), or "" when nothing came.
inline std::string HttpGetLocal(int port, const std::string& path) {
  std::string out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{60, 0};  // a generous bound: a stuck endpoint fails the test, not hangs it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  }
  ::close(fd);
  return out;
}

}  // namespace cryo
