#pragma once

// cryod's read-only HTTP JSON API, served beside /metrics:
//   GET /v1/checkpoints[?workload=W]  array of checkpoints, newest first
//   GET /v1/checkpoints/<id>          one checkpoint with its files and manifest (less the
//                                     command line and annotations, see checkpoint_json.h)
// Errors are {"error": {"code": "NOT_FOUND", "message": ...}} with 400 (unsafe id), 404
// (unknown id), 503 (cryod still starting, or kMaxConcurrentListings listings in flight) or 500.
// kubectl-checkpoint reads it through the API server's pod proxy.

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
// Listings served at once; more are answered 503 at once.
inline constexpr int kMaxConcurrentListings = 2;

// What the API reads: cryod's engine (List, Get), or a fake in tests.
struct CheckpointReader {
  std::function<absl::StatusOr<std::vector<v1::CheckpointInfo>>(const std::string& workload)> list;
  std::function<absl::StatusOr<v1::CheckpointInfo>(const std::string& id)> get;
};

// Adds the /v1/checkpoints routes.
void AddCheckpointRoutes(CheckpointReader reader, metrics::HttpRoutes& routes);

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
