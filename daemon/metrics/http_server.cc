#include "metrics/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace cryo::metrics {

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(
    const std::string& address, std::map<std::string, HttpHandler> handlers) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", address,
                                                   "' is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': ", gai_strerror(rc)));
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    return ErrnoStatus(errno, "socket");
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
    int e = errno;
    ::freeaddrinfo(res);
    ::close(fd);
    return ErrnoStatus(e, absl::StrCat("listen on ", address));
  }
  ::freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  int bound = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return std::unique_ptr<HttpServer>(new HttpServer(fd, bound, std::move(handlers)));
}

HttpServer::HttpServer(int fd, int port, std::map<std::string, HttpHandler> handlers)
    : fd_(fd), port_(port), handlers_(std::move(handlers)) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { Loop(); });
}

HttpServer::~HttpServer() {
  if (wake_[1] >= 0) {
    char c = 0;
    ssize_t u = ::write(wake_[1], &c, 1);
    (void)u;
  }
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
  if (wake_[0] >= 0) ::close(wake_[0]);
  if (wake_[1] >= 0) ::close(wake_[1]);
}

void HttpServer::Loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int n = ::poll(p, wake_[0] >= 0 ? 2 : 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN)) return;
    if (p[0].revents & POLLIN) {
      int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn >= 0) {
        Serve(conn);
        ::close(conn);
      }
    }
  }
}

void HttpServer::Serve(int conn) {
  // One request per connection; a slow client gets two seconds.
  timeval tv{2, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos &&
         req.size() < 16384) {
    ssize_t n = ::recv(conn, buf, sizeof(buf), 0);
    if (n <= 0) break;
    req.append(buf, n);
  }
  std::vector<std::string> first = absl::StrSplit(req.substr(0, req.find('\n')), ' ');
  HttpResponse resp;
  if (first.size() < 2 || (first[0] != "GET" && first[0] != "HEAD")) {
    resp = {405, "text/plain", "method not allowed\n"};
  } else {
    std::string path = first[1].substr(0, first[1].find('?'));
    auto it = handlers_.find(path);
    resp = it == handlers_.end() ? HttpResponse{404, "text/plain", "not found\n"} : it->second();
  }
  const char* reason = resp.code == 200 ? "OK" : resp.code == 404 ? "Not Found" : "Error";
  std::string out = absl::StrCat("HTTP/1.0 ", resp.code, " ", reason,
                                 "\r\nContent-Type: ", resp.content_type,
                                 "\r\nContent-Length: ", resp.body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (first.empty() || first[0] != "HEAD") out += resp.body;
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = ::send(conn, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += n;
  }
}

}  // namespace cryo::metrics
