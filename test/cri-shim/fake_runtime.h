// An in-process stand-in for containerd: a gRPC server on a unix socket with scripted CRI
// answers, plus generic test methods (/test.Echo/...) that no proto of the shim knows.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "lib/cri/cri_api.h"

namespace cryo::shim::testing {

namespace cri = ::runtime::v1;

// Scripted behaviour, keyed by request contents:
//   Version: answers runtime_name "fake", runtime_version = the request's version; sends
//     initial metadata x-fake-initial=hello, trailing x-fake-trailing=bye and echoes the
//     request's x-request-id as trailing x-echo-request-id.
//   ContainerStatus: id "missing" -> NOT_FOUND with error details "detail-bytes"; "block" ->
//     waits until the call is cancelled; anything else -> a status with that id. The deadline
//     seen is recorded.
//     "latch" -> waits until ReleaseLatch(), then answers.
//   StopContainer: records the request bytes.
//   ExecSync: cmd ["big", N] -> N bytes of stdout.
//   GetContainerEvents: metadata x-events=N sends N events; x-events=forever sends one and
//     waits until cancelled.
//   /test.Echo/Bidi: echoes each message; trailing x-count = number of messages.
//   /test.Echo/Fail: ABORTED "echo says no".
class FakeRuntime {
 public:
  static absl::StatusOr<std::unique_ptr<FakeRuntime>> Start(const std::string& socket_path);
  ~FakeRuntime();

  void Stop();
  // Lets ContainerStatus("latch") calls return.
  void ReleaseLatch();

  struct Seen {
    int version_calls = 0;
    std::vector<std::string> stop_requests;  // serialized StopContainerRequest
    std::chrono::system_clock::time_point last_deadline;
    bool block_started = false;
    bool latch_started = false;
    bool latch_released = false;
    bool block_cancelled = false;
    bool events_cancelled = false;
    std::string last_request_id;
  };
  Seen seen();
  // Waits until pred(seen) or timeout.
  bool WaitFor(const std::function<bool(const Seen&)>& pred, absl::Duration timeout);

 private:
  class Runtime;
  class Echo;
  FakeRuntime() = default;

  absl::Mutex mu_;
  Seen seen_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Echo> echo_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace cryo::shim::testing
