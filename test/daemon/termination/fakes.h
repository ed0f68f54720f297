#pragma once

// Fakes of the outside systems the termination providers use: the clock and HTTP.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/termination/clock.h"
#include "daemon/termination/http_client.h"

namespace cryo::termination {

class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1795000000)) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_;
};

// Answers every request with `handler` and remembers the requests.
class FakeHttpClient : public HttpClient {
 public:
  using Handler = std::function<absl::StatusOr<HttpResponse>(const HttpRequest&)>;
  explicit FakeHttpClient(Handler handler) : handler_(std::move(handler)) {}

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    {
      absl::MutexLock l(&mu_);
      requests_.push_back(request);
      if (shut_down_) return absl::CancelledError("shut down");
    }
    return handler_(request);
  }
  void Shutdown() override {
    absl::MutexLock l(&mu_);
    shut_down_ = true;
  }
  std::vector<HttpRequest> requests() {
    absl::MutexLock l(&mu_);
    return requests_;
  }

 private:
  Handler handler_;
  absl::Mutex mu_;
  std::vector<HttpRequest> requests_;
  bool shut_down_ = false;
};

inline HttpResponse Answer(int status, std::string body = "") {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace cryo::termination
