#pragma once

// A job's members and their nodes' cryods, as the Kubernetes API lists them (issue 37): the
// membership of each running pod decided as the shim decides it (lib/contract/job.h), so that
// the pods the API names are the ones the shim marked; and the chart's DaemonSet pod on each
// node, whose Peer service (peer_listen) that node's cryod serves.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/kube/api_client.h"
#include "lib/contract/job.h"

namespace cryo::kube {

struct JobMemberPod {
  std::string member;        // the member's name (contract::JobOf)
  std::string pod;           // the pod's name
  std::string node;          // spec.nodeName
  std::string container_id;  // the member's container, as the runtime knows it
  int size = 0;              // the job's size as the pod says (0: its owner says)
};

// The running pods of job `job` in namespace `ns`: one container each (the first that opted in:
// the pod's <prefix>/containers, else its first container). FAILED_PRECONDITION when two pods
// claim one member, or when the job has more members than run (naming how many are missing):
// a job checkpoint of part of a job is none. The size is the pods' (cryo.dev/job-size), else
// their owner's (JobSizeFromOwner).
absl::StatusOr<std::vector<JobMemberPod>> ListJobMembers(const ApiClient& api,
                                                         const std::string& prefix,
                                                         const std::string& ns,
                                                         const std::string& job);

// The size of a job whose pods do not say it, from its owner: a JobSet's replicated Jobs
// (replicas times the pods each runs at once), a PyTorchJob's replica specs, an indexed Job's
// pods at once (parallelism, at most completions). FAILED_PRECONDITION naming the owner when it
// cannot be read or says no number from 1 to contract::kMaxJobMembers.
absl::StatusOr<int> JobSizeFromOwner(const ApiClient& api, const std::string& ns,
                                     contract::JobSource source, const std::string& name);

// Node name -> "podIP:port" of cryod's pod on that node: the running pods in `cryo_ns`
// matching `selector` (the chart's "app.kubernetes.io/name=cryo").
absl::StatusOr<std::map<std::string, std::string>> ListPeerAddresses(const ApiClient& api,
                                                                     const std::string& cryo_ns,
                                                                     const std::string& selector,
                                                                     int port);

}  // namespace cryo::kube
