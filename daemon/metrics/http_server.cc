#include "daemon/metrics/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/status.h"

namespace cryo::metrics {

std::string HttpRequest::Param(const std::string& key) const {
  auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

HttpRoutes& HttpRoutes::Exact(std::string path, HttpHandler handler) {
  exact_[std::move(path)] = std::move(handler);
  return *this;
}

HttpRoutes& HttpRoutes::Exact(std::string path, std::function<HttpResponse()> handler) {
  return Exact(std::move(path), [h = std::move(handler)](const HttpRequest&) { return h(); });
}

HttpRoutes& HttpRoutes::Prefix(std::string prefix, HttpHandler handler) {
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  prefix_.emplace_back(std::move(prefix), std::move(handler));
  std::stable_sort(prefix_.begin(), prefix_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return *this;
}

const HttpHandler* HttpRoutes::Match(const std::string& path, std::string* rest) const {
  rest->clear();
  if (auto it = exact_.find(path); it != exact_.end()) return &it->second;
  for (const auto& [prefix, handler] : prefix_) {
    if (path == prefix) return &handler;
    if (prefix == "/" && !path.empty() && path[0] == '/') {
      *rest = path.substr(1);
      return &handler;
    }
    if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
        path[prefix.size()] == '/') {
      *rest = path.substr(prefix.size() + 1);
      return &handler;
    }
  }
  return nullptr;
}

bool PercentDecode(const std::string& in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

bool ParseRequestLine(const std::string& line, HttpRequest* req) {
  std::string l = line;
  while (!l.empty() && (l.back() == '\r' || l.back() == '\n')) l.pop_back();
  std::vector<std::string> parts = absl::StrSplit(l, ' ', absl::SkipEmpty());
  if (parts.size() < 2 || parts.size() > 3 || parts[1].empty() || parts[1][0] != '/') return false;
  req->method = parts[0];
  const std::string& target = parts[1];
  const size_t q = target.find('?');
  if (!PercentDecode(target.substr(0, q), false, &req->path)) return false;
  req->query = q == std::string::npos ? "" : target.substr(q + 1);
  req->params.clear();
  for (absl::string_view kv : absl::StrSplit(req->query, '&', absl::SkipEmpty())) {
    const size_t eq = kv.find('=');
    std::string k, v;
    if (!PercentDecode(std::string(kv.substr(0, eq)), true, &k)) return false;
    if (eq != absl::string_view::npos && !PercentDecode(std::string(kv.substr(eq + 1)), true, &v)) {
      return false;
    }
    req->params[k] = v;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const std::string& address,
                                                               HttpRoutes routes) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not HOST:PORT"));
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
  return std::unique_ptr<HttpServer>(new HttpServer(fd, bound, std::move(routes)));
}

HttpServer::HttpServer(int fd, int port, HttpRoutes routes)
    : fd_(fd), port_(port), routes_(std::move(routes)) {
  thread_ = std::thread([this] { Loop(); });
}

HttpServer::~HttpServer() {
  wake_.Wake();
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
}

void HttpServer::Loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_.read_fd(), POLLIN, 0}};
    int n = ::poll(p, 2, -1);
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
  const std::string line = req.substr(0, req.find('\n'));
  const bool head = line.rfind("HEAD ", 0) == 0;
  HttpResponse resp = Dispatch(line);
  const char* reason = resp.code == 200   ? "OK"
                       : resp.code == 400 ? "Bad Request"
                       : resp.code == 404 ? "Not Found"
                       : resp.code == 405 ? "Method Not Allowed"
                       : resp.code == 500 ? "Internal Server Error"
                       : resp.code == 503 ? "Service Unavailable"
                                          : "Error";
  std::string out =
      absl::StrCat("HTTP/1.0 ", resp.code, " ", reason, "\r\nContent-Type: ", resp.content_type,
                   "\r\nContent-Length: ", resp.body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head) out += resp.body;
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = ::send(conn, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += n;
  }
}

HttpResponse HttpServer::Dispatch(const std::string& request_line) {
  HttpRequest r;
  if (!ParseRequestLine(request_line, &r)) return {400, "text/plain", "bad request\n"};
  if (r.method != "GET" && r.method != "HEAD") return {405, "text/plain", "method not allowed\n"};
  const HttpHandler* h = routes_.Match(r.path, &r.rest);
  if (h == nullptr) return {404, "text/plain", "not found\n"};
  return (*h)(r);
}

}  // namespace cryo::metrics
