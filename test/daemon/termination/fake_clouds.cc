#include "test/daemon/termination/fake_clouds.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cryo::termination {

TestResponse FakeGce::Handle(const TestRequest& req) {
  absl::MutexLock l(&mu_);
  TestResponse r;
  r.headers = {{"Metadata-Flavor", "Google"}, {"Content-Type", "application/text"}};
  if (req.Header("metadata-flavor") != "Google") {
    ++missing_header_;
    r.status = 403;
    r.headers = {{"Content-Type", "text/html; charset=UTF-8"}};
    r.body =
        "<!DOCTYPE html><html><body><p><b>403.</b> That's an error.</p><p>Your client does not "
        "have permission to get URL <code>" +
        req.target + "</code> from this server. Missing Metadata-Flavor:Google header.</p>";
    return r;
  }
  const std::string base = kPath;
  if (req.method == "GET" && req.Path() == base + "preempted") {
    r.body = preempted_;
  } else if (req.method == "GET" && req.Path() == base + "maintenance-event") {
    r.body = maintenance_;
  } else {
    r.status = 404;
    r.headers = {{"Content-Type", "text/html; charset=UTF-8"}};
    r.body = "<!DOCTYPE html><html><body><p><b>404.</b> That's an error.</p>";
  }
  return r;
}

void FakeAws::SetAction(std::string action, std::string time) {
  absl::MutexLock l(&mu_);
  action_ = std::move(action);
  time_ = std::move(time);
  raw_.clear();
}
void FakeAws::SetRawAction(std::string body) {
  absl::MutexLock l(&mu_);
  raw_ = std::move(body);
}
void FakeAws::SetRequireToken(bool v) {
  absl::MutexLock l(&mu_);
  require_token_ = v;
}
void FakeAws::SetTokenStatus(int status) {
  absl::MutexLock l(&mu_);
  token_status_ = status;
}
void FakeAws::SetGrantedTtl(int seconds) {
  absl::MutexLock l(&mu_);
  granted_ttl_ = seconds;
}
void FakeAws::InvalidateTokens() {
  absl::MutexLock l(&mu_);
  tokens_.clear();
}
int FakeAws::token_puts() const {
  absl::MutexLock l(&mu_);
  return token_puts_;
}
int FakeAws::unauthorized() const {
  absl::MutexLock l(&mu_);
  return unauthorized_;
}
std::string FakeAws::last_ttl_header() const {
  absl::MutexLock l(&mu_);
  return last_ttl_header_;
}

TestResponse FakeAws::Handle(const TestRequest& req) {
  absl::MutexLock l(&mu_);
  TestResponse r;
  r.headers = {{"Content-Type", "text/plain"}, {"Server", "EC2ws"}};
  const std::string not_found =
      "<?xml version=\"1.0\" encoding=\"iso-8859-1\"?>\n<html><head><title>404 - Not "
      "Found</title></head><body><h1>404 - Not Found</h1></body></html>\n";
  if (req.Path() == "/latest/api/token") {
    if (req.method != "PUT") {
      r.status = 405;
      return r;
    }
    ++token_puts_;
    last_ttl_header_ = req.Header("x-aws-ec2-metadata-token-ttl-seconds");
    if (token_status_ != 200) {
      r.status = token_status_;
      return r;
    }
    int ttl = 0;
    if (req.Has("x-forwarded-for") || !absl::SimpleAtoi(last_ttl_header_, &ttl) || ttl < 1 ||
        ttl > 21600) {
      r.status = 400;
      return r;
    }
    if (granted_ttl_ > 0) ttl = granted_ttl_;
    std::string token = absl::StrCat("AQAEAtoken", next_token_++, "==");
    tokens_.insert(token);
    r.headers.emplace_back("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", std::to_string(ttl));
    r.body = token;
    return r;
  }
  if (req.method != "GET") {
    r.status = 405;
    return r;
  }
  // A token that is sent must be valid; none is fine only while IMDSv1 is allowed.
  bool authorized = req.Has("x-aws-ec2-metadata-token")
                        ? tokens_.count(req.Header("x-aws-ec2-metadata-token")) > 0
                        : !require_token_;
  if (!authorized) {
    ++unauthorized_;
    r.status = 401;
    return r;
  }
  if (req.Path() == "/latest/meta-data/spot/instance-action") {
    if (!raw_.empty()) {
      r.body = raw_;
    } else if (!action_.empty()) {
      r.body = absl::StrCat(R"({"action": ")", action_, R"(", "time": ")", time_, R"("})");
    } else {
      r.status = 404;
      r.headers = {{"Content-Type", "text/html"}};
      r.body = not_found;
    }
    return r;
  }
  r.status = 404;
  r.body = not_found;
  return r;
}

void FakeAzure::SetDocument(std::string json) {
  absl::MutexLock l(&mu_);
  document_ = std::move(json);
}
void FakeAzure::SetVmName(std::string name) {
  absl::MutexLock l(&mu_);
  vm_name_ = std::move(name);
}
int FakeAzure::missing_header() const {
  absl::MutexLock l(&mu_);
  return missing_header_;
}

TestResponse FakeAzure::Handle(const TestRequest& req) {
  absl::MutexLock l(&mu_);
  TestResponse r;
  r.headers = {{"Content-Type", "application/json; charset=utf-8"}};
  if (req.Header("metadata") != "true") {
    ++missing_header_;
    r.status = 400;
    r.body = R"({"error":"Bad request. Required metadata header not specified"})";
    return r;
  }
  if (!absl::StrContains(req.Query(), "api-version=")) {
    r.status = 400;
    r.body = R"({"error":"Bad request. api-version was not specified in the request."})";
    return r;
  }
  if (req.method == "GET" && req.Path() == "/metadata/scheduledevents") {
    r.body = document_;
  } else if (req.method == "GET" && req.Path() == "/metadata/instance/compute/name" &&
             absl::StrContains(req.Query(), "format=text") && !vm_name_.empty()) {
    r.headers = {{"Content-Type", "text/plain; charset=utf-8"}};
    r.body = vm_name_;
  } else {
    r.status = 404;
    r.body = R"({"error":"Not found"})";
  }
  return r;
}

std::string AzureDoc(int incarnation, const std::string& id, const std::string& type,
                     const std::string& resource, const std::string& status,
                     const std::string& not_before) {
  return absl::StrCat(R"({"DocumentIncarnation":)", incarnation, R"(,"Events":[{"EventId":")", id,
                      R"(","EventStatus":")", status, R"(","EventType":")", type,
                      R"(","ResourceType":"VirtualMachine","Resources":[")", resource,
                      R"("],"NotBefore":")", not_before,
                      R"(","Description":"","EventSource":"Platform","DurationInSeconds":-1}]})");
}

}  // namespace cryo::termination
