#include "daemon/termination/http_client.h"

#include <future>

#include "gtest/gtest.h"
#include "test/daemon/termination/test_http_server.h"

namespace cryo::termination {
namespace {

std::unique_ptr<CurlHttpClient> Client(absl::Duration timeout = absl::Seconds(10)) {
  auto c = CurlHttpClient::Create(timeout);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

TEST(ParseHttpUrl, Forms) {
  auto u = ParseHttpUrl("http://169.254.169.254/computeMetadata/v1/instance/");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "169.254.169.254");
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->authority, "169.254.169.254");
  EXPECT_EQ(u->target, "/computeMetadata/v1/instance/");

  u = ParseHttpUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, "8080");
  EXPECT_EQ(u->target, "/");

  u = ParseHttpUrl("http://[fd00:ec2::254]:81?a=b");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "fd00:ec2::254");
  EXPECT_EQ(u->authority, "[fd00:ec2::254]:81");
  EXPECT_EQ(u->target, "/?a=b");

  for (const char* bad : {"https://169.254.169.254/", "169.254.169.254/x", "http://", "http:///x",
                          "http://h:0/", "http://h:99999/", "http://h:x/", "http://u@h/"}) {
    EXPECT_EQ(ParseHttpUrl(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CurlHttpClient, SendsMethodHeadersAndBody) {
  TestRequest seen;
  auto server = TestHttpServer::Start([&](const TestRequest& r) {
    seen = r;
    TestResponse resp;
    resp.status = 201;
    resp.headers = {{"X-Answer", " forty-two "}};
    resp.body = "created";
    return resp;
  });
  HttpRequest req;
  req.method = "PUT";
  req.url = server->base() + "/latest/api/token?x=1";
  req.headers = {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}};
  auto resp = Client()->Send(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->status, 201);
  EXPECT_EQ(resp->body, "created");
  EXPECT_EQ(resp->Header("x-answer"), "forty-two");
  EXPECT_EQ(seen.method, "PUT");
  EXPECT_EQ(seen.target, "/latest/api/token?x=1");
  EXPECT_EQ(seen.Header("x-aws-ec2-metadata-token-ttl-seconds"), "21600");
  EXPECT_EQ(seen.Header("host"), absl::StrCat("127.0.0.1:", server->port()));
  EXPECT_EQ(seen.Header("content-length"), "0") << "IMDS wants a length on PUT";
}

TEST(CurlHttpClient, ReadsChunkedAndUntilCloseBodies) {
  auto server = TestHttpServer::Start([](const TestRequest& r) {
    TestResponse resp;
    if (r.Path() == "/chunked") {
      resp.chunked = true;
      resp.body = R"({"DocumentIncarnation":1,"Events":[]})";
    } else {
      resp.raw = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nTRUE";
    }
    return resp;
  });
  auto client = Client();
  auto resp = client->Send({"GET", server->base() + "/chunked", {}, ""});
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->body, R"({"DocumentIncarnation":1,"Events":[]})");
  resp = client->Send({"GET", server->base() + "/close", {}, ""});
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->body, "TRUE");
}

TEST(CurlHttpClient, BrokenAnswersAreErrors) {
  auto server = TestHttpServer::Start([](const TestRequest& r) {
    TestResponse resp;
    if (r.Path() == "/truncated") {
      resp.raw = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort";
    } else if (r.Path() == "/garbage") {
      resp.raw = "SSH-2.0-OpenSSH_9.2\r\n\r\n";
    } else {
      resp.raw = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n";  // closed before the blank line
    }
    return resp;
  });
  auto client = Client();
  for (const char* path : {"/truncated", "/garbage", "/nohead"}) {
    auto resp = client->Send({"GET", server->base() + path, {}, ""});
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kUnavailable) << path << resp.status();
  }
}

TEST(CurlHttpClient, RefusedIsUnavailable) {
  // Bound but not listening: connections are refused.
  auto down = TestHttpServer::Start([](const TestRequest&) { return TestResponse{}; },
                                    /*listen=*/false);
  auto resp = Client()->Send({"GET", down->base() + "/", {}, ""});
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kUnavailable) << resp.status();
  EXPECT_NE(resp.status().message().find("connect"), std::string::npos) << resp.status();
}

TEST(CurlHttpClient, SilentServerTimesOut) {
  auto server = TestHttpServer::Start([](const TestRequest&) {
    TestResponse r;
    r.hang = true;
    return r;
  });
  auto resp = Client(absl::Milliseconds(200))->Send({"GET", server->base() + "/", {}, ""});
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kDeadlineExceeded) << resp.status();
}

TEST(CurlHttpClient, ShutdownEndsRequestInFlight) {
  std::promise<void> arrived;
  auto server = TestHttpServer::Start([&](const TestRequest&) {
    arrived.set_value();
    TestResponse r;
    r.hang = true;
    return r;
  });
  auto client = Client(absl::Hours(1));
  auto pending = std::async(std::launch::async, [&] {
    return client->Send({"GET", server->base() + "/", {}, ""});
  });
  arrived.get_future().wait();
  client->Shutdown();
  // Bounded wait only so a regression fails instead of hanging the suite for an hour.
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(pending.get().status().code(), absl::StatusCode::kCancelled);
  auto later = client->Send({"GET", server->base() + "/", {}, ""});
  EXPECT_EQ(later.status().code(), absl::StatusCode::kCancelled);
}

TEST(HttpStatusError, NamesRequestStatusAndBody) {
  HttpRequest req{"GET", "http://169.254.169.254/x", {}, ""};
  HttpResponse resp;
  resp.status = 403;
  resp.body = "Missing Metadata-Flavor:Google header.\n";
  absl::Status s = HttpStatusError(req, resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "GET http://169.254.169.254/x: HTTP 403: Missing Metadata-Flavor:Google header.");
  resp.status = 503;
  EXPECT_EQ(HttpStatusError(req, resp).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace cryo::termination
