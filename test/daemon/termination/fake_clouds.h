#pragma once

// Stand-ins for the three clouds' metadata servers, served by TestHttpServer. They answer with
// the clouds' documented formats and status codes, including what each cloud says to a request
// that lacks its required header or token.

#include <memory>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "test/daemon/termination/test_http_server.h"

namespace cryo::termination {

// GCE: /computeMetadata/v1/instance/{preempted,maintenance-event}; needs Metadata-Flavor: Google.
class FakeGce {
 public:
  static constexpr char kPath[] = "/computeMetadata/v1/instance/";
  TestResponse Handle(const TestRequest& req);
  TestHandler Handler() {
    return [this](const TestRequest& r) { return Handle(r); };
  }

  void SetPreempted(std::string v) { Set(&preempted_, std::move(v)); }  // "TRUE", "FALSE"
  void SetMaintenance(std::string v) { Set(&maintenance_, std::move(v)); }
  int missing_header() const {
    absl::MutexLock l(&mu_);
    return missing_header_;
  }

 private:
  void Set(std::string* f, std::string v) {
    absl::MutexLock l(&mu_);
    *f = std::move(v);
  }
  mutable absl::Mutex mu_;
  std::string preempted_ = "FALSE";
  std::string maintenance_ = "NONE";
  int missing_header_ = 0;
};

// AWS IMDS: PUT /latest/api/token, GET /latest/meta-data/spot/instance-action.
class FakeAws {
 public:
  TestResponse Handle(const TestRequest& req);
  TestHandler Handler() {
    return [this](const TestRequest& r) { return Handle(r); };
  }

  // Empty action: no interruption (404).
  void SetAction(std::string action, std::string time);
  // Served verbatim with 200 (a broken answer).
  void SetRawAction(std::string body);
  void SetRequireToken(bool v);     // HttpTokens=required (IMDSv1 answers 401)
  void SetTokenStatus(int status);  // non-200: the token PUT answers this (IMDSv2 off)
  void SetGrantedTtl(int seconds);  // 0: echo the requested TTL
  void InvalidateTokens();          // as after an IMDS restart: old tokens get 401
  int token_puts() const;
  int unauthorized() const;  // 401s answered
  std::string last_ttl_header() const;

 private:
  mutable absl::Mutex mu_;
  std::string action_, time_, raw_;
  bool require_token_ = true;
  int token_status_ = 200;
  int granted_ttl_ = 0;
  int next_token_ = 1;
  std::set<std::string> tokens_;
  int token_puts_ = 0;
  int unauthorized_ = 0;
  std::string last_ttl_header_;
};

// Azure IMDS: /metadata/scheduledevents and /metadata/instance/compute/name; needs Metadata: true.
class FakeAzure {
 public:
  static constexpr char kEventsPath[] = "/metadata/scheduledevents?api-version=2020-07-01";
  TestResponse Handle(const TestRequest& req);
  TestHandler Handler() {
    return [this](const TestRequest& r) { return Handle(r); };
  }

  void SetDocument(std::string json);  // the Scheduled Events document, verbatim
  void SetVmName(std::string name);    // empty: the name endpoint answers 404
  int missing_header() const;

 private:
  mutable absl::Mutex mu_;
  std::string document_ = R"({"DocumentIncarnation":0,"Events":[]})";
  std::string vm_name_ = "vm-a";
  int missing_header_ = 0;
};

// One Scheduled Events document with one event.
std::string AzureDoc(int incarnation, const std::string& id, const std::string& type,
                     const std::string& resource, const std::string& status,
                     const std::string& not_before);

}  // namespace cryo::termination
