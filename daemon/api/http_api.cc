#include "daemon/api/http_api.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/api/checkpoint_json.h"
#include "lib/base/human.h"
#include "lib/base/ids.h"

namespace cryo::api {
namespace {

constexpr char kJson[] = "application/json";

int HttpCode(absl::StatusCode c) {
  switch (c) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
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

}  // namespace

metrics::HttpResponse ErrorResponse(const absl::Status& s) {
  // The code as gRPC and the cryo CLI name it (NOT_FOUND): one spelling in every JSON error.
  return {HttpCode(s.code()), kJson,
          Dump(ErrorJson(absl::StatusCodeToString(s.code()), s.message()))};
}

void AddCheckpointRoutes(CheckpointReader reader, metrics::HttpRoutes& routes) {
  // A listing reads every manifest of the store: those in flight at once are bounded, so that
  // anyone who reaches the port cannot make cryod hold the store's manifests many times over.
  auto listing = std::make_shared<std::atomic<int>>(0);
  routes.Prefix(
      kCheckpointsPath, [reader = std::move(reader), listing](const metrics::HttpRequest& req) {
        if (!req.rest.empty()) return Get(reader, req.rest);
        if (listing->fetch_add(1) >= kMaxConcurrentListings) {
          listing->fetch_sub(1);
          return ErrorResponse(absl::UnavailableError(
              absl::StrCat(kMaxConcurrentListings, " listings are being served; try again")));
        }
        metrics::HttpResponse r = List(reader, req);
        listing->fetch_sub(1);
        return r;
      });
}

}  // namespace cryo::api
