#include "test/daemon/termination/test_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/metrics/http_server.h"

namespace cryo::termination {
namespace {

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += n;
  }
}

}  // namespace

std::unique_ptr<TestHttpServer> TestHttpServer::Start(TestHandler handler, bool listen) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("test server bind");
    std::abort();
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<TestHttpServer> s(
      new TestHttpServer(fd, ntohs(addr.sin_port), std::move(handler)));
  if (listen) s->Listen();
  return s;
}

TestHttpServer::TestHttpServer(int fd, int port, TestHandler handler)
    : fd_(fd), port_(port), handler_(std::move(handler)) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) std::abort();
}

void TestHttpServer::Listen() {
  if (thread_.joinable()) return;
  if (::listen(fd_, 64) != 0) {
    std::perror("test server listen");
    std::abort();
  }
  thread_ = std::thread([this] { Loop(); });
}

TestHttpServer::~TestHttpServer() {
  char c = 0;
  ssize_t unused = ::write(wake_[1], &c, 1);
  (void)unused;
  if (thread_.joinable()) thread_.join();
  for (int fd : hung_) ::close(fd);
  ::close(fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

int TestHttpServer::requests() const {
  absl::MutexLock l(&mu_);
  return requests_;
}

void TestHttpServer::Loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int n = ::poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN)) return;
    if (p[0].revents & POLLIN) {
      int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn >= 0) Serve(conn);
    }
  }
}

void TestHttpServer::Serve(int conn) {
  timeval tv{5, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string data;
  char buf[4096];
  size_t head_end;
  while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
    ssize_t n = ::recv(conn, buf, sizeof(buf), 0);
    if (n <= 0) {
      ::close(conn);
      return;
    }
    data.append(buf, n);
  }
  TestRequest req;
  std::vector<std::string> lines = absl::StrSplit(data.substr(0, head_end), "\r\n");
  std::vector<std::string> first = absl::StrSplit(lines[0], ' ');
  if (first.size() == 3) {
    req.method = first[0];
    req.target = first[1];
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    auto colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    req.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  size_t len = 0;
  if (absl::SimpleAtoi(req.Header("content-length"), &len)) {
    while (data.size() < head_end + 4 + len) {
      ssize_t n = ::recv(conn, buf, sizeof(buf), 0);
      if (n <= 0) break;
      data.append(buf, n);
    }
    req.body = data.substr(head_end + 4, len);
  }
  {
    absl::MutexLock l(&mu_);
    ++requests_;
  }
  TestResponse resp = handler_(req);
  if (resp.hang) {
    absl::MutexLock l(&mu_);
    hung_.push_back(conn);
    return;
  }
  std::string out;
  if (!resp.raw.empty()) {
    out = resp.raw;
  } else {
    out = absl::StrCat("HTTP/1.1 ", resp.status, " ", metrics::ReasonPhrase(resp.status), "\r\n");
    for (const auto& [k, v] : resp.headers) absl::StrAppend(&out, k, ": ", v, "\r\n");
    if (resp.chunked) {
      absl::StrAppend(&out, "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
      // Two chunks (when there is enough body) and an empty trailer section.
      size_t half = resp.body.size() / 2;
      for (const std::string& part : {resp.body.substr(0, half), resp.body.substr(half)}) {
        if (part.empty()) continue;
        absl::StrAppend(&out, absl::Hex(part.size()), ";ext=1\r\n", part, "\r\n");
      }
      absl::StrAppend(&out, "0\r\n\r\n");
    } else {
      absl::StrAppend(&out, "Content-Length: ", resp.body.size(), "\r\nConnection: close\r\n\r\n",
                      resp.body);
    }
  }
  SendAll(conn, out);
  ::close(conn);
}

}  // namespace cryo::termination
