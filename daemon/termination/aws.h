#pragma once

// Amazon EC2: spot interruption notices from the instance metadata service (IMDS).
//   PUT <base>/latest/api/token  (X-aws-ec2-metadata-token-ttl-seconds: N)  -> session token
//   GET <base>/latest/meta-data/spot/instance-action  (X-aws-ec2-metadata-token: TOKEN)
//       404: no interruption; 200: {"action": "terminate"|"stop"|"hibernate",
//       "time": "2026-11-22T08:22:00Z"} about two minutes before the action.
// IMDSv2 (token) is used when it works. The token is cached until a minute before it expires and
// fetched again on a 401. When the token PUT fails (403/404/405, or no answer: a container
// behind a hop limit of 1 never sees the reply) the provider falls back to IMDSv1 (no token) and
// tries v2 again after `v2_retry`, or at once if v1 is refused with 401 (v2 required).

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/termination/clock.h"
#include "daemon/termination/http_client.h"
#include "daemon/termination/provider.h"

namespace cryo::termination {

inline constexpr char kAwsDefaultUrl[] = "http://169.254.169.254";

struct AwsOptions {
  std::string base_url = kAwsDefaultUrl;
  absl::Duration token_ttl = absl::Hours(6);   // the most IMDS allows
  absl::Duration v2_retry = absl::Minutes(5);  // while on the IMDSv1 fallback
};

class AwsSpotProvider : public NoticeProvider {
 public:
  AwsSpotProvider(std::shared_ptr<HttpClient> http, Clock* clock, AwsOptions options);
  std::string Name() const override { return "aws"; }
  absl::StatusOr<std::vector<Notice>> Poll() override;

  // For tests and logs: whether requests currently go without a token.
  bool using_imdsv1() const { return token_.empty() && clock_->Now() < v1_until_; }

 private:
  // The token to send; "" for IMDSv1. Errors only for CANCELLED.
  absl::StatusOr<std::string> Token();
  absl::StatusOr<std::string> FetchToken();
  absl::StatusOr<HttpResponse> GetAction(const std::string& token);

  std::shared_ptr<HttpClient> http_;
  Clock* clock_;
  AwsOptions options_;
  std::string token_;
  absl::Time token_expiry_ = absl::InfinitePast();
  absl::Time v1_until_ = absl::InfinitePast();  // v1 fallback in force until then
  std::string token_error_;                     // why the last token PUT failed
};

}  // namespace cryo::termination
