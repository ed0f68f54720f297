#include "daemon/termination/aws.h"

#include "gtest/gtest.h"
#include "test/daemon/termination/fake_clouds.h"
#include "test/daemon/termination/fakes.h"
#include "test/daemon/termination/test_http_server.h"

namespace cryo::termination {
namespace {

struct AwsFixture {
  FakeAws cloud;
  FakeClock clock;
  std::unique_ptr<TestHttpServer> server = TestHttpServer::Start(cloud.Handler());
  std::shared_ptr<HttpClient> http = *CurlHttpClient::Create(absl::Seconds(10));
  AwsSpotProvider provider{http, &clock, Options()};

  AwsOptions Options() {
    AwsOptions o;
    o.base_url = server->base();
    return o;
  }
};

TEST(AwsSpot, NoInterruptionThenTerminateWithDeadline) {
  AwsFixture f;
  auto none = f.provider.Poll();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty()) << "404 means no interruption";
  EXPECT_EQ(f.cloud.last_ttl_header(), "21600");

  f.cloud.SetAction("terminate", "2026-11-22T08:22:00Z");
  auto got = f.provider.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const Notice& n = (*got)[0];
  EXPECT_EQ(n.provider, "aws");
  EXPECT_EQ(n.kind, "spot-interruption");
  EXPECT_EQ(n.deadline,
            absl::FromCivil(absl::CivilSecond(2026, 11, 22, 8, 22, 0), absl::UTCTimeZone()));
  EXPECT_NE(n.detail.find("terminate"), std::string::npos);
  EXPECT_EQ(f.cloud.token_puts(), 1) << "the token is reused";
  EXPECT_EQ(f.cloud.unauthorized(), 0);
  EXPECT_FALSE(f.provider.using_imdsv1());
}

TEST(AwsSpot, StopAndHibernateAreNoticesWithTheirOwnIds) {
  AwsFixture f;
  f.cloud.SetAction("stop", "2026-11-22T08:22:00Z");
  auto stop = f.provider.Poll();
  f.cloud.SetAction("hibernate", "2026-11-22T08:22:00Z");
  auto hibernate = f.provider.Poll();
  ASSERT_TRUE(stop.ok() && hibernate.ok());
  ASSERT_EQ(stop->size(), 1u);
  ASSERT_EQ(hibernate->size(), 1u);
  EXPECT_NE((*stop)[0].id, (*hibernate)[0].id);
}

TEST(AwsSpot, TokenRenewedNearExpiryOnly) {
  AwsFixture f;
  f.cloud.SetGrantedTtl(600);  // IMDS may grant less than asked
  ASSERT_TRUE(f.provider.Poll().ok());
  f.clock.Advance(absl::Minutes(8));
  ASSERT_TRUE(f.provider.Poll().ok());
  EXPECT_EQ(f.cloud.token_puts(), 1);
  f.clock.Advance(absl::Seconds(61));  // within a minute of expiry
  ASSERT_TRUE(f.provider.Poll().ok());
  EXPECT_EQ(f.cloud.token_puts(), 2);
  EXPECT_EQ(f.cloud.unauthorized(), 0);
}

TEST(AwsSpot, RejectedTokenIsRefreshedOnce) {
  AwsFixture f;
  ASSERT_TRUE(f.provider.Poll().ok());
  f.cloud.InvalidateTokens();
  f.cloud.SetAction("terminate", "2026-11-22T08:22:00Z");
  auto got = f.provider.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
  EXPECT_EQ(f.cloud.unauthorized(), 1);
  EXPECT_EQ(f.cloud.token_puts(), 2);
}

TEST(AwsSpot, FallsBackToImdsV1WhenTokenPutFails) {
  AwsFixture f;
  f.cloud.SetRequireToken(false);
  f.cloud.SetTokenStatus(403);  // IMDSv2 refused
  f.cloud.SetAction("terminate", "2026-11-22T08:22:00Z");
  auto got = f.provider.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
  EXPECT_TRUE(f.provider.using_imdsv1());
  ASSERT_TRUE(f.provider.Poll().ok());
  EXPECT_EQ(f.cloud.token_puts(), 1) << "no PUT per poll while on v1";

  f.cloud.SetTokenStatus(200);
  f.clock.Advance(absl::Minutes(5));
  ASSERT_TRUE(f.provider.Poll().ok());
  EXPECT_EQ(f.cloud.token_puts(), 2) << "v2 tried again after v2_retry";
  EXPECT_FALSE(f.provider.using_imdsv1());
}

TEST(AwsSpot, V1RefusedAndNoTokenIsAnError) {
  AwsFixture f;
  f.cloud.SetTokenStatus(404);
  f.cloud.SetAction("terminate", "2026-11-22T08:22:00Z");
  auto got = f.provider.Poll();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  // When v2 works again the 401 on v1 makes the provider try it at once.
  f.cloud.SetTokenStatus(200);
  got = f.provider.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
}

TEST(AwsSpot, TokenPutTimeoutFallsBackToV1) {
  // A container behind a hop limit of 1 never gets the PUT's answer.
  FakeHttpClient http([](const HttpRequest& r) -> absl::StatusOr<HttpResponse> {
    if (r.method == "PUT") return absl::DeadlineExceededError("timed out");
    if (!r.headers.empty()) return Answer(400);
    return Answer(200, R"({"action":"terminate","time":"2026-11-22T08:22:00Z"})");
  });
  FakeClock clock;
  AwsSpotProvider p(std::shared_ptr<HttpClient>(&http, [](HttpClient*) {}), &clock, {});
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
  auto reqs = http.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].url, "http://169.254.169.254/latest/api/token");
  EXPECT_EQ(reqs[1].url, "http://169.254.169.254/latest/meta-data/spot/instance-action");
}

TEST(AwsSpot, MalformedAnswersAreErrors) {
  AwsFixture f;
  for (const char* body : {"{\"action\": \"terminate\"", "[]", R"({"action": "terminate"})",
                           "<html>not json</html>"}) {
    f.cloud.SetRawAction(body);
    EXPECT_FALSE(f.provider.Poll().ok()) << body;
  }
}

// The answer is parsed with bounds (lib/base/json): a wrong type is an error, and so is a
// document nested deeper than any metadata answer, before it costs memory or stack.
TEST(AwsSpot, WrongTypesAndDeepNestingAreErrors) {
  AwsFixture f;
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  for (const std::string& body :
       {std::string(R"({"action": 7, "time": "2026-11-22T08:22:00Z"})"),
        std::string(R"({"action": "terminate", "time": ["2026"]})"),
        std::string(R"({"action": null, "time": "2026-11-22T08:22:00Z"})"),
        R"({"action": "terminate", "time": "2026-11-22T08:22:00Z", "x": )" + deep + "}"}) {
    f.cloud.SetRawAction(body);
    auto r = f.provider.Poll();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << body.substr(0, 60);
  }
}

TEST(AwsSpot, UnreadableTimeStillANotice) {
  AwsFixture f;
  f.cloud.SetAction("terminate", "soon");
  auto got = f.provider.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].deadline, absl::InfiniteFuture());
}

}  // namespace
}  // namespace cryo::termination
