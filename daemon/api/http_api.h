#pragma once

// cryod's read-only HTTP JSON API, served beside /metrics:
//   GET /v1/checkpoints[?workload=W]  array of checkpoints, newest first
//   GET /v1/checkpoints/<id>          one checkpoint with its files and manifest (less the
//                                     command line and annotations, see checkpoint_json.h)
//   POST /v1/query  {"token": T, "get": "/v1/checkpoints..."}: the same GET, for callers that
//                   cannot send headers (kubectl create --raw through the API server's proxy,
//                   which also strips Authorization)
// Only to callers who show the token (ApiAccess): "Authorization: Bearer T" on a GET, or the
// query's "token". Errors are {"error": {"code": "NOT_FOUND", "message": ...}} with 400 (unsafe
// id, bad query), 401 (no or a wrong token), 403 (the API is off), 404 (unknown id), 503 (cryod
// still starting, or kMaxConcurrentListings listings in flight) or 500. kubectl-cryo reads it
// through the API server's pod proxy with the token of the chart's Secret.

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cryo/v1/cryo.pb.h"
#include "daemon/metrics/http_server.h"

namespace cryo::api {

inline constexpr char kCheckpointsPath[] = "/v1/checkpoints";
inline constexpr char kQueryPath[] = "/v1/query";

// Who may read the API. The metadata of every namespace's checkpoints is in it, and the port is
// on the pod network: by default it is served only with a token, or on a loopback address.
struct ApiAccess {
  std::string token;  // what callers must show; empty: no token
  bool open = false;  // without a token: served (cryod's HTTP port is on a loopback address)
};
// The token in `path` (cryod's http_api_token_file): a regular file of at most 4 KiB, opened
// without blocking, whose first line (spaces trimmed) has at least 16 characters.
absl::StatusOr<std::string> ReadApiToken(const std::string& path,
                                         const std::string& what = "the HTTP API token");
// Listings served at once; more are answered 503 at once.
inline constexpr int kMaxConcurrentListings = 2;

// What the API reads: cryod's engine (List, Get), or a fake in tests.
struct CheckpointReader {
  std::function<absl::StatusOr<std::vector<v1::CheckpointInfo>>(const std::string& workload)> list;
  std::function<absl::StatusOr<v1::CheckpointInfo>(const std::string& id)> get;
};

// Adds the /v1/checkpoints and /v1/query routes, served as `access` says.
void AddCheckpointRoutes(CheckpointReader reader, metrics::HttpRoutes& routes, ApiAccess access);

// The JSON error response for a failed status (the code as gRPC names it: "NOT_FOUND").
metrics::HttpResponse ErrorResponse(const absl::Status& s);

// A reader over an engine that does not exist yet: cryod opens its HTTP endpoint before it
// builds the engine, so requests are answered UNAVAILABLE (503) until `*engine` is set.
// Engine needs List(workload) and Get(id) as service::Engine has them.
template <typename Engine>
CheckpointReader ReaderOver(const std::atomic<Engine*>* engine) {
  CheckpointReader r;
  r.list =
      [engine](const std::string& workload) -> absl::StatusOr<std::vector<v1::CheckpointInfo>> {
    Engine* e = engine->load(std::memory_order_acquire);
    if (e == nullptr) return absl::UnavailableError("cryod is starting");
    return e->List(workload);
  };
  r.get = [engine](const std::string& id) -> absl::StatusOr<v1::CheckpointInfo> {
    Engine* e = engine->load(std::memory_order_acquire);
    if (e == nullptr) return absl::UnavailableError("cryod is starting");
    return e->Get(id);
  };
  return r;
}

}  // namespace cryo::api
