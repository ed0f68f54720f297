#include "daemon/termination/aws.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "nlohmann/json.hpp"

namespace cryo::termination {
namespace {

constexpr char kTokenPath[] = "/latest/api/token";
constexpr char kActionPath[] = "/latest/meta-data/spot/instance-action";
// A token this close to expiry is replaced before use, so it never expires mid-request.
constexpr absl::Duration kTokenMargin = absl::Minutes(1);

std::string TrimSlash(std::string base) {
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base;
}

}  // namespace

AwsSpotProvider::AwsSpotProvider(std::shared_ptr<HttpClient> http, Clock* clock, AwsOptions options)
    : http_(std::move(http)), clock_(clock), options_(std::move(options)) {
  options_.base_url = TrimSlash(options_.base_url);
}

absl::StatusOr<std::string> AwsSpotProvider::FetchToken() {
  HttpRequest req;
  req.method = "PUT";
  req.url = options_.base_url + kTokenPath;
  req.headers = {{"X-aws-ec2-metadata-token-ttl-seconds",
                  std::to_string(absl::ToInt64Seconds(options_.token_ttl))}};
  CRYO_ASSIGN_OR_RETURN(HttpResponse resp, http_->Send(req));
  std::string token(absl::StripAsciiWhitespace(resp.body));
  if (resp.status != 200) return HttpStatusError(req, resp);
  if (token.empty()) return absl::FailedPreconditionError(req.url + ": empty token");
  absl::Duration ttl = options_.token_ttl;
  int64_t granted = 0;
  if (absl::SimpleAtoi(resp.Header("x-aws-ec2-metadata-token-ttl-seconds"), &granted) &&
      granted > 0) {
    ttl = std::min(ttl, absl::Seconds(granted));
  }
  token_expiry_ = clock_->Now() + ttl;
  return token;
}

absl::StatusOr<std::string> AwsSpotProvider::Token() {
  const absl::Time now = clock_->Now();
  if (!token_.empty() && now < token_expiry_ - kTokenMargin) return token_;
  token_.clear();
  if (now < v1_until_) return std::string();
  auto token = FetchToken();
  if (token.ok()) {
    if (v1_until_ != absl::InfinitePast()) {
      CRYO_LOG(Info) << "aws: IMDSv2 token works again";
    }
    v1_until_ = absl::InfinitePast();
    token_error_.clear();
    token_ = *token;
    return token_;
  }
  if (absl::IsCancelled(token.status())) return token.status();
  // IMDSv2 off or not answering: try IMDSv1 for a while (see aws.h).
  if (token_error_ != token.status().message()) {
    CRYO_LOG(Warning) << "aws: no IMDSv2 token (" << token.status().message()
                      << "); trying IMDSv1 for " << options_.v2_retry;
  }
  token_error_ = std::string(token.status().message());
  v1_until_ = now + options_.v2_retry;
  return std::string();
}

absl::StatusOr<HttpResponse> AwsSpotProvider::GetAction(const std::string& token) {
  HttpRequest req;
  req.url = options_.base_url + kActionPath;
  if (!token.empty()) req.headers = {{"X-aws-ec2-metadata-token", token}};
  return http_->Send(req);
}

absl::StatusOr<std::vector<Notice>> AwsSpotProvider::Poll() {
  CRYO_ASSIGN_OR_RETURN(std::string token, Token());
  CRYO_ASSIGN_OR_RETURN(HttpResponse resp, GetAction(token));
  if (resp.status == 401) {
    // With a token: it expired or IMDS restarted; without: IMDSv2 is required. Either way a
    // fresh token, once, right now.
    token_.clear();
    v1_until_ = absl::InfinitePast();
    CRYO_ASSIGN_OR_RETURN(token, Token());
    if (token.empty()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "aws: IMDSv1 refused (401: IMDSv2 required) and no IMDSv2 token: ", token_error_));
    }
    CRYO_ASSIGN_OR_RETURN(resp, GetAction(token));
  }
  HttpRequest req;
  req.url = options_.base_url + kActionPath;
  if (resp.status == 404) return std::vector<Notice>{};
  if (resp.status != 200) return HttpStatusError(req, resp);

  // Bounded: the answer comes over the network, from whatever answers at that address.
  auto j = json::Parse(resp.body, {kMaxMetadataBytes, kMaxMetadataDepth});
  std::string action, time;
  absl::Status fields =
      j.ok() && j->is_object() ? absl::OkStatus() : absl::InvalidArgumentError("");
  if (fields.ok()) {
    json::Fields f(*j, "");
    fields = f.Str("action", &action, /*required=*/true);
    if (fields.ok()) fields = f.Str("time", &time, /*required=*/true);
  }
  if (!fields.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        req.url, ": not an instance-action document: '", resp.body.substr(0, 120), "'"));
  }
  Notice n;
  n.provider = "aws";
  n.kind = "spot-interruption";
  n.id = absl::StrCat("aws/spot/", action, "/", time);
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, time, &n.deadline, &err)) {
    // Still a notice: the action is what matters; the time is only how long we have.
    n.deadline = absl::InfiniteFuture();
    CRYO_LOG(Warning) << "aws: instance-action time '" << time << "' unreadable: " << err;
  }
  n.detail = absl::StrCat("EC2 spot interruption: ", action, " at ", time);
  return std::vector<Notice>{n};
}

}  // namespace cryo::termination
