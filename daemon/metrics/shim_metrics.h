// /metrics/shim: the CRI shim's metrics, which the shim (on the host, not in a pod) writes to a
// file that cryod's pod shares with the host (the shim's --metrics-file), served on cryod's HTTP
// port so that one ServiceMonitor scrapes both.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "daemon/metrics/http_server.h"

namespace cryo::metrics {

// A file older than this is a shim that stopped writing: 503, so that the scrape fails and
// Prometheus' `up` says so, rather than serving numbers that no longer move.
inline constexpr absl::Duration kShimMetricsMaxAge = absl::Seconds(60);

// The file's text (200), or 503 naming why there is none: missing (no shim, or one started
// without --metrics-file), stale, unreadable or too large.
HttpResponse ShimMetricsResponse(const std::string& path, absl::Time now);

}  // namespace cryo::metrics
