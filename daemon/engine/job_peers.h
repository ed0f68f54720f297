#pragma once

// The other nodes of a job checkpoint (issue 37): the driving cryod reaches each node that runs
// members of the job through this, and that node's cryod takes its members to the cut, waits for
// the word of the driver, and publishes their parts in the shared store
// (daemon/service/peer_service.h, peer_client.h). The engine knows no transport.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/engine/types.h"

namespace cryo::engine {

class JobCut;

class JobPeers {
 public:
  virtual ~JobPeers() = default;
  // Runs `members` (those on `node`) on that node's cryod as part of job checkpoint `req.id`:
  // marks party `node` at `cut` when they are all dumped, waits for every party, passes the
  // go (or the abort) on, and returns their parts, published. On any failure before the cut it
  // fails party `node` at `cut` too.
  virtual absl::StatusOr<std::vector<CheckpointResult>> Join(const std::string& node,
                                                             const JobCheckpointRequest& members,
                                                             JobCut& cut) = 0;
  // The job's members on every other node this cryod knows (cryod's `peers`), each with its
  // node; a node that cannot say fails the lookup (a job checkpoint without a node's members
  // would not be the job's).
  virtual absl::StatusOr<std::vector<JobCheckpointRequest::Member>> ListMembers(
      const std::string& ns, const std::string& job) = 0;
};

// Where a job's members run, for a job checkpoint that names none (cryod asks the Kubernetes
// API: daemon/kube/job_members.h). Each member comes with its container and node.
class JobDirectory {
 public:
  virtual ~JobDirectory() = default;
  virtual absl::StatusOr<std::vector<JobCheckpointRequest::Member>> Members(
      const std::string& ns, const std::string& job) = 0;
};

}  // namespace cryo::engine
