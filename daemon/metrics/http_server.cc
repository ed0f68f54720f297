#include "daemon/metrics/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "lib/base/log.h"
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

const char* ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return code >= 500 ? "Internal Server Error" : "Error";
  }
}

bool IsLoopbackAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

HttpRoutes& HttpRoutes::Post(std::string path, HttpHandler handler) {
  post_[std::move(path)] = std::move(handler);
  return *this;
}

const HttpHandler* HttpRoutes::MatchPost(const std::string& path) const {
  auto it = post_.find(path);
  return it == post_.end() ? nullptr : &it->second;
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

bool ParseTarget(absl::string_view target, HttpRequest* req) {
  if (target.empty() || target[0] != '/') return false;
  const size_t q = target.find('?');
  if (!PercentDecode(std::string(target.substr(0, q)), false, &req->path)) return false;
  req->query = q == absl::string_view::npos ? "" : std::string(target.substr(q + 1));
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

bool ParseRequestLine(const std::string& line, HttpRequest* req) {
  std::string l = line;
  while (!l.empty() && (l.back() == '\r' || l.back() == '\n')) l.pop_back();
  std::vector<std::string> parts = absl::StrSplit(l, ' ', absl::SkipEmpty());
  if (parts.size() < 2 || parts.size() > 3) return false;
  req->method = parts[0];
  return ParseTarget(parts[1], req);
}

HttpResponse Dispatch(const HttpRoutes& routes, absl::string_view method, absl::string_view target,
                      absl::string_view authorization, absl::string_view body) {
  HttpRequest r;
  r.method = std::string(method);
  if (!ParseTarget(target, &r)) return {400, "text/plain", "bad request\n"};
  if (body.size() > kMaxRequestBody) return {413, "text/plain", "request body too long\n"};
  r.authorization = std::string(authorization);
  if (r.method == "POST") {
    const HttpHandler* h = routes.MatchPost(r.path);
    if (h == nullptr) return {405, "text/plain", "method not allowed\n"};
    r.body = std::string(body);
    return (*h)(r);
  }
  if (r.method != "GET" && r.method != "HEAD") return {405, "text/plain", "method not allowed\n"};
  const HttpHandler* h = routes.Match(r.path, &r.rest);
  if (h == nullptr) return {404, "text/plain", "not found\n"};
  return (*h)(r);
}

HttpResponse DispatchRaw(const HttpRoutes& routes, absl::string_view raw) {
  absl::string_view line = raw.substr(0, raw.find('\n'));
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() < 2 || parts.size() > 3) return {400, "text/plain", "bad request\n"};
  return Dispatch(routes, parts[0], parts[1]);
}

namespace {

// "HOST:PORT" resolved to a numeric address and its family (no name lookups).
absl::StatusOr<std::string> ListeningPort(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  int port_num = 0;
  if (!absl::SimpleAtoi(port, &port_num) || port_num < 0 || port_num > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': bad port '", port, "'"));
  }
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
  char ip[INET6_ADDRSTRLEN] = {0};
  const bool v6 = res->ai_family == AF_INET6;
  const void* a =
      v6 ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(res->ai_addr)->sin6_addr)
         : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr);
  const char* ok = ::inet_ntop(res->ai_family, a, ip, sizeof(ip));
  ::freeaddrinfo(res);
  if (ok == nullptr) return ErrnoStatus(errno, absl::StrCat("metrics address '", address, "'"));
  return v6 ? absl::StrCat("[", ip, "]:", port_num) : absl::StrCat(ip, ":", port_num);
}

std::string Serialize(const HttpResponse& r, bool head) {
  return absl::StrCat("HTTP/1.1 ", r.code, " ", ReasonPhrase(r.code),
                      "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                      "\r\nConnection: close\r\n\r\n", head ? "" : r.body);
}

// Writes all of `text` (the socket is blocking, with a send timeout); false when it could not.
bool WriteAll(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::send(fd, text.data() + off, text.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// A short answer to a connection that is not served (refused, too large, too slow): sent without
// waiting (the socket is non-blocking), then closed.
void Refuse(int fd, int code, const std::string& why) {
  const std::string r = Serialize({code, "text/plain", why + "\n"}, false);
  (void)!::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

constexpr size_t kMaxHead = 16 << 10;

}  // namespace

// A connection whose request is still arriving.
struct HttpServer::Pending {
  int fd = -1;
  std::string buf;
  absl::Time deadline;
};

HttpServer::~HttpServer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  for (const Request& r : ready_) ::close(r.fd);
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

// 0: the head is not complete yet; -1: malformed (*code, *why: the answer); 1: the request,
// whose body starts at *head_end and ends at *need.
int HttpServer::ParseHead(const std::string& buf, Request* r, size_t* head_end, size_t* need,
                          int* code, std::string* why) {
  size_t end = buf.find("\r\n\r\n");
  size_t sep = 4;
  if (end == std::string::npos) {
    end = buf.find("\n\n");
    sep = 2;
  }
  if (end == std::string::npos) {
    if (buf.size() > kMaxHead) {
      *code = 431;
      *why = "request head too long";
      return -1;
    }
    return 0;
  }
  if (end > kMaxHead) {
    *code = 431;
    *why = "request head too long";
    return -1;
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(buf).substr(0, end), '\n');
  absl::string_view first = lines.empty() ? "" : lines[0];
  while (!first.empty() && first.back() == '\r') first.remove_suffix(1);
  std::vector<absl::string_view> parts = absl::StrSplit(first, ' ', absl::SkipEmpty());
  if (parts.size() < 2 || parts.size() > 3) {
    *code = 400;
    *why = "bad request";
    return -1;
  }
  r->method = std::string(parts[0]);
  r->target = std::string(parts[1]);
  int64_t length = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view l = lines[i];
    while (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    const size_t colon = l.find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(l.substr(0, colon));
    absl::string_view value = absl::StripAsciiWhitespace(l.substr(colon + 1));
    if (name == "authorization") {
      r->authorization = std::string(value);
    } else if (name == "content-length") {
      if (!absl::SimpleAtoi(value, &length) || length < 0) {
        *code = 400;
        *why = "bad Content-Length";
        return -1;
      }
    } else if (name == "transfer-encoding") {
      *code = 411;
      *why = "a body needs a Content-Length";
      return -1;
    }
  }
  if (static_cast<uint64_t>(length) > kMaxRequestBody) {
    *code = 413;
    *why = "request body too long";
    return -1;
  }
  *head_end = end + sep;
  *need = end + sep + static_cast<size_t>(length);
  return 1;
}

void HttpServer::ReadLoop() {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (const Pending& p : pending) {
      fds.push_back({p.fd, POLLIN, 0});
      next = std::min(next, p.deadline);
    }
    int timeout = -1;
    if (next != absl::InfiniteFuture()) {
      timeout = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 60000));
    }
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      CRYO_LOG(Error) << "http: poll: " << strerror(errno);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) break;
    }
    const absl::Time now = absl::Now();
    std::vector<Pending> keep;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      const short ev = fds[i + 2].revents;
      bool done = false;
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        ssize_t got = ::recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (got <= 0 && !(got < 0 && (errno == EAGAIN || errno == EINTR))) {
          ::close(p.fd);  // the client went away
          continue;
        }
        if (got > 0) p.buf.append(buf, static_cast<size_t>(got));
        Request r;
        size_t head_end = 0, need = 0;
        int code = 0;
        std::string why;
        const int parsed = ParseHead(p.buf, &r, &head_end, &need, &code, &why);
        if (parsed < 0) {
          Refuse(p.fd, code, why);
          continue;
        }
        if (parsed > 0 && p.buf.size() >= need) {
          r.body = p.buf.substr(head_end, need - head_end);
          r.fd = p.fd;
          Hand(std::move(r));
          done = true;
        }
      }
      if (done) continue;
      if (now >= p.deadline) {
        Refuse(p.fd, 408, "the request did not arrive in time");
        continue;
      }
      keep.push_back(std::move(p));
    }
    pending = std::move(keep);
    if (fds[1].revents & POLLIN) {
      for (;;) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
          // Out of descriptors: the connection stays in the backlog; do not spin on it.
          if (errno == EMFILE || errno == ENFILE) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
          break;
        }
        // Past the cap: refused at once, not queued (a flood must not hold back the probes
        // behind it for a request timeout each).
        if (pending.size() >= max_pending_) {
          Refuse(c, 503, "too many connections; try again");
          continue;
        }
        pending.push_back({c, "", absl::Now() + opt_.request_timeout});
      }
    }
  }
  for (const Pending& p : pending) ::close(p.fd);
}

void HttpServer::Hand(Request r) {
  std::lock_guard<std::mutex> l(mu_);
  if (ready_.size() >= static_cast<size_t>(opt_.max_connections)) {
    Refuse(r.fd, 503, "every worker is busy; try again");
    return;
  }
  ready_.push_back(std::move(r));
  cv_.notify_one();
}

void HttpServer::Work() {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !ready_.empty(); });
      if (stop_) return;
      r = std::move(ready_.front());
      ready_.pop_front();
    }
    HttpResponse resp;
    try {
      resp = Dispatch(routes_, r.method, r.target, r.authorization, r.body);
    } catch (const std::exception& e) {
      CRYO_LOG(Error) << "http: handler of " << r.target.substr(0, 256) << " threw: " << e.what();
      resp = {500, "text/plain", "internal error\n"};
    }
    // Blocking from here, each write bounded by the request timeout.
    const int flags = ::fcntl(r.fd, F_GETFL);
    if (flags >= 0) ::fcntl(r.fd, F_SETFL, flags & ~O_NONBLOCK);
    const int64_t ms = absl::ToInt64Milliseconds(opt_.request_timeout);
    timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
    ::setsockopt(r.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    (void)WriteAll(r.fd, Serialize(resp, r.method == "HEAD"));  // a client gone: nothing to do
    ::shutdown(r.fd, SHUT_WR);
    ::close(r.fd);
  }
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const std::string& address,
                                                               HttpRoutes routes,
                                                               HttpServerOptions options) {
  CRYO_ASSIGN_OR_RETURN(std::string listen, ListeningPort(address));
  if (options.max_connections < 1) return absl::InvalidArgumentError("max_connections < 1");
  if (options.request_timeout <= absl::ZeroDuration()) {
    options.request_timeout = absl::Milliseconds(1);
  }
  const auto colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  const int port = std::atoi(listen.c_str() + colon + 1);
  const bool v6 = host.size() >= 2 && host.front() == '[';
  if (v6) host = host.substr(1, host.size() - 2);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET6, host.c_str(), &a->sin6_addr);
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, host.c_str(), &a->sin_addr);
    len = sizeof(*a);
  }
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(routes)));
  server->opt_ = options;
  // Connections whose requests are still arriving: idle and slow clients wait here, in one
  // thread, never holding a worker; past this many, new ones are refused at once.
  server->max_pending_ = static_cast<size_t>(4 * options.max_connections);
  server->listen_fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (server->listen_fd_ < 0) return ErrnoStatus(errno, "socket");
  int one = 1;
  ::setsockopt(server->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::listen(server->listen_fd_, 128) != 0) {
    return ErrnoStatus(errno, absl::StrCat("listen on ", address));
  }
  sockaddr_storage got{};
  socklen_t got_len = sizeof(got);
  ::getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&got), &got_len);
  server->port_ = ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  if (::pipe2(server->wake_, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus(errno, "pipe");
  HttpServer* s = server.get();
  s->reader_ = std::thread([s] { s->ReadLoop(); });
  for (int i = 0; i < options.max_connections; ++i) {
    s->workers_.emplace_back([s] { s->Work(); });
  }
  return server;
}

}  // namespace cryo::metrics
