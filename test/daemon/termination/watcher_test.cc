#include "daemon/termination/watcher.h"

#include <future>
#include <stdexcept>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "test/daemon/termination/fake_clouds.h"
#include "test/daemon/termination/fakes.h"
#include "test/daemon/termination/test_http_server.h"
#include "test/daemon/test_util.h"

namespace cryo::termination {
namespace {

// Collects the callbacks.
class Recorder {
 public:
  NoticeCallback Callback() {
    return [this](const Notice& n) {
      absl::MutexLock l(&mu_);
      notices_.push_back(n);
    };
  }
  std::vector<Notice> notices() {
    absl::MutexLock l(&mu_);
    return notices_;
  }
  size_t count() { return notices().size(); }

 private:
  absl::Mutex mu_;
  std::vector<Notice> notices_;
};

// A provider that answers what the test scripted last.
class ScriptedProvider : public NoticeProvider {
 public:
  struct Script {
    absl::Mutex mu;
    absl::StatusOr<std::vector<Notice>> answer = std::vector<Notice>{};
    void Set(absl::StatusOr<std::vector<Notice>> a) {
      absl::MutexLock l(&mu);
      answer = std::move(a);
    }
  };
  ScriptedProvider(std::string name, std::shared_ptr<Script> script)
      : name_(std::move(name)), script_(std::move(script)) {}
  std::string Name() const override { return name_; }
  absl::StatusOr<std::vector<Notice>> Poll() override {
    absl::MutexLock l(&script_->mu);
    return script_->answer;
  }

 private:
  std::string name_;
  std::shared_ptr<ScriptedProvider::Script> script_;
};

Notice MakeNotice(const std::string& id) {
  Notice n;
  n.provider = "test";
  n.kind = "preempt";
  n.id = id;
  return n;
}

std::unique_ptr<TerminationWatcher> Scripted(
    std::vector<std::shared_ptr<ScriptedProvider::Script>> scripts, NoticeCallback cb) {
  std::vector<std::unique_ptr<NoticeProvider>> providers;
  for (size_t i = 0; i < scripts.size(); ++i) {
    providers.push_back(std::make_unique<ScriptedProvider>("p" + std::to_string(i), scripts[i]));
  }
  auto w = TerminationWatcher::Create(std::move(providers), {}, std::move(cb));
  EXPECT_TRUE(w.ok()) << w.status();
  return std::move(*w);
}

TEST(TerminationWatcher, OneCallbackPerDistinctNotice) {
  auto script = std::make_shared<ScriptedProvider::Script>();
  Recorder rec;
  auto w = Scripted({script}, rec.Callback());
  w->PollOnce();
  EXPECT_EQ(rec.count(), 0u);

  script->Set(std::vector<Notice>{MakeNotice("a")});
  for (int i = 0; i < 3; ++i) w->PollOnce();
  EXPECT_EQ(rec.count(), 1u) << "the same notice on later polls is not new";

  script->Set(std::vector<Notice>{MakeNotice("a"), MakeNotice("b")});
  w->PollOnce();
  w->PollOnce();
  ASSERT_EQ(rec.count(), 2u);
  EXPECT_EQ(rec.notices()[1].id, "b");
  EXPECT_EQ(w->notices(), 2);
  auto states = w->States();
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].standing, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(states[0].polls, 6);
}

TEST(TerminationWatcher, ErrorsNeitherFireNorForget) {
  auto script = std::make_shared<ScriptedProvider::Script>();
  Recorder rec;
  auto w = Scripted({script}, rec.Callback());
  script->Set(std::vector<Notice>{MakeNotice("a")});
  w->PollOnce();
  script->Set(absl::UnavailableError("connect: refused"));
  w->PollOnce();
  w->PollOnce();
  EXPECT_EQ(w->States()[0].errors, 2);
  EXPECT_EQ(w->States()[0].last.code(), absl::StatusCode::kUnavailable);
  script->Set(std::vector<Notice>{MakeNotice("a")});
  w->PollOnce();
  EXPECT_EQ(rec.count(), 1u) << "a notice that stood through an outage is not new";
  EXPECT_TRUE(w->States()[0].last.ok());
}

TEST(TerminationWatcher, NoticeThatWentAndCameBackIsNew) {
  auto script = std::make_shared<ScriptedProvider::Script>();
  Recorder rec;
  auto w = Scripted({script}, rec.Callback());
  script->Set(std::vector<Notice>{MakeNotice("a")});
  w->PollOnce();
  script->Set(std::vector<Notice>{});
  w->PollOnce();
  script->Set(std::vector<Notice>{MakeNotice("a")});
  w->PollOnce();
  EXPECT_EQ(rec.count(), 2u);
}

TEST(TerminationWatcher, FailingProviderDoesNotBlockOthers) {
  auto bad = std::make_shared<ScriptedProvider::Script>();
  auto good = std::make_shared<ScriptedProvider::Script>();
  bad->Set(absl::FailedPreconditionError("bad answer"));
  good->Set(std::vector<Notice>{MakeNotice("g")});
  Recorder rec;
  auto w = Scripted({bad, good}, rec.Callback());
  w->PollOnce();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.notices()[0].id, "g");
}

TEST(TerminationWatcher, ThrowingCallbackIsContained) {
  auto script = std::make_shared<ScriptedProvider::Script>();
  script->Set(std::vector<Notice>{MakeNotice("a"), MakeNotice("b")});
  int calls = 0;
  auto w = Scripted({script}, [&](const Notice&) {
    ++calls;
    throw std::runtime_error("boom");
  });
  w->PollOnce();
  EXPECT_EQ(calls, 2);
}

TEST(TerminationWatcher, CreateRejectsBadSettings) {
  auto noop = [](const Notice&) {};
  EXPECT_EQ(TerminationWatcher::Create({}, {}, noop).status().code(),
            absl::StatusCode::kInvalidArgument);
  WatcherConfig c;
  EXPECT_EQ(TerminationWatcher::CreateFromConfig(c, noop).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "no providers";
  c.providers = {"gce", "oracle"};
  auto w = TerminationWatcher::CreateFromConfig(c, noop);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("oracle"), std::string::npos);
  c.providers = {"aws"};
  c.aws_url = "https://169.254.169.254";
  EXPECT_EQ(TerminationWatcher::CreateFromConfig(c, noop).status().code(),
            absl::StatusCode::kInvalidArgument);
  c.aws_url = kAwsDefaultUrl;
  c.poll_interval = absl::ZeroDuration();
  EXPECT_EQ(TerminationWatcher::CreateFromConfig(c, noop).status().code(),
            absl::StatusCode::kInvalidArgument);
  c.poll_interval = absl::Seconds(1);
  c.providers = {"gce", "aws", "azure", "gce"};
  w = TerminationWatcher::CreateFromConfig(c, noop);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<std::string> names;
  for (const auto& s : (*w)->States()) names.push_back(s.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"gce/preempted", "gce/maintenance-event", "aws", "azure"}));
}

// --- End to end: CreateFromConfig, the real HTTP client, local stand-ins of the clouds. ---

TEST(TerminationWatcherE2E, GcePreemptionOnceThenMaintenance) {
  FakeGce cloud;
  auto server = TestHttpServer::Start(cloud.Handler());
  WatcherConfig c;
  c.providers = {"gce"};
  c.gce_url = server->base() + FakeGce::kPath;
  Recorder rec;
  auto w = TerminationWatcher::CreateFromConfig(c, rec.Callback());
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->PollOnce();
  EXPECT_EQ(rec.count(), 0u);
  cloud.SetPreempted("TRUE");
  for (int i = 0; i < 3; ++i) (*w)->PollOnce();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.notices()[0].kind, "preempt");
  EXPECT_EQ(rec.notices()[0].deadline, absl::InfiniteFuture());
  cloud.SetMaintenance("TERMINATE_ON_HOST_MAINTENANCE");
  (*w)->PollOnce();
  (*w)->PollOnce();
  ASSERT_EQ(rec.count(), 2u);
  EXPECT_EQ(rec.notices()[1].kind, "maintenance-terminate");
  EXPECT_EQ(cloud.missing_header(), 0);
}

TEST(TerminationWatcherE2E, AwsSpotNoticeWithDeadline) {
  FakeAws cloud;
  auto server = TestHttpServer::Start(cloud.Handler());
  WatcherConfig c;
  c.providers = {"aws"};
  c.aws_url = server->base();
  Recorder rec;
  FakeClock clock;
  auto w = TerminationWatcher::CreateFromConfig(c, rec.Callback(), &clock);
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->PollOnce();
  EXPECT_EQ(rec.count(), 0u);
  cloud.SetAction("terminate", "2026-11-22T08:22:00Z");
  for (int i = 0; i < 3; ++i) (*w)->PollOnce();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.notices()[0].deadline,
            absl::FromCivil(absl::CivilSecond(2026, 11, 22, 8, 22, 0), absl::UTCTimeZone()));
  EXPECT_EQ(cloud.unauthorized(), 0);
  // A new time is a new notice (AWS moved the interruption).
  cloud.SetAction("terminate", "2026-11-22T08:24:00Z");
  (*w)->PollOnce();
  EXPECT_EQ(rec.count(), 2u);
}

TEST(TerminationWatcherE2E, AzureNewEventIdIsASecondNotice) {
  FakeAzure cloud;
  auto server = TestHttpServer::Start(cloud.Handler());
  WatcherConfig c;
  c.providers = {"azure"};
  c.azure_url = server->base() + FakeAzure::kEventsPath;
  Recorder rec;
  auto w = TerminationWatcher::CreateFromConfig(c, rec.Callback());
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->PollOnce();
  EXPECT_EQ(rec.count(), 0u);
  cloud.SetDocument(
      AzureDoc(1, "ev-1", "Preempt", "vm-a", "Scheduled", "Tue, 01 Dec 2026 10:00:30 GMT"));
  (*w)->PollOnce();
  (*w)->PollOnce();
  // Same event, now under way: not new.
  cloud.SetDocument(AzureDoc(2, "ev-1", "Preempt", "vm-a", "Started", ""));
  (*w)->PollOnce();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.notices()[0].deadline,
            absl::FromCivil(absl::CivilSecond(2026, 12, 1, 10, 0, 30), absl::UTCTimeZone()));
  cloud.SetDocument(
      AzureDoc(3, "ev-2", "Terminate", "vm-a", "Scheduled", "Tue, 01 Dec 2026 10:20:00 GMT"));
  (*w)->PollOnce();
  ASSERT_EQ(rec.count(), 2u);
  EXPECT_EQ(rec.notices()[1].id, "azure/ev-2");
  EXPECT_EQ(cloud.missing_header(), 0);
}

TEST(TerminationWatcherE2E, MalformedAnswersGiveNoCallback) {
  FakeAzure azure;
  FakeAws aws;
  auto azure_server = TestHttpServer::Start(azure.Handler());
  auto aws_server = TestHttpServer::Start(aws.Handler());
  azure.SetDocument(R"({"DocumentIncarnation":1,"Events":[{"EventId":"x","EventType":"Preempt")");
  aws.SetRawAction(R"({"action":"terminate","time":)");
  WatcherConfig c;
  c.providers = {"azure", "aws"};
  c.azure_url = azure_server->base() + FakeAzure::kEventsPath;
  c.aws_url = aws_server->base();
  Recorder rec;
  auto w = TerminationWatcher::CreateFromConfig(c, rec.Callback());
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->PollOnce();
  (*w)->PollOnce();
  EXPECT_EQ(rec.count(), 0u);
  for (const auto& s : (*w)->States()) {
    EXPECT_EQ(s.errors, 2) << s.name;
    EXPECT_FALSE(s.last.ok()) << s.name;
  }
}

TEST(TerminationWatcherE2E, EndpointDownIsLoggedAndWatchingGoesOn) {
  FakeGce cloud;
  cloud.SetPreempted("TRUE");
  auto server = TestHttpServer::Start(cloud.Handler(), /*listen=*/false);
  WatcherConfig c;
  c.providers = {"gce"};
  c.gce_url = server->base() + FakeGce::kPath;
  c.poll_interval = absl::Milliseconds(10);
  Recorder rec;
  auto w = TerminationWatcher::CreateFromConfig(c, rec.Callback());
  ASSERT_TRUE(w.ok()) << w.status();

  testing::internal::CaptureStderr();
  (*w)->PollOnce();
  (*w)->PollOnce();
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rec.count(), 0u);
  EXPECT_NE(log.find("gce/preempted cannot be checked"), std::string::npos) << log;
  EXPECT_NE(log.find("connect to"), std::string::npos) << log;
  // Logged once per distinct error, not every poll.
  EXPECT_EQ(log.find("gce/preempted cannot be checked"),
            log.rfind("gce/preempted cannot be checked"))
      << log;
  EXPECT_EQ((*w)->States()[0].errors, 2);

  ASSERT_TRUE((*w)->Start().ok());
  // Still down for a few polls of the thread ...
  ASSERT_TRUE(WaitUntil([&] { return (*w)->States()[0].errors >= 5; }));
  EXPECT_EQ(rec.count(), 0u);
  // ... then the server comes up and the standing notice arrives, once.
  server->Listen();
  ASSERT_TRUE(WaitUntil([&] { return rec.count() == 1; }));
  const int64_t polls = (*w)->States()[0].polls;
  ASSERT_TRUE(WaitUntil([&] { return (*w)->States()[0].polls >= polls + 5; }));
  EXPECT_EQ(rec.count(), 1u);
  EXPECT_TRUE((*w)->States()[0].last.ok());
  (*w)->Stop();
}

// Stop() with a request hanging on a silent server, an hour-long timeout and interval.
TEST(TerminationWatcherE2E, StopReturnsPromptlyDuringARequest) {
  std::promise<void> arrived;
  std::once_flag once;
  auto server = TestHttpServer::Start([&](const TestRequest&) {
    std::call_once(once, [&] { arrived.set_value(); });
    TestResponse r;
    r.hang = true;
    return r;
  });
  WatcherConfig c;
  c.providers = {"aws"};
  c.aws_url = server->base();
  c.poll_interval = absl::Hours(1);
  c.request_timeout = absl::Hours(1);
  Recorder rec;
  auto w = TerminationWatcher::CreateFromConfig(c, rec.Callback());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Start().ok());
  arrived.get_future().wait();
  auto stopped = std::async(std::launch::async, [&] { (*w)->Stop(); });
  // Bounded only so a regression fails instead of hanging the suite.
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(rec.count(), 0u);
}

TEST(TerminationWatcherE2E, StopReturnsPromptlyBetweenPolls) {
  FakeGce cloud;
  auto server = TestHttpServer::Start(cloud.Handler());
  WatcherConfig c;
  c.providers = {"gce"};
  c.gce_url = server->base() + FakeGce::kPath;
  c.poll_interval = absl::Hours(1);
  Recorder rec;
  auto w = TerminationWatcher::CreateFromConfig(c, rec.Callback());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Start().ok());
  EXPECT_EQ((*w)->Start().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(WaitUntil([&] { return (*w)->States()[1].polls == 1; }));
  auto stopped = std::async(std::launch::async, [&] { (*w)->Stop(); });
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  (*w)->Stop();  // idempotent
  EXPECT_EQ((*w)->Start().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cryo::termination
