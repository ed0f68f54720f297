#include "daemon/metrics/http_server.h"

#include <poll.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "test/daemon/http_test_util.h"
#include "test/daemon/test_util.h"

namespace cryo::metrics {
namespace {

std::string Get(int port, const std::string& target) { return HttpGet(port, target); }
std::string Send(int port, const std::string& request) { return HttpSend(port, request); }
std::string Body(const std::string& response) { return HttpBody(response); }

// A handler that echoes what it was given.
HttpResponse Echo(const std::string& name, const HttpRequest& r) {
  std::string body = name + " path=" + r.path + " rest=" + r.rest + " query=" + r.query;
  for (const auto& [k, v] : r.params) body += " " + k + "=[" + v + "]";
  return {200, "text/plain", body};
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpRoutes routes;
    routes.Exact("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
    routes.Exact("/v1/checkpoints/special", [](const HttpRequest& r) { return Echo("exact", r); });
    routes.Prefix("/v1/checkpoints", [](const HttpRequest& r) { return Echo("checkpoints", r); });
    routes.Prefix("/v1", [](const HttpRequest& r) { return Echo("v1", r); });
    auto s = HttpServer::Create("127.0.0.1:0", std::move(routes));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ASSERT_GT(server_->port(), 0);
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ExactRouteWithoutRequest) {
  std::string r = Get(server_->port(), "/healthz");
  EXPECT_EQ(HttpCode(r), 200) << r;
  EXPECT_NE(r.find("Content-Length: 3\r\n"), std::string::npos) << r;
  EXPECT_EQ(Body(r), "ok\n");
}

TEST_F(HttpServerTest, PrefixRouteGetsRestAndDecodedQuery) {
  std::string r = Get(server_->port(), "/v1/checkpoints/abc-1?workload=ns.job%2Fx.c&flag&a=b+c");
  EXPECT_EQ(Body(r),
            "checkpoints path=/v1/checkpoints/abc-1 rest=abc-1 "
            "query=workload=ns.job%2Fx.c&flag&a=b+c a=[b c] flag=[] workload=[ns.job/x.c]");
}

TEST_F(HttpServerTest, PrefixItselfHasEmptyRest) {
  EXPECT_EQ(Body(Get(server_->port(), "/v1/checkpoints")),
            "checkpoints path=/v1/checkpoints rest= query=");
  EXPECT_EQ(Body(Get(server_->port(), "/v1/checkpoints/")),
            "checkpoints path=/v1/checkpoints/ rest= query=");
}

TEST_F(HttpServerTest, ExactWinsAndLongestPrefixWins) {
  EXPECT_EQ(Body(Get(server_->port(), "/v1/checkpoints/special")),
            "exact path=/v1/checkpoints/special rest= query=");
  EXPECT_EQ(Body(Get(server_->port(), "/v1/other/x")), "v1 path=/v1/other/x rest=other/x query=");
}

TEST_F(HttpServerTest, PrefixNeedsAPathBoundary) {
  // "/v1/checkpointsX" is below "/v1", not below "/v1/checkpoints".
  EXPECT_EQ(Body(Get(server_->port(), "/v1/checkpointsX")),
            "v1 path=/v1/checkpointsX rest=checkpointsX query=");
  std::string r = Get(server_->port(), "/v2");
  EXPECT_EQ(HttpCode(r), 404) << r;
}

TEST_F(HttpServerTest, PathIsDecodedSoEncodedSlashesReachTheHandler) {
  EXPECT_EQ(Body(Get(server_->port(), "/v1/checkpoints/a%2F..%2Fb")),
            "checkpoints path=/v1/checkpoints/a/../b rest=a/../b query=");
}

TEST_F(HttpServerTest, RejectsOtherMethodsAndMalformedRequests) {
  std::string r = Send(server_->port(), "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(HttpCode(r), 405) << r;
  r = Send(server_->port(), "GET /v1/checkpoints/%zz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(HttpCode(r), 400) << r;
  r = Send(server_->port(), "GARBAGE\r\n\r\n");
  EXPECT_EQ(HttpCode(r), 400) << r;
}

TEST_F(HttpServerTest, HeadSendsNoBody) {
  std::string r = Send(server_->port(), "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(HttpCode(r), 200) << r;
  EXPECT_EQ(HttpHeader(r, "Content-Length"), "3") << r;
  EXPECT_EQ(Body(r), "");
}

// The router without a socket, as the fuzzer drives it (test/fuzz/http_request_fuzz.cc).
TEST(DispatchTest, RawRequestsAreRoutedOrRefused) {
  HttpRoutes routes;
  routes.Exact("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
  routes.Prefix("/v1/checkpoints", [](const HttpRequest& r) { return Echo("checkpoints", r); });
  EXPECT_EQ(DispatchRaw(routes, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").code, 200);
  EXPECT_EQ(DispatchRaw(routes, "GET /v1/checkpoints/a?workload=w HTTP/1.0\r\n\r\n").body,
            "checkpoints path=/v1/checkpoints/a rest=a query=workload=w workload=[w]");
  EXPECT_EQ(DispatchRaw(routes, "POST /healthz HTTP/1.1\r\n\r\n").code, 405);
  EXPECT_EQ(DispatchRaw(routes, "GET /nope HTTP/1.1\r\n\r\n").code, 404);
  for (const char* bad : {"", "\r\n", "GET", "GET healthz HTTP/1.1", "GET /%zz HTTP/1.1",
                          "GET /a?b=%4 HTTP/1.1", "GET / HTTP/1.1 extra"}) {
    EXPECT_EQ(DispatchRaw(routes, bad).code, 400) << bad;
  }
}

// A TCP connection to the server on loopback; -1 when it cannot connect.
int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One GET whose answer is awaited at most `bound` (a generous bound on the probe: an endpoint
// that does not answer fails the test instead of hanging it).
std::string Probe(int port, const std::string& path, absl::Duration bound = absl::Seconds(30)) {
  int fd = Connect(port);
  if (fd < 0) return "connect failed";
  timeval tv{static_cast<time_t>(absl::ToInt64Seconds(bound)), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n";
  (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  ::close(fd);
  return out;
}

// Whether the server has neither answered nor closed the connection.
bool Waiting(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// Sends one byte every 50 ms on `fd` until told to stop or the server stops reading.
class Dribbler {
 public:
  explicit Dribbler(int fd) : fd_(fd) {
    const std::string start = "GET /healthz HTTP/1.1\r\nX-Slow: ";
    (void)!::send(fd_, start.data(), start.size(), MSG_NOSIGNAL);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        if (::send(fd_, "a", 1, MSG_NOSIGNAL) != 1) return;  // the server closed it
        ++sent_;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  ~Dribbler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int sent() const { return sent_.load(); }

 private:
  int fd_;
  std::atomic<bool> stop_{false};
  std::atomic<int> sent_{0};
  std::thread thread_;
};

// Found on 2026-11-24: the endpoint served one connection at a time, so a client sending a byte
// every 1.5 s held back /healthz (the readiness probe) for as long as it liked, and five idle
// connections delayed it by seconds. /healthz is now answered while they are all still there.
TEST(HttpServerConcurrencyTest, SlowAndIdleClientsDoNotHoldBackHealthz) {
  HttpRoutes routes;
  routes.Exact("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
  HttpServerOptions o;
  o.max_connections = 8;
  o.request_timeout = absl::Seconds(120);  // the slow ones outlive the probe
  auto server = HttpServer::Create("127.0.0.1:0", std::move(routes), o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> idle;
  for (int i = 0; i < 5; ++i) {
    idle.push_back(Connect(port));
    ASSERT_GE(idle.back(), 0);
  }
  int slow = Connect(port);
  ASSERT_GE(slow, 0);
  Dribbler dribbler(slow);
  ASSERT_TRUE(WaitUntil([&] { return dribbler.sent() >= 3; }));

  for (int i = 0; i < 3; ++i) {
    std::string r = Probe(port, "/healthz");
    EXPECT_EQ(HttpCode(r), 200) << r;
    EXPECT_EQ(HttpBody(r), "ok\n");
  }
  EXPECT_TRUE(Waiting(slow)) << "the slow client was still being read when /healthz answered";
  for (int fd : idle) EXPECT_TRUE(Waiting(fd));
  dribbler.Stop();
  for (int fd : idle) ::close(fd);
  ::close(slow);
}

// The deadline is on the request as a whole: sending a byte now and then does not extend it
// (it did, with the old per-read timeout). The server answers or closes; it never serves it.
TEST(HttpServerConcurrencyTest, AClientStillSendingIsCutOffAtTheRequestDeadline) {
  HttpRoutes routes;
  routes.Exact("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
  HttpServerOptions o;
  o.request_timeout = absl::Seconds(1);
  auto server = HttpServer::Create("127.0.0.1:0", std::move(routes), o);
  ASSERT_TRUE(server.ok()) << server.status();
  int slow = Connect((*server)->port());
  ASSERT_GE(slow, 0);
  Dribbler dribbler(slow);
  // A generous bound: the deadline is one second.
  EXPECT_TRUE(WaitUntil([&] { return !Waiting(slow); }, absl::Seconds(60)))
      << "still reading after " << dribbler.sent() << " bytes";
  dribbler.Stop();
  char buf[256] = {0};
  ssize_t n = ::recv(slow, buf, sizeof(buf) - 1, MSG_DONTWAIT);
  EXPECT_NE(HttpCode(n > 0 ? std::string(buf, n) : ""), 200) << buf;
  ::close(slow);
  // The server itself goes on.
  EXPECT_EQ(HttpCode(Probe((*server)->port(), "/healthz")), 200);
}

// Issue 34: 100 idle connections delayed /healthz by 60 s (civetweb queued connections past its
// cap). Idle connections now wait in the reader, never holding a worker; past 4x max_connections
// of them a new connection is answered 503 at once, and once they go the endpoint serves again.
TEST(HttpServerConcurrencyTest, ConnectionsPastTheCapAreRefusedAtOnce) {
  HttpRoutes routes;
  routes.Exact("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
  HttpServerOptions o;
  o.max_connections = 2;
  o.request_timeout = absl::Seconds(120);  // the idle ones stay
  auto server = HttpServer::Create("127.0.0.1:0", std::move(routes), o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  // Up to the cap, idle connections do not keep /healthz from being answered.
  std::vector<int> idle;
  for (int i = 0; i < 4 * o.max_connections - 1; ++i) {
    idle.push_back(Connect(port));
    ASSERT_GE(idle.back(), 0);
  }
  EXPECT_EQ(HttpCode(Probe(port, "/healthz")), 200);
  idle.push_back(Connect(port));
  ASSERT_GE(idle.back(), 0);
  // At the cap: the next is answered 503 without waiting for any of them.
  ASSERT_TRUE(WaitUntil([&] {
    const std::string r = Probe(port, "/healthz");
    return HttpCode(r) == 503 && HttpBody(r).find("too many connections") != std::string::npos;
  })) << "a connection past the cap was not refused";
  for (int fd : idle) EXPECT_TRUE(Waiting(fd)) << "an idle connection was dropped";
  for (int fd : idle) ::close(fd);
  EXPECT_TRUE(WaitUntil([&] { return HttpCode(Probe(port, "/healthz")) == 200; }));
}

// A POST's body is read whole (its Content-Length, at most kMaxRequestBody) before the handler
// runs; a longer one is refused before it is read, a chunked one asks for a length.
TEST(HttpServerBodyTest, APostsBodyReachesItsHandlerWhole) {
  HttpRoutes routes;
  routes.Post("/q", [](const HttpRequest& r) {
    return HttpResponse{200, "text/plain", r.authorization + "|" + r.body};
  });
  auto server = HttpServer::Create("127.0.0.1:0", std::move(routes));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const std::string body(5000, 'b');
  std::string r = HttpSend(port, "POST /q HTTP/1.1\r\nAuthorization: Bearer t\r\nContent-Length: " +
                                     std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(HttpCode(r), 200) << r.substr(0, 200);
  EXPECT_EQ(HttpBody(r), "Bearer t|" + body);
  r = HttpSend(port, "POST /q HTTP/1.1\r\nContent-Length: 999999\r\n\r\n");
  EXPECT_EQ(HttpCode(r), 413) << r;
  r = HttpSend(port, "POST /q HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(HttpCode(r), 411) << r;
  r = HttpSend(port, "GET /q HTTP/1.1\r\n" + std::string(20000, 'x') + "\r\n\r\n");
  EXPECT_EQ(HttpCode(r), 431) << r.substr(0, 200);
}

TEST(ParseRequestLineTest, Parts) {
  HttpRequest r;
  ASSERT_TRUE(ParseRequestLine("GET /a%20b?x=1&x=2&y=%41 HTTP/1.0\r", &r));
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/a b");
  EXPECT_EQ(r.query, "x=1&x=2&y=%41");
  EXPECT_EQ(r.Param("x"), "2");  // the last one wins
  EXPECT_EQ(r.Param("y"), "A");
  EXPECT_EQ(r.Param("missing"), "");
  EXPECT_FALSE(ParseRequestLine("GET", &r));
  EXPECT_FALSE(ParseRequestLine("GET relative HTTP/1.0", &r));
  EXPECT_FALSE(ParseRequestLine("GET /x?a=%4 HTTP/1.0", &r));
}

TEST(PercentDecodeTest, PlusOnlyInQueries) {
  std::string out;
  ASSERT_TRUE(PercentDecode("a+b%2b", false, &out));
  EXPECT_EQ(out, "a+b+");
  ASSERT_TRUE(PercentDecode("a+b%2B", true, &out));
  EXPECT_EQ(out, "a b+");
  EXPECT_FALSE(PercentDecode("%", false, &out));
  EXPECT_FALSE(PercentDecode("%g1", false, &out));
}

TEST(HttpServerCreateTest, BadAddress) {
  EXPECT_FALSE(HttpServer::Create("no-port", HttpRoutes()).ok());
}

}  // namespace
}  // namespace cryo::metrics
