// The HTTP request path as cryod builds it (/metrics, /healthz, /v1/checkpoints over a reader)
// given the raw bytes of a request head: routing, target decoding, query parameters, id checks
// and the JSON answers. Anyone who reaches the port sends these; nothing may crash, and every
// answer is one of the codes the endpoint documents.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/api/http_api.h"
#include "daemon/metrics/http_server.h"

namespace {

cryo::v1::CheckpointInfo Info(const std::string& id, const std::string& workload) {
  cryo::v1::CheckpointInfo c;
  c.set_checkpoint_id(id);
  c.set_workload(workload);
  c.set_created_at("2026-11-24T08:00:00.000Z");
  c.set_root_pid(100);
  (*c.mutable_labels())["cryo.dev/reason"] = "stop";
  c.set_manifest_json(R"({"format": "cryo.checkpoint/v1", "target": {"cmdline": ["x"]}})");
  return c;
}

const cryo::metrics::HttpRoutes& Routes() {
  static const cryo::metrics::HttpRoutes* routes = [] {
    auto* r = new cryo::metrics::HttpRoutes();
    r->Exact("/metrics", [] { return cryo::metrics::HttpResponse{200, "text/plain", "# x\n"}; });
    r->Exact("/healthz", [] { return cryo::metrics::HttpResponse{200, "text/plain", "ok\n"}; });
    cryo::api::CheckpointReader reader;
    // As the engine does: the workload's checkpoints (every one without a workload).
    reader.list =
        [](const std::string& workload) -> absl::StatusOr<std::vector<cryo::v1::CheckpointInfo>> {
      if (workload == "down") return absl::UnavailableError("cryod is starting");
      std::vector<cryo::v1::CheckpointInfo> out;
      for (const auto& c : {Info("c2", "w2"), Info("c1", "w")}) {
        if (workload.empty() || c.workload() == workload) out.push_back(c);
      }
      return out;
    };
    reader.get = [](const std::string& id) -> absl::StatusOr<cryo::v1::CheckpointInfo> {
      if (id != "c1") return absl::NotFoundError("no checkpoint '" + id + "'");
      return Info(id, "w");
    };
    cryo::api::AddCheckpointRoutes(std::move(reader), *r, {"", /*open=*/true});
    return r;
  }();
  return *routes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cryo::metrics::HttpResponse r = cryo::metrics::DispatchRaw(
      Routes(), absl::string_view(reinterpret_cast<const char*>(data), size));
  switch (r.code) {
    case 200:
    case 400:
    case 404:
    case 405:
    case 413:
    case 503:
      break;
    default:
      std::abort();  // a code the endpoint does not document (500: a handler failed)
  }
  if (r.body.empty()) std::abort();
  return 0;
}
