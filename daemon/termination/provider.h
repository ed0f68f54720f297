#pragma once

// What a cloud's termination notice endpoint told us, and the interface each cloud implements.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cryo::termination {

struct Notice {
  std::string provider;  // "gce", "aws", "azure"
  // "preempt", "maintenance-terminate" (GCE), "spot-interruption" (AWS), "terminate",
  // "reboot", "redeploy" (Azure).
  std::string kind;
  // Stays the same while the same notice stands on later polls; a different id is a new notice
  // (a new Azure EventId, a new AWS action or time).
  std::string id;
  // When the node goes, as the cloud announced it; InfiniteFuture() when it gives no time.
  absl::Time deadline = absl::InfiniteFuture();
  std::string detail;  // one line for logs and events
};

class NoticeProvider {
 public:
  virtual ~NoticeProvider() = default;
  // Short name for logs, e.g. "gce/preempted".
  virtual std::string Name() const = 0;
  // Asks the endpoint once. An empty vector: nothing announced. An error: could not tell
  // (unreachable, refused, an answer we do not understand); it must never be read as "none".
  virtual absl::StatusOr<std::vector<Notice>> Poll() = 0;
};

}  // namespace cryo::termination
