#pragma once

// The Kubernetes API as a pod sees it: the service host and port from the environment kubelet
// sets, the service account's token and CA from its mounted files, JSON over https with the
// server's certificate checked. Just the calls cryo's own programs make (get, list, merge
// patch); `kubectl cryo` goes through the user's kubectl instead.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/termination/http_client.h"
#include "nlohmann/json.hpp"

namespace cryo::kube {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ApiConfig {
  std::string base_url;  // https://HOST:PORT
  std::string token;     // bearer token
  std::string ca_file;   // PEM bundle the server's certificate must chain to
};

// In-cluster configuration: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the
// token and ca.crt under `sa_dir`. FAILED_PRECONDITION naming what is missing (not in a pod,
// or a pod with automountServiceAccountToken off).
absl::StatusOr<ApiConfig> InClusterConfig(const std::string& sa_dir = kServiceAccountDir);

// Percent-encodes a query parameter's value (a label or field selector).
std::string QueryEscape(const std::string& s);

class ApiClient {
 public:
  // The HTTP client must speak https with `config.ca_file` (termination::CurlHttpClient).
  ApiClient(ApiConfig config, std::unique_ptr<termination::HttpClient> http)
      : config_(std::move(config)), http_(std::move(http)) {}

  // A real client over libcurl; answers up to 64 MiB (a cluster's list of pods).
  static absl::StatusOr<std::unique_ptr<ApiClient>> Create(ApiConfig config,
                                                           absl::Duration timeout);

  // GET PATH ("/apis/apps/v1/namespaces/NS/daemonsets/NAME", query included). An API error
  // carries the server's Status message: NOT_FOUND (404), PERMISSION_DENIED (401, 403),
  // UNAVAILABLE (5xx, no connection), FAILED_PRECONDITION (any other status).
  absl::StatusOr<nlohmann::json> Get(const std::string& path) const;
  // PATCH PATH with a JSON merge patch; the object as stored after it.
  absl::StatusOr<nlohmann::json> MergePatch(const std::string& path,
                                            const nlohmann::json& patch) const;

 private:
  absl::StatusOr<nlohmann::json> Call(const std::string& method, const std::string& path,
                                      const std::string& content_type,
                                      const std::string& body) const;

  ApiConfig config_;
  std::unique_ptr<termination::HttpClient> http_;
};

}  // namespace cryo::kube
