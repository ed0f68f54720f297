#include "daemon/api/http_api.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "daemon/api/checkpoint_json.h"
#include "lib/base/fs.h"
#include "lib/base/human.h"
#include "lib/base/ids.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "openssl/crypto.h"

namespace cryo::api {
namespace {

constexpr char kJson[] = "application/json";

int HttpCode(absl::StatusCode c) {
  switch (c) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

// Bytes that are not UTF-8 (a request's own path, quoted in an error) are replaced, never
// thrown about: nlohmann's dump() throws on them by default.
std::string Dump(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

absl::Time CreatedAt(const v1::CheckpointInfo& c) { return human::ParseRfc3339(c.created_at()); }

metrics::HttpResponse List(const CheckpointReader& reader, const metrics::HttpRequest& req) {
  auto list = reader.list(req.Param("workload"));
  if (!list.ok()) return ErrorResponse(list.status());
  // The store already lists newest first; sorting here keeps the promise for any reader.
  std::stable_sort(list->begin(), list->end(),
                   [](const v1::CheckpointInfo& a, const v1::CheckpointInfo& b) {
                     return CreatedAt(a) > CreatedAt(b);
                   });
  return {200, kJson, Dump(CheckpointsToJson(*list))};
}

metrics::HttpResponse Get(const CheckpointReader& reader, const std::string& id) {
  // Ids are directory names in the store: refuse anything else before it gets near a path.
  if (absl::Status s = ValidateCheckpointId(id); !s.ok()) return ErrorResponse(s);
  auto c = reader.get(id);
  if (!c.ok()) return ErrorResponse(c.status());
  return {200, kJson, Dump(CheckpointToJson(*c))};
}

bool SameToken(absl::string_view given, const std::string& want) {
  return given.size() == want.size() && CRYPTO_memcmp(given.data(), want.data(), want.size()) == 0;
}

// OK when the caller may read the API: it showed the token (`given`), or the API is open.
absl::Status Admit(const ApiAccess& access, absl::string_view given, bool header) {
  if (access.token.empty()) {
    if (access.open) return absl::OkStatus();
    return absl::PermissionDeniedError(
        "cryod's checkpoint API is off on this port: it listens beyond loopback and cryod has no "
        "http_api_token_file (docs/security.md, \"cryod's HTTP port\")");
  }
  if (given.empty()) {
    return absl::UnauthenticatedError(
        header
            ? "cryod's checkpoint API needs its token: send \"Authorization: Bearer TOKEN\", or "
              "POST /v1/query {\"token\", \"get\"} (kubectl cryo reads it from the chart's Secret)"
            : "the query carries no \"token\"");
  }
  if (!SameToken(given, access.token)) {
    return absl::UnauthenticatedError("wrong token for cryod's checkpoint API");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadApiToken(const std::string& path, const std::string& what) {
  CRYO_ASSIGN_OR_RETURN(std::string text, fs::ReadRegularFile(path, what, 4096));
  std::string line = text.substr(0, text.find('\n'));
  absl::string_view t = absl::StripAsciiWhitespace(line);
  if (t.size() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " in ", path, " has ", t.size(), " characters; it needs at least 16"));
  }
  return std::string(t);
}

metrics::HttpResponse ErrorResponse(const absl::Status& s) {
  // The code as gRPC and the cryo CLI name it (NOT_FOUND): one spelling in every JSON error.
  return {HttpCode(s.code()), kJson,
          Dump(ErrorJson(absl::StatusCodeToString(s.code()), s.message()))};
}

void AddCheckpointRoutes(CheckpointReader reader, metrics::HttpRoutes& routes, ApiAccess access) {
  // A listing reads every manifest of the store: those in flight at once are bounded, so that
  // anyone who reaches the port cannot make cryod hold the store's manifests many times over.
  auto listing = std::make_shared<std::atomic<int>>(0);
  // The API itself, answered once the caller is admitted (by a header or by a query).
  const metrics::HttpHandler serve = [reader = std::move(reader),
                                      listing](const metrics::HttpRequest& req) {
    if (!req.rest.empty()) return Get(reader, req.rest);
    if (listing->fetch_add(1) >= kMaxConcurrentListings) {
      listing->fetch_sub(1);
      return ErrorResponse(absl::UnavailableError(
          absl::StrCat(kMaxConcurrentListings, " listings are being served; try again")));
    }
    metrics::HttpResponse r = List(reader, req);
    listing->fetch_sub(1);
    return r;
  };
  auto api = std::make_shared<metrics::HttpRoutes>();
  api->Prefix(kCheckpointsPath, serve);
  // (The same prefix: the router already set req.rest.)
  routes.Prefix(kCheckpointsPath, [serve, access](const metrics::HttpRequest& req) {
    absl::string_view given = req.authorization;
    if (!absl::ConsumePrefix(&given, "Bearer ") && !given.empty()) given = "?";
    if (absl::Status ok = Admit(access, absl::StripAsciiWhitespace(given), true); !ok.ok()) {
      return ErrorResponse(ok);
    }
    return serve(req);
  });
  routes.Post(kQueryPath, [api, access](const metrics::HttpRequest& req) {
    auto body = json::Parse(req.body, {metrics::kMaxRequestBody, 4});
    if (!body.ok()) return ErrorResponse(absl::InvalidArgumentError(body.status().message()));
    if (!body->is_object()) {
      return ErrorResponse(absl::InvalidArgumentError("the query is not a JSON object"));
    }
    std::string token, get;
    json::Fields f(*body, "query");
    absl::Status st = f.Str("token", &token);
    if (st.ok()) st = f.Str("get", &get, true);
    if (!st.ok()) return ErrorResponse(absl::InvalidArgumentError(st.message()));
    if (absl::Status ok = Admit(access, token, false); !ok.ok()) return ErrorResponse(ok);
    if (!absl::StartsWith(get, kCheckpointsPath)) {
      return ErrorResponse(absl::InvalidArgumentError(
          absl::StrCat("\"get\" must name a path below ", kCheckpointsPath)));
    }
    return metrics::Dispatch(*api, "GET", get);
  });
}

}  // namespace cryo::api
