#pragma once

// The cut of a job checkpoint (issue 37): every member's part is dumped (its processes frozen,
// its connections under CRIU's network lock) before any member runs on or is published. Then no
// message can have been received in the checkpoint that was sent after it: a member that runs
// on sends only to members already frozen, whose locks drop it, and its bytes stay in its own
// send queue, which its part holds. A member that fails before the cut fails the whole job
// checkpoint: the others' parts are rolled back and every member runs on.

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cryo::engine {

// The cut's parties are this node's members and, for a job that spans nodes, each other node
// taking part (its cryod reports its members at the cut; daemon/service/peer_service.h): the
// driving cryod counts every node, a node driven by another counts the driver's word as one.
class JobCut {
 public:
  explicit JobCut(int parties) : members_(parties) {}

  // `member`'s dump is done: waits until every member's is (OK), one failed or gave up
  // (ABORTED, naming it), `deadline` passed or `cancelled` says so (DEADLINE_EXCEEDED or
  // CANCELLED, and the others' waits end ABORTED too).
  absl::Status Arrive(const std::string& member, absl::Time deadline,
                      const std::function<bool()>& cancelled = nullptr);
  // `member` ended before the cut (its checkpoint failed): the others' waits end ABORTED.
  void Fail(const std::string& member, const absl::Status& why);
  // A party that does not wait here (another node, the driver's word) is at the cut.
  void Mark(const std::string& party);
  // Until `count` parties are at the cut (OK), or one failed (ABORTED) or `deadline` passed.
  absl::Status WaitFor(int count, absl::Time deadline);

  int parties() const { return members_; }

  // Between the first and the last member's arrival (0 before all arrived): how long the
  // first member's job was held for the last one's dump.
  absl::Duration Skew() const;

 private:
  const int members_;
  mutable absl::Mutex mu_;
  std::vector<absl::Time> arrivals_ ABSL_GUARDED_BY(mu_);
  std::string failed_ ABSL_GUARDED_BY(mu_);  // the first that failed, and why
};

}  // namespace cryo::engine
