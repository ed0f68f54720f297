#pragma once

// The HTTP the metadata endpoints need: plain http to a link-local address, a request or two per
// poll, tiny bodies. HttpClient is the seam the providers are tested through; CurlHttpClient
// sends with libcurl, with proxies, redirects and every scheme but http off (a metadata request
// must never go through a proxy from the environment).

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cryo::termination {

struct HttpRequest {
  std::string method = "GET";
  std::string url;  // http://HOST[:PORT]/PATH[?QUERY]
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  // The header's value, or "" when absent; `name` lower-case.
  std::string Header(const std::string& name) const;
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  // Any HTTP status is a response; an error means no (complete) response: UNAVAILABLE (refused,
  // reset, truncated, malformed), DEADLINE_EXCEEDED (timeout), INVALID_ARGUMENT (bad URL),
  // CANCELLED (after Shutdown()).
  virtual absl::StatusOr<HttpResponse> Send(const HttpRequest& request) = 0;
  // Ends the request in flight at once and fails every later one with CANCELLED, so the owner
  // can stop without waiting for a timeout.
  virtual void Shutdown() = 0;
};

// Bounds on the JSON documents a metadata server answers with (a few small objects).
inline constexpr size_t kMaxMetadataBytes = 1u << 20;
inline constexpr int kMaxMetadataDepth = 16;

// An error for an answer the caller cannot use: "GET URL: HTTP 403: <start of body>".
// 5xx are UNAVAILABLE, 401/403 PERMISSION_DENIED, other statuses FAILED_PRECONDITION.
absl::Status HttpStatusError(const HttpRequest& request, const HttpResponse& response);

struct HttpUrl {
  std::string host;       // without brackets for IPv6
  std::string port;       // "80" when not given
  std::string authority;  // host[:port] as written, for the Host header
  std::string target;     // path and query, "/" at least
};
// `scheme` "http" (the metadata endpoints) or "https" (the Kubernetes API, daemon/kube).
absl::StatusOr<HttpUrl> ParseHttpUrl(const std::string& url, absl::string_view scheme = "http");

class CurlHttpClient : public HttpClient {
 public:
  struct Options {
    absl::Duration timeout;  // bounds each request as a whole
    // Non-empty: https only, the server's certificate checked against this CA bundle (the
    // Kubernetes API's service-account CA); empty: plain http only (metadata endpoints).
    std::string https_ca_file;
    size_t max_response = 1 << 20;  // a larger answer is an error
  };
  // `timeout` bounds each request as a whole; plain http, answers up to 1 MiB.
  static absl::StatusOr<std::unique_ptr<CurlHttpClient>> Create(absl::Duration timeout);
  static absl::StatusOr<std::unique_ptr<CurlHttpClient>> Create(Options options);
  ~CurlHttpClient() override;

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override;
  void Shutdown() override;

 private:
  explicit CurlHttpClient(Options options) : o_(std::move(options)) {}

  const Options o_;
  absl::Mutex mu_;
  bool shut_ ABSL_GUARDED_BY(mu_) = false;
  std::set<void*> in_flight_ ABSL_GUARDED_BY(mu_);  // CURLM* of requests being sent
};

}  // namespace cryo::termination
