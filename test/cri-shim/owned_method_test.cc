// Owned methods: the handler sees the decoded request and decides forward / reply / fail.
#include "cri-shim/owned_method.h"

#include <future>
#include <string>

#include "absl/status/status.h"
#include "cri-shim/handlers/handlers.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "test/cri-shim/shim_test_support.h"

namespace cryo::shim::testing {
namespace {

// Version, owned by a test handler whose behaviour the test picks.
class TestVersionHandler final
    : public UnaryOwnedMethod<cri::VersionRequest, cri::VersionResponse> {
 public:
  enum class Mode { kReply, kForward, kFail, kAskRuntime };
  explicit TestVersionHandler(Mode mode, std::string* seen_version, std::string* seen_method)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/Version"),
        mode_(mode),
        seen_version_(seen_version),
        seen_method_(seen_method) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    *seen_version_ = request.version();
    *seen_method_ = ctx.method();
    switch (mode_) {
      case Mode::kReply: {
        cri::VersionResponse resp;
        resp.set_runtime_name(absl::StrCat("owned:", request.version()));
        return resp;
      }
      case Mode::kForward:
        return ForwardUnchanged{};
      case Mode::kFail:
        return absl::FailedPreconditionError("not now");
      case Mode::kAskRuntime: {
        // What the restore and checkpoint handlers will do: call the runtime themselves with
        // the incoming call's deadline and metadata, then answer.
        auto rctx = ctx.NewRuntimeContext();
        cri::VersionResponse resp;
        grpc::Status st = ctx.runtime().runtime().Version(rctx.get(), request, &resp);
        if (!st.ok()) return absl::UnavailableError(st.error_message());
        resp.set_runtime_name(absl::StrCat(resp.runtime_name(), "+cryo"));
        return resp;
      }
    }
    return absl::InternalError("unreachable");
  }

 private:
  Mode mode_;
  std::string* seen_version_;
  std::string* seen_method_;
};

class OwnedMethodTest : public ShimFixture {
 protected:
  void StartWith(TestVersionHandler::Mode mode) {
    OwnedMethods owned;
    ASSERT_TRUE(
        owned.Add(std::make_unique<TestVersionHandler>(mode, &seen_version_, &seen_method_)).ok());
    StartShim(std::move(owned));
  }

  grpc::Status CallVersion(cri::VersionResponse* resp) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-request-id", "owned-1");
    cri::VersionRequest req;
    req.set_version("9.9");
    return stub_->Version(&ctx, req, resp);
  }

  std::string seen_version_;
  std::string seen_method_;
};

TEST_F(OwnedMethodTest, HandlerCanAnswerItselfWithoutTheRuntime) {
  StartWith(TestVersionHandler::Mode::kReply);
  cri::VersionResponse resp;
  ASSERT_TRUE(CallVersion(&resp).ok());
  EXPECT_EQ(resp.runtime_name(), "owned:9.9");
  EXPECT_EQ(seen_version_, "9.9");
  EXPECT_EQ(seen_method_, "/runtime.v1.RuntimeService/Version");
  EXPECT_EQ(fake_->seen().version_calls, 0);
  EXPECT_EQ(CounterValue("cryo_shim_owned_decisions_total", {{"decision", "reply"}}), 1);
  EXPECT_EQ(CounterValue("cryo_shim_requests_total", {{"path", "owned"}, {"code", "OK"}}), 1);
}

TEST_F(OwnedMethodTest, HandlerCanForwardTheOriginalCall) {
  StartWith(TestVersionHandler::Mode::kForward);
  cri::VersionResponse resp;
  ASSERT_TRUE(CallVersion(&resp).ok());
  EXPECT_EQ(resp.runtime_name(), "fake");
  EXPECT_EQ(resp.runtime_version(), "9.9");
  EXPECT_EQ(seen_version_, "9.9");
  EXPECT_EQ(fake_->seen().version_calls, 1);
  EXPECT_EQ(fake_->seen().last_request_id, "owned-1");
}

TEST_F(OwnedMethodTest, HandlerCanFailTheCall) {
  StartWith(TestVersionHandler::Mode::kFail);
  cri::VersionResponse resp;
  grpc::Status st = CallVersion(&resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(st.error_message(), "not now");
  EXPECT_EQ(fake_->seen().version_calls, 0);
}

TEST_F(OwnedMethodTest, HandlerCanCallTheRuntimeWithTheCallsMetadata) {
  StartWith(TestVersionHandler::Mode::kAskRuntime);
  cri::VersionResponse resp;
  grpc::Status st = CallVersion(&resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(resp.runtime_name(), "fake+cryo");
  EXPECT_EQ(fake_->seen().last_request_id, "owned-1");
}

TEST_F(OwnedMethodTest, DefaultHandlersForwardEveryOwnedCallByteForByte) {
  HandlerDeps deps;
  deps.cryod = NewCryodClient("/nonexistent/cryod.sock");
  absl::StatusOr<OwnedMethods> owned = DefaultOwnedMethods(deps);
  ASSERT_TRUE(owned.ok()) << owned.status();
  for (const char* m :
       {"CheckpointContainer", "StopContainer", "CreateContainer", "StartContainer"}) {
    EXPECT_NE(owned->Find(absl::StrCat("/runtime.v1.RuntimeService/", m)), nullptr) << m;
  }
  StartShim(std::move(*owned));

  cri::StopContainerRequest req;
  req.set_container_id("ctr-1");
  req.set_timeout(30);
  grpc::ClientContext ctx;
  cri::StopContainerResponse resp;
  grpc::Status st = stub_->StopContainer(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  ASSERT_EQ(fake_->seen().stop_requests.size(), 1u);
  EXPECT_EQ(fake_->seen().stop_requests[0], req.SerializeAsString());
  EXPECT_EQ(CounterValue("cryo_shim_owned_decisions_total",
                         {{"method", "RuntimeService/StopContainer"}, {"decision", "forward"}}),
            1);
}

TEST_F(OwnedMethodTest, UndecodableRequestIsLeftToTheRuntime) {
  StartWith(TestVersionHandler::Mode::kReply);
  // Field 1 (version) claims 5 bytes and has 2: not a VersionRequest.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  std::string bytes(
      "\x0a\x05"
      "ab",
      4);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/runtime.v1.RuntimeService/Version", grpc::StubOptions(), &req, &resp,
                    [&](grpc::Status st) { done.set_value(st); });
  grpc::Status st = done.get_future().get();
  // The fake's generated server rejects it as kubelet would see from containerd.
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(seen_method_, "");  // the handler never ran
}

TEST(OwnedMethodsTest, RefusesDuplicatesAndBadNames) {
  std::string v, m;
  OwnedMethods owned;
  ASSERT_TRUE(
      owned.Add(std::make_unique<TestVersionHandler>(TestVersionHandler::Mode::kReply, &v, &m))
          .ok());
  EXPECT_EQ(
      owned.Add(std::make_unique<TestVersionHandler>(TestVersionHandler::Mode::kReply, &v, &m))
          .code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(owned.Add(nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(owned.Find("/runtime.v1.RuntimeService/Status"), nullptr);
}

}  // namespace
}  // namespace cryo::shim::testing
