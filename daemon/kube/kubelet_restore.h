#pragma once

// What the chart's pre-delete hook does (cryo-uninstall): before `helm uninstall` deletes the
// DaemonSet, every node's kubelet is pointed back at the runtime it used before the chart
// converted it (deploy/host/kubelet-endpoint.sh). The hook does not touch nodes itself: it flips
// the DaemonSet's pod template to the restoring mode (all nodes at once) and waits until every
// node runs a pod whose init container has put the node back. Nodes that join or leave meanwhile
// are the DaemonSet's business, not the hook's. Progress goes to the log once the DaemonSet's
// controller has seen the change.

#include <functional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/kube/api_client.h"

namespace cryo::kube {

// The pod template annotation the configure-kubelet init container takes its mode from (the
// downward API): "convert" or "restore".
inline constexpr char kKubeletEndpointAnnotation[] = "cryo.dev/kubelet-endpoint";
inline constexpr char kConfigureKubeletContainer[] = "configure-kubelet";

struct KubeletRestoreOptions {
  std::string namespace_name;
  std::string daemonset;
  absl::Duration timeout = absl::Minutes(4);
  absl::Duration poll = absl::Seconds(2);
  std::ostream* log = nullptr;  // progress, one line per change
  // Waits between polls (tests pass a no-op).
  std::function<void(absl::Duration)> sleep;
};

// OK when the DaemonSet is gone (nothing to put back) or, on every node it schedules, a pod of
// the restoring template has run configure-kubelet to its end (cryod's readiness after that does
// not matter). Nodes that left their kubelet as it was (a read-only config, say) are named in
// the log, not failed: their kubelet keeps using the shim, which keeps running.
// DEADLINE_EXCEEDED naming each node still waiting and the init container it waits on.
absl::Status RestoreKubeletEndpoints(const ApiClient& api, const KubeletRestoreOptions& o);

}  // namespace cryo::kube
