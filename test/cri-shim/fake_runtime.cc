#include "test/cri-shim/fake_runtime.h"

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace cryo::shim::testing {

class FakeRuntime::Runtime final : public cri::RuntimeService::Service {
 public:
  explicit Runtime(FakeRuntime* fake) : fake_(fake) {}

  grpc::Status Version(grpc::ServerContext* ctx, const cri::VersionRequest* req,
                       cri::VersionResponse* resp) override {
    std::string request_id;
    auto it = ctx->client_metadata().find("x-request-id");
    if (it != ctx->client_metadata().end()) request_id.assign(it->second.data(), it->second.size());
    {
      absl::MutexLock lock(&fake_->mu_);
      fake_->seen_.version_calls++;
      fake_->seen_.last_deadline = ctx->deadline();
      fake_->seen_.last_request_id = request_id;
    }
    ctx->AddInitialMetadata("x-fake-initial", "hello");
    ctx->AddTrailingMetadata("x-fake-trailing", "bye");
    if (!request_id.empty()) ctx->AddTrailingMetadata("x-echo-request-id", request_id);
    resp->set_version(req->version());
    resp->set_runtime_name("fake");
    resp->set_runtime_version(req->version());
    resp->set_runtime_api_version("v1");
    return grpc::Status::OK;
  }

  grpc::Status ContainerStatus(grpc::ServerContext* ctx, const cri::ContainerStatusRequest* req,
                               cri::ContainerStatusResponse* resp) override {
    {
      absl::MutexLock lock(&fake_->mu_);
      fake_->seen_.last_deadline = ctx->deadline();
    }
    if (req->container_id() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "container missing not found",
                          "detail-bytes");
    }
    if (req->container_id() == "latch") {
      absl::MutexLock lock(&fake_->mu_);
      fake_->seen_.latch_started = true;
      auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(fake_->mu_) {
        return fake_->seen_.latch_released;
      };
      fake_->mu_.Await(absl::Condition(&released));
      resp->mutable_status()->set_id("latch");
      return grpc::Status::OK;
    }
    if (req->container_id() == "block") {
      {
        absl::MutexLock lock(&fake_->mu_);
        fake_->seen_.block_started = true;
      }
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      absl::MutexLock lock(&fake_->mu_);
      fake_->seen_.block_cancelled = true;
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    resp->mutable_status()->set_id(req->container_id());
    resp->mutable_status()->set_state(cri::CONTAINER_RUNNING);
    return grpc::Status::OK;
  }

  grpc::Status StopContainer(grpc::ServerContext* ctx, const cri::StopContainerRequest* req,
                             cri::StopContainerResponse* resp) override {
    absl::MutexLock lock(&fake_->mu_);
    fake_->seen_.stop_requests.push_back(req->SerializeAsString());
    return grpc::Status::OK;
  }

  grpc::Status ExecSync(grpc::ServerContext* ctx, const cri::ExecSyncRequest* req,
                        cri::ExecSyncResponse* resp) override {
    int64_t n = 0;
    if (req->cmd_size() == 2 && req->cmd(0) == "big" && absl::SimpleAtoi(req->cmd(1), &n)) {
      resp->set_stdout(std::string(static_cast<size_t>(n), 'x'));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetContainerEvents(
      grpc::ServerContext* ctx, const cri::GetEventsRequest* req,
      grpc::ServerWriter<cri::ContainerEventResponse>* writer) override {
    std::string mode = "3";
    auto it = ctx->client_metadata().find("x-events");
    if (it != ctx->client_metadata().end()) mode.assign(it->second.data(), it->second.size());
    if (mode == "forever") {
      cri::ContainerEventResponse ev;
      ev.set_container_id("c0");
      writer->Write(ev);
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      absl::MutexLock lock(&fake_->mu_);
      fake_->seen_.events_cancelled = true;
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    int n = 0;
    (void)absl::SimpleAtoi(mode, &n);
    for (int i = 0; i < n; ++i) {
      cri::ContainerEventResponse ev;
      ev.set_container_id(absl::StrCat("c", i));
      ev.set_container_event_type(cri::CONTAINER_STARTED_EVENT);
      writer->Write(ev);
    }
    return grpc::Status::OK;
  }

 private:
  FakeRuntime* fake_;
};

class FakeRuntime::Echo final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(grpc::GenericCallbackServerContext* ctx) : ctx_(ctx) {
        if (ctx->method() == "/test.Echo/Fail") {
          Finish(grpc::Status(grpc::StatusCode::ABORTED, "echo says no"));
          return;
        }
        if (ctx->method() != "/test.Echo/Bidi") {
          Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "fake: no such method"));
          return;
        }
        StartRead(&buf_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          ctx_->AddTrailingMetadata("x-count", std::to_string(count_));
          Finish(grpc::Status::OK);
          return;
        }
        ++count_;
        StartWrite(&buf_);
      }
      void OnWriteDone(bool ok) override {
        if (ok) {
          StartRead(&buf_);
        } else {
          Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "write failed"));
        }
      }
      void OnDone() override { delete this; }

     private:
      grpc::GenericCallbackServerContext* ctx_;
      grpc::ByteBuffer buf_;
      int count_ = 0;
    };
    return new Reactor(ctx);
  }
};

absl::StatusOr<std::unique_ptr<FakeRuntime>> FakeRuntime::Start(const std::string& socket_path) {
  auto fake = std::unique_ptr<FakeRuntime>(new FakeRuntime());
  fake->runtime_ = std::make_unique<Runtime>(fake.get());
  fake->echo_ = std::make_unique<Echo>();
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials(),
                           &bound);
  builder.RegisterService(fake->runtime_.get());
  builder.RegisterCallbackGenericService(fake->echo_.get());
  builder.SetMaxSendMessageSize(-1);
  builder.SetMaxReceiveMessageSize(-1);
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat("fake runtime cannot listen on ", socket_path));
  }
  return fake;
}

void FakeRuntime::ReleaseLatch() {
  absl::MutexLock lock(&mu_);
  seen_.latch_released = true;
}

void FakeRuntime::Stop() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
  }
}

FakeRuntime::~FakeRuntime() { Stop(); }

FakeRuntime::Seen FakeRuntime::seen() {
  absl::MutexLock lock(&mu_);
  return seen_;
}

bool FakeRuntime::WaitFor(const std::function<bool(const Seen&)>& pred, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto cond = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return pred(seen_); };
  return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
}

}  // namespace cryo::shim::testing
