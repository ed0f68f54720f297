#include "daemon/kube/api_client.h"

#include <cctype>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lib/base/fs.h"

namespace cryo::kube {
namespace {

// An error from the API server: its Status object's message when it sent one.
absl::Status ApiError(const std::string& what, const termination::HttpResponse& r) {
  std::string message;
  if (auto j = nlohmann::json::parse(r.body, nullptr, false);
      j.is_object() && j.value("kind", "") == "Status") {
    message = j.value("message", "");
  }
  if (message.empty()) message = std::string(absl::StripAsciiWhitespace(r.body)).substr(0, 200);
  const std::string msg =
      absl::StrCat(what, ": HTTP ", r.status, message.empty() ? "" : ": ", message);
  if (r.status == 404) return absl::NotFoundError(msg);
  if (r.status == 401 || r.status == 403) return absl::PermissionDeniedError(msg);
  if (r.status >= 500) return absl::UnavailableError(msg);
  return absl::FailedPreconditionError(msg);
}

}  // namespace

std::string QueryEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

absl::StatusOr<ApiConfig> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set: not running in a pod");
  }
  ApiConfig c;
  // An IPv6 service address goes in brackets.
  const std::string h = host;
  c.base_url =
      absl::StrCat("https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":", port);
  auto token = fs::ReadFile(sa_dir + "/token");
  if (!token.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no service account token at ", sa_dir,
                     "/token (is automountServiceAccountToken off?): ", token.status().message()));
  }
  c.token = std::string(absl::StripAsciiWhitespace(*token));
  if (c.token.empty())
    return absl::FailedPreconditionError(absl::StrCat(sa_dir, "/token is empty"));
  c.ca_file = sa_dir + "/ca.crt";
  if (!fs::Exists(c.ca_file)) {
    return absl::FailedPreconditionError(absl::StrCat("no API server CA at ", c.ca_file));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(ApiConfig config,
                                                             absl::Duration timeout) {
  auto http = termination::CurlHttpClient::Create(termination::CurlHttpClient::Options{
      .timeout = timeout, .https_ca_file = config.ca_file, .max_response = size_t{64} << 20});
  if (!http.ok()) return http.status();
  return std::make_unique<ApiClient>(std::move(config), std::move(*http));
}

absl::StatusOr<nlohmann::json> ApiClient::Get(const std::string& path) const {
  return Call("GET", path, "", "");
}

absl::StatusOr<nlohmann::json> ApiClient::MergePatch(const std::string& path,
                                                     const nlohmann::json& patch) const {
  return Call("PATCH", path, "application/merge-patch+json", patch.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::Call(const std::string& method, const std::string& path,
                                               const std::string& content_type,
                                               const std::string& body) const {
  termination::HttpRequest req;
  req.method = method;
  req.url = config_.base_url + path;
  req.headers.emplace_back("Authorization", "Bearer " + config_.token);
  req.headers.emplace_back("Accept", "application/json");
  if (!content_type.empty()) req.headers.emplace_back("Content-Type", content_type);
  req.body = body;
  const std::string what = absl::StrCat(method, " ", path);
  auto r = http_->Send(req);
  if (!r.ok()) return r.status();
  if (r->status < 200 || r->status > 299) return ApiError(what, *r);
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded())
    return absl::UnavailableError(absl::StrCat(what, ": the answer is not JSON"));
  return j;
}

}  // namespace cryo::kube
