#pragma once

// What /healthz answers (the chart's readiness probe): whether cryod could take a checkpoint
// now. Not liveness: a full store makes the pod unready, never restarts cryod.

#include <cstdint>

#include "absl/status/status.h"
#include "daemon/criu/criu.h"
#include "daemon/metrics/http_server.h"
#include "daemon/store/store.h"

namespace cryo::cryod {

// OK when a checkpoint could start now: the store's directory is there (a deleted or replaced
// one is noticed at once), its layout is sound and writable, it has at least `min_free_bytes`
// free, and CRIU is usable. Otherwise the first reason found.
absl::Status CheckHealth(store::CheckpointStore& store, const criu::Criu& criu,
                         uint64_t min_free_bytes);

// 200 "ok", or 503 with the reason.
metrics::HttpResponse HealthResponse(const absl::Status& health);

}  // namespace cryo::cryod
