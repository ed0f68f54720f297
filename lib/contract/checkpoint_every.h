#pragma once

// The value of a pod's <prefix>/checkpoint-every annotation, read the same by the shim (which
// checks it when the container is created) and the tests.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cryo::contract {

// "20m", "1h30m", "90s" (Go's duration syntax, as Kubernetes writes durations): that period,
// whole seconds, at least one. "0", "off" or "never": zero (no periodic checkpoints, whatever
// the node's default). INVALID_ARGUMENT, saying what is accepted, for anything else.
absl::StatusOr<absl::Duration> ParseCheckpointEvery(absl::string_view v);

}  // namespace cryo::contract
