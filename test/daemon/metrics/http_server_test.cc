#include "daemon/metrics/http_server.h"

#include <string>

#include "gtest/gtest.h"
#include "test/daemon/http_test_util.h"

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
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
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
  EXPECT_EQ(r.rfind("HTTP/1.0 404 Not Found\r\n", 0), 0u) << r;
}

TEST_F(HttpServerTest, PathIsDecodedSoEncodedSlashesReachTheHandler) {
  EXPECT_EQ(Body(Get(server_->port(), "/v1/checkpoints/a%2F..%2Fb")),
            "checkpoints path=/v1/checkpoints/a/../b rest=a/../b query=");
}

TEST_F(HttpServerTest, RejectsOtherMethodsAndMalformedRequests) {
  std::string r = Send(server_->port(), "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 405 ", 0), 0u) << r;
  r = Send(server_->port(), "GET /v1/checkpoints/%zz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 400 ", 0), 0u) << r;
  r = Send(server_->port(), "GARBAGE\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 400 ", 0), 0u) << r;
}

TEST_F(HttpServerTest, HeadSendsNoBody) {
  std::string r = Send(server_->port(), "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  EXPECT_EQ(Body(r), "");
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
