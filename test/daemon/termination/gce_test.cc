#include "daemon/termination/gce.h"

#include "gtest/gtest.h"
#include "test/daemon/termination/fake_clouds.h"
#include "test/daemon/termination/fakes.h"
#include "test/daemon/termination/test_http_server.h"

namespace cryo::termination {
namespace {

struct GceFixture {
  FakeGce cloud;
  std::unique_ptr<TestHttpServer> server = TestHttpServer::Start(cloud.Handler());
  std::shared_ptr<HttpClient> http = *CurlHttpClient::Create(absl::Seconds(10));
  std::string url = server->base() + FakeGce::kPath;
};

TEST(GcePreempted, FalseThenTrue) {
  GceFixture f;
  GcePreemptedProvider p(f.http, f.url);
  auto none = p.Poll();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());

  f.cloud.SetPreempted("TRUE");
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].provider, "gce");
  EXPECT_EQ((*got)[0].kind, "preempt");
  EXPECT_EQ((*got)[0].id, "gce/preempted");
  EXPECT_EQ((*got)[0].deadline, absl::InfiniteFuture()) << "GCE gives no time";
  EXPECT_EQ(f.cloud.missing_header(), 0) << "every request carried Metadata-Flavor: Google";
}

TEST(GcePreempted, BaseUrlWithoutSlashWorks) {
  GceFixture f;
  f.cloud.SetPreempted("TRUE");
  GcePreemptedProvider p(f.http, f.server->base() + "/computeMetadata/v1/instance");
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
}

TEST(GcePreempted, FakeServerRefusesRequestsWithoutTheHeader) {
  // The stand-in behaves like GCE: the provider's header is what makes it answer.
  GceFixture f;
  auto resp = f.http->Send({"GET", f.url + "preempted", {}, ""});
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->status, 403);
  EXPECT_EQ(f.cloud.missing_header(), 1);
}

TEST(GcePreempted, UnexpectedAnswersAreErrors) {
  GceFixture f;
  GcePreemptedProvider p(f.http, f.url);
  f.cloud.SetPreempted("<html>captive portal</html>");
  EXPECT_EQ(p.Poll().status().code(), absl::StatusCode::kFailedPrecondition);
  // A server that is not GCE's (no preempted attribute there) answers 404.
  GcePreemptedProvider wrong(f.http, f.server->base() + "/latest/meta-data/");
  auto st = wrong.Poll().status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("HTTP 404"), std::string::npos) << st;
}

TEST(GceMaintenance, OnlyTerminateCounts) {
  GceFixture f;
  GceMaintenanceProvider p(f.http, f.url);
  for (const char* v : {"NONE", "MIGRATE_ON_HOST_MAINTENANCE", "SOME_FUTURE_VALUE"}) {
    f.cloud.SetMaintenance(v);
    auto got = p.Poll();
    ASSERT_TRUE(got.ok()) << v << got.status();
    EXPECT_TRUE(got->empty()) << v;
  }
  f.cloud.SetMaintenance("TERMINATE_ON_HOST_MAINTENANCE");
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].kind, "maintenance-terminate");
  EXPECT_EQ((*got)[0].deadline, absl::InfiniteFuture());

  f.cloud.SetMaintenance("");
  EXPECT_FALSE(p.Poll().ok()) << "an empty answer is not NONE";
}

TEST(Gce, AnswerFromAnotherServerIsRejected) {
  // 200 with a foreign Metadata-Flavor (e.g. a proxy) is not the metadata server.
  FakeHttpClient http([](const HttpRequest&) {
    HttpResponse r = Answer(200, "TRUE");
    r.headers["metadata-flavor"] = "Other";
    return r;
  });
  GcePreemptedProvider p(std::shared_ptr<HttpClient>(&http, [](HttpClient*) {}), "http://x/");
  EXPECT_FALSE(p.Poll().ok());
}

}  // namespace
}  // namespace cryo::termination
