#include "daemon/termination/azure.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "test/daemon/termination/fake_clouds.h"
#include "test/daemon/termination/fakes.h"
#include "test/daemon/termination/test_http_server.h"

namespace cryo::termination {
namespace {

constexpr char kNotBefore[] = "Mon, 19 Sep 2016 18:29:47 GMT";

absl::Time NotBeforeTime() {
  return absl::FromCivil(absl::CivilSecond(2016, 9, 19, 18, 29, 47), absl::UTCTimeZone());
}

struct AzureFixture {
  FakeAzure cloud;
  FakeClock clock;
  std::unique_ptr<TestHttpServer> server = TestHttpServer::Start(cloud.Handler());
  std::shared_ptr<HttpClient> http = *CurlHttpClient::Create(absl::Seconds(10));

  AzureEventsProvider Provider(std::string vm_name = "") {
    AzureOptions o;
    o.events_url = server->base() + FakeAzure::kEventsPath;
    o.vm_name = std::move(vm_name);
    return AzureEventsProvider(http, &clock, o);
  }
};

TEST(AzureEvents, PreemptForThisVmWithNotBefore) {
  AzureFixture f;
  auto p = f.Provider();
  auto none = p.Poll();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(p.vm_name(), "vm-a") << "learned from the instance metadata";

  f.cloud.SetDocument(AzureDoc(2, "602d9444-d2cd-49c7-8624-8643e7171297", "Preempt", "vm-a",
                               "Scheduled", kNotBefore));
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const Notice& n = (*got)[0];
  EXPECT_EQ(n.provider, "azure");
  EXPECT_EQ(n.kind, "preempt");
  EXPECT_EQ(n.id, "azure/602d9444-d2cd-49c7-8624-8643e7171297");
  EXPECT_EQ(n.deadline, NotBeforeTime());
  EXPECT_EQ(f.cloud.missing_header(), 0) << "every request carried Metadata: true";
}

TEST(AzureEvents, FakeServerRefusesRequestsWithoutTheHeader) {
  AzureFixture f;
  auto resp = f.http->Send({"GET", f.server->base() + FakeAzure::kEventsPath, {}, ""});
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->status, 400);
  EXPECT_EQ(f.cloud.missing_header(), 1);
}

TEST(AzureEvents, OtherVmsAndOtherTypesAreIgnored) {
  AzureFixture f;
  auto p = f.Provider();
  f.cloud.SetDocument(AzureDoc(3, "e1", "Terminate", "vm-b", "Scheduled", kNotBefore));
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty()) << "another VM of the scale set";
  // Freeze pauses the VM and keeps its memory: no checkpoint needed.
  f.cloud.SetDocument(AzureDoc(4, "e2", "Freeze", "vm-a", "Scheduled", kNotBefore));
  got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
  f.cloud.SetDocument(AzureDoc(5, "e3", "Terminate", "VM-A", "Scheduled", kNotBefore));
  got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u) << "VM names compare without case";
  EXPECT_EQ((*got)[0].kind, "terminate");
}

TEST(AzureEvents, RebootAndRedeployLoseEveryProcessSoTheyAreNotices) {
  AzureFixture f;
  auto p = f.Provider();
  for (const auto& [type, kind] : std::vector<std::pair<std::string, std::string>>{
           {"Reboot", "reboot"}, {"Redeploy", "redeploy"}}) {
    f.cloud.SetDocument(AzureDoc(6, "ev-" + kind, type, "vm-a", "Scheduled", kNotBefore));
    auto got = p.Poll();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 1u) << type;
    const Notice& n = (*got)[0];
    EXPECT_EQ(n.provider, "azure");
    EXPECT_EQ(n.kind, kind);
    EXPECT_EQ(n.id, "azure/ev-" + kind);
    EXPECT_EQ(n.deadline, NotBeforeTime());
    EXPECT_NE(n.detail.find("Azure " + type + " event"), std::string::npos) << n.detail;
    // Another VM's reboot is not ours.
    f.cloud.SetDocument(AzureDoc(7, "ev-b", type, "vm-b", "Scheduled", kNotBefore));
    got = p.Poll();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->empty()) << type;
  }
}

TEST(AzureEvents, ConfiguredNameWinsAndUnknownNameCountsEveryEvent) {
  AzureFixture f;
  f.cloud.SetDocument(AzureDoc(1, "e1", "Preempt", "vm-b", "Scheduled", kNotBefore));
  auto named = f.Provider("vm-b");
  auto got = named.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
  EXPECT_EQ(named.vm_name(), "vm-b");

  f.cloud.SetVmName("");  // the name endpoint answers 404
  auto unnamed = f.Provider();
  got = unnamed.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u) << "cannot tell it is not ours";
  EXPECT_EQ(unnamed.vm_name(), "");
  // Learned once it becomes available.
  f.cloud.SetVmName("vm-a");
  got = unnamed.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
  EXPECT_EQ(unnamed.vm_name(), "vm-a");
}

TEST(AzureEvents, StartedEventWithoutNotBeforeIsDueNow) {
  AzureFixture f;
  auto p = f.Provider();
  f.cloud.SetDocument(AzureDoc(1, "e1", "Preempt", "vm-a", "Started", ""));
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].deadline, f.clock.Now());
}

TEST(AzureEvents, SeveralEventsKeepTheirIds) {
  AzureFixture f;
  auto p = f.Provider();
  f.cloud.SetDocument(absl::StrCat(
      R"({"DocumentIncarnation":7,"Events":[)",
      R"({"EventId":"a","EventType":"Freeze","Resources":["vm-a"],"EventStatus":"Scheduled","NotBefore":""},)",
      R"({"EventId":"b","EventType":"Preempt","Resources":["vm-a","vm-b"],"EventStatus":"Scheduled","NotBefore":"Tue, 01 Dec 2026 10:00:30 GMT"},)",
      R"({"EventId":"c","EventType":"Terminate","Resources":["vm-a"],"EventStatus":"Scheduled","NotBefore":"Tue, 01 Dec 2026 10:15:00 GMT"}]})"));
  auto got = p.Poll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].id, "azure/b");
  EXPECT_EQ((*got)[0].deadline,
            absl::FromCivil(absl::CivilSecond(2026, 12, 1, 10, 0, 30), absl::UTCTimeZone()));
  EXPECT_EQ((*got)[1].id, "azure/c");
}

// Bounded like every outside JSON: a document nested deeper than any real one is refused, and
// events or fields of the wrong type never throw.
TEST(AzureEvents, DeepNestingIsRefusedAndWrongTypesNeverThrow) {
  AzureFixture f;
  auto p = f.Provider();
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  f.cloud.SetDocument(R"({"DocumentIncarnation":1,"Events":[],"x":)" + deep + "}");
  EXPECT_EQ(p.Poll().status().code(), absl::StatusCode::kFailedPrecondition);
  f.cloud.SetDocument(
      R"({"DocumentIncarnation":1,"Events":[7, {"EventType": 3}, {"EventType": "Preempt",)"
      R"( "Resources": [1, "vm-a"], "EventId": {}, "NotBefore": []}]})");
  auto r = p.Poll();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].kind, "preempt");
}

TEST(AzureEvents, MalformedDocumentsAreErrors) {
  AzureFixture f;
  auto p = f.Provider();
  for (const char* doc : {R"({"DocumentIncarnation":1,"Events":[)", "[]", R"({"Events":{}})",
                          R"({"DocumentIncarnation":1})", "<html></html>"}) {
    f.cloud.SetDocument(doc);
    EXPECT_FALSE(p.Poll().ok()) << doc;
  }
}

}  // namespace
}  // namespace cryo::termination
