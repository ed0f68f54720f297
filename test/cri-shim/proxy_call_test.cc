// The generic forwarder: what goes in comes out, for every call shape, with metadata, status,
// deadlines and cancellation.
#include <unistd.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "test/cri-shim/shim_test_support.h"

namespace cryo::shim::testing {
namespace {

using ::testing::HasSubstr;

std::string Value(const std::multimap<grpc::string_ref, grpc::string_ref>& md,
                  const std::string& key) {
  auto it = md.find(key);
  return it == md.end() ? "<none>" : std::string(it->second.data(), it->second.size());
}

class ProxyCallTest : public ShimFixture {};

bool WaitUntilGone(const std::string& path) {
  for (int i = 0; i < 1000; ++i) {
    if (access(path.c_str(), F_OK) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST_F(ProxyCallTest, UnaryCallForwardsRequestResponseAndMetadataBothWays) {
  StartShim();
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-request-id", "req-42");
  cri::VersionRequest req;
  req.set_version("0.1.0-test");
  cri::VersionResponse resp;
  grpc::Status st = stub_->Version(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.runtime_name(), "fake");
  EXPECT_EQ(resp.runtime_version(), "0.1.0-test");
  EXPECT_EQ(Value(ctx.GetServerInitialMetadata(), "x-fake-initial"), "hello");
  EXPECT_EQ(Value(ctx.GetServerTrailingMetadata(), "x-fake-trailing"), "bye");
  EXPECT_EQ(Value(ctx.GetServerTrailingMetadata(), "x-echo-request-id"), "req-42");
  EXPECT_EQ(fake_->seen().last_request_id, "req-42");
  EXPECT_EQ(fake_->seen().version_calls, 1);
}

TEST_F(ProxyCallTest, ErrorStatusIsForwardedUnchangedWithDetails) {
  StartShim();
  grpc::ClientContext ctx;
  cri::ContainerStatusRequest req;
  req.set_container_id("missing");
  cri::ContainerStatusResponse resp;
  grpc::Status st = stub_->ContainerStatus(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(), "container missing not found");
  EXPECT_EQ(st.error_details(), "detail-bytes");
}

TEST_F(ProxyCallTest, DeadlineReachesTheRuntime) {
  StartShim();
  grpc::ClientContext ctx;
  auto deadline = In(std::chrono::milliseconds(20000));
  ctx.set_deadline(deadline);
  cri::ContainerStatusRequest req;
  req.set_container_id("c1");
  cri::ContainerStatusResponse resp;
  ASSERT_TRUE(stub_->ContainerStatus(&ctx, req, &resp).ok());
  auto seen = fake_->seen().last_deadline;
  EXPECT_NE(seen, std::chrono::system_clock::time_point::max())
      << "no deadline reached the runtime";
  // The runtime sees kubelet's deadline. gRPC sends deadlines as a relative grpc-timeout with a
  // few significant digits, rounded up at each hop, so allow a few percent either way.
  EXPECT_LE(seen, deadline + std::chrono::milliseconds(1000));
  EXPECT_GE(seen, deadline - std::chrono::milliseconds(1000));
}

TEST_F(ProxyCallTest, CallWithoutDeadlineReachesTheRuntimeWithoutOne) {
  StartShim();
  grpc::ClientContext ctx;
  cri::ContainerStatusRequest req;
  req.set_container_id("c1");
  cri::ContainerStatusResponse resp;
  ASSERT_TRUE(stub_->ContainerStatus(&ctx, req, &resp).ok());
  EXPECT_EQ(fake_->seen().last_deadline, std::chrono::system_clock::time_point::max());
}

TEST_F(ProxyCallTest, CancellingTheCallCancelsItAtTheRuntime) {
  StartShim();
  grpc::ClientContext ctx;
  cri::ContainerStatusRequest req;
  req.set_container_id("block");
  cri::ContainerStatusResponse resp;
  std::promise<grpc::Status> done;
  stub_->async()->ContainerStatus(&ctx, &req, &resp, [&](grpc::Status st) { done.set_value(st); });
  ASSERT_TRUE(fake_->WaitFor([](const FakeRuntime::Seen& s) { return s.block_started; },
                             absl::Seconds(10)));
  ctx.TryCancel();
  EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(fake_->WaitFor([](const FakeRuntime::Seen& s) { return s.block_cancelled; },
                             absl::Seconds(10)));
}

TEST_F(ProxyCallTest, ExpiredDeadlineEndsTheCallAtTheRuntime) {
  StartShim();
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::milliseconds(300)));
  cri::ContainerStatusRequest req;
  req.set_container_id("block");
  cri::ContainerStatusResponse resp;
  EXPECT_EQ(stub_->ContainerStatus(&ctx, req, &resp).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(fake_->WaitFor([](const FakeRuntime::Seen& s) { return s.block_cancelled; },
                             absl::Seconds(10)));
}

TEST_F(ProxyCallTest, ServerStreamingCallForwardsEveryMessage) {
  StartShim();
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-events", "5");
  cri::GetEventsRequest req;
  auto reader = stub_->GetContainerEvents(&ctx, req);
  cri::ContainerEventResponse ev;
  std::vector<std::string> ids;
  while (reader->Read(&ev)) ids.push_back(ev.container_id());
  grpc::Status st = reader->Finish();
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(ids, (std::vector<std::string>{"c0", "c1", "c2", "c3", "c4"}));
}

TEST_F(ProxyCallTest, LeavingAnEndlessStreamCancelsItAtTheRuntime) {
  StartShim();
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-events", "forever");
  cri::GetEventsRequest req;
  auto reader = stub_->GetContainerEvents(&ctx, req);
  cri::ContainerEventResponse ev;
  ASSERT_TRUE(reader->Read(&ev));
  EXPECT_EQ(ev.container_id(), "c0");
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(fake_->WaitFor([](const FakeRuntime::Seen& s) { return s.events_cancelled; },
                             absl::Seconds(10)));
}

TEST_F(ProxyCallTest, BidiStreamOfAnUnknownServiceIsForwarded) {
  StartShim();
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(&ctx, "/test.Echo/Bidi", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  for (int i = 0; i < 3; ++i) {
    std::string payload = absl::StrCat("message-", i);
    grpc::Slice slice(payload);
    grpc::ByteBuffer out(&slice, 1);
    call->Write(out, reinterpret_cast<void*>(2));
    ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
    grpc::ByteBuffer in;
    call->Read(&in, reinterpret_cast<void*>(3));
    ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(in.Dump(&slices).ok());
    std::string echoed;
    for (auto& s : slices) echoed.append(reinterpret_cast<const char*>(s.begin()), s.size());
    EXPECT_EQ(echoed, payload);
  }
  call->WritesDone(reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(5));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Value(ctx.GetServerTrailingMetadata(), "x-count"), "3");
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ProxyCallTest, UnknownMethodGetsTheRuntimesOwnAnswer) {
  StartShim();
  grpc::GenericStub generic(channel_);
  for (const char* method : {"/test.Echo/Fail", "/runtime.v1.RuntimeService/NoSuchMethod"}) {
    grpc::ClientContext ctx;
    grpc::Slice empty("");
    grpc::ByteBuffer req(&empty, 1), resp;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                      [&](grpc::Status st) { done.set_value(st); });
    grpc::Status st = done.get_future().get();
    if (std::string(method) == "/test.Echo/Fail") {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
      EXPECT_EQ(st.error_message(), "echo says no");
    } else {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED);
      EXPECT_EQ(st.error_message(), "fake: no such method");
    }
  }
}

TEST_F(ProxyCallTest, LargeMessagesPassBothWays) {
  StartShim();
  grpc::ClientContext ctx;
  cri::ExecSyncRequest req;
  req.add_cmd("big");
  req.add_cmd(std::to_string(12 << 20));
  req.set_container_id(std::string(6 << 20, 'r'));  // a big request too (ignored by the fake)
  cri::ExecSyncResponse resp;
  grpc::Status st = stub_->ExecSync(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.stdout().size(), size_t{12} << 20);
}

TEST_F(ProxyCallTest, ManyConcurrentCallsAllComeBackRight) {
  StartShim();
  constexpr int kThreads = 8;
  constexpr int kCallsEach = 50;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsEach; ++i) {
        grpc::ClientContext ctx;
        cri::VersionRequest req;
        req.set_version(absl::StrCat(t, "-", i));
        cri::VersionResponse resp;
        if (stub_->Version(&ctx, req, &resp).ok() && resp.runtime_version() == req.version()) {
          good++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), kThreads * kCallsEach);
}

TEST_F(ProxyCallTest, RuntimeDownGivesAClearUnavailableAndTheShimRecovers) {
  fake_->Stop();
  fake_.reset();
  StartShim();
  grpc::ClientContext ctx;
  cri::VersionRequest req;
  cri::VersionResponse resp;
  grpc::Status st = stub_->Version(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(),
              HasSubstr(absl::StrCat("cryo-cri-shim: container runtime at unix://", RuntimeSocket(),
                                     " is unavailable")));
  EXPECT_EQ(CounterValue("cryo_shim_runtime_unavailable_total", {}), 1);

  // Streaming calls too.
  grpc::ClientContext sctx;
  auto reader = stub_->GetContainerEvents(&sctx, cri::GetEventsRequest());
  cri::ContainerEventResponse ev;
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);

  absl::StatusOr<std::unique_ptr<FakeRuntime>> fake = FakeRuntime::Start(RuntimeSocket());
  ASSERT_TRUE(fake.ok()) << fake.status();
  fake_ = std::move(*fake);
  grpc::Status last;
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  do {
    grpc::ClientContext again;
    again.set_deadline(In(std::chrono::milliseconds(2000)));
    last = stub_->Version(&again, req, &resp);
    if (!last.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!last.ok() && absl::Now() < deadline);
  EXPECT_TRUE(last.ok()) << "shim did not recover: " << last.error_message();
  EXPECT_EQ(resp.runtime_name(), "fake");
}

TEST_F(ProxyCallTest, RuntimesOwnUnavailableIsNotRewritten) {
  StartShim();
  // A connected runtime answering UNAVAILABLE itself keeps its message: only failures to reach
  // it are rewritten. The fake has none of its own, so check through the observer directly.
  CallObserver observer(nullptr, "unix:///x.sock");
  CallObserver::Call call = observer.Begin("/runtime.v1.RuntimeService/Version", "v");
  grpc::Status own(grpc::StatusCode::UNAVAILABLE, "runtime is shutting down");
  grpc::Status out = observer.End(call, CallPath::kForwarded, own, false);
  EXPECT_EQ(out.error_message(), "runtime is shutting down");
  out = observer.End(call, CallPath::kForwarded, own, true);
  EXPECT_EQ(out.error_message(),
            "cryo-cri-shim: container runtime at unix:///x.sock is unavailable: runtime is "
            "shutting down");
}

TEST_F(ProxyCallTest, MetricsCountCallsByMethodAndCode) {
  StartShim();
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    cri::VersionResponse resp;
    grpc::Status st = stub_->Version(&ctx, cri::VersionRequest(), &resp);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  }
  grpc::ClientContext ctx;
  cri::ContainerStatusRequest req;
  req.set_container_id("missing");
  cri::ContainerStatusResponse resp;
  (void)stub_->ContainerStatus(&ctx, req, &resp);

  EXPECT_EQ(
      CounterValue("cryo_shim_requests_total",
                   {{"method", "RuntimeService/Version"}, {"code", "OK"}, {"path", "forwarded"}}),
      3);
  EXPECT_EQ(CounterValue("cryo_shim_requests_total",
                         {{"method", "RuntimeService/ContainerStatus"}, {"code", "NOT_FOUND"}}),
            1);
}

TEST_F(ProxyCallTest, ShutdownLetsUnaryCallsInFlightFinish) {
  StartShim();
  grpc::ClientContext ctx;
  cri::ContainerStatusRequest req;
  req.set_container_id("latch");
  cri::ContainerStatusResponse resp;
  std::promise<grpc::Status> done;
  stub_->async()->ContainerStatus(&ctx, &req, &resp, [&](grpc::Status st) { done.set_value(st); });
  ASSERT_TRUE(fake_->WaitFor([](const FakeRuntime::Seen& s) { return s.latch_started; },
                             absl::Seconds(10)));
  std::thread shutdown([&] { shim_->Shutdown(absl::Seconds(60)); });
  // The socket goes first: nobody new gets in while the call finishes.
  ASSERT_TRUE(WaitUntilGone(ShimSocket()));
  fake_->ReleaseLatch();
  grpc::Status st = done.get_future().get();
  shutdown.join();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.status().id(), "latch");
}

TEST_F(ProxyCallTest, ShutdownCutsEndlessStreams) {
  StartShim();
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-events", "forever");
  auto reader = stub_->GetContainerEvents(&ctx, cri::GetEventsRequest());
  cri::ContainerEventResponse ev;
  ASSERT_TRUE(reader->Read(&ev));
  // A stream is not waited for: the grace period is for unary calls (the test would time out).
  shim_->Shutdown(absl::Hours(1));
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_FALSE(reader->Finish().ok());
  EXPECT_TRUE(fake_->WaitFor([](const FakeRuntime::Seen& s) { return s.events_cancelled; },
                             absl::Seconds(10)));
}

TEST_F(ProxyCallTest, ShimRefusesASocketAnotherServerHolds) {
  StartShim();
  absl::StatusOr<std::unique_ptr<ShimServer>> second = ShimServer::Create(
      {ShimSocket(), absl::StrCat("unix://", RuntimeSocket())}, OwnedMethods(), nullptr);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace cryo::shim::testing
