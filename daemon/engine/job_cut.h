#pragma once

// The cut of a job checkpoint (issue 37): every member's part is dumped (its processes frozen,
// its connections under CRIU's network lock) before any member runs on or is published. Then no
// message can have been received in the checkpoint that was sent after it: a member that runs
// on sends only to members already frozen, whose locks drop it, and its bytes stay in its own
// send queue, which its part holds. A member that fails before the cut fails the whole job
// checkpoint: the others' parts are rolled back and every member runs on.

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/gpu/fastpath_cut.h"

namespace cryo::engine {

// The GPU fast path's cut across the job's members (before any is dumped): each member's
// processes are held at the cut together with every other member's, on every node, aligned on
// the job's NCCL collectives (gpu::CutParties, fastpath_cut.h). Its parties are this node's
// members that drain GPU memory and, at the driving cryod, each other node; a node driven by
// another passes its members' combined word of each round to the driver (`Upstream`) and takes
// the job's back. Members without fast-path processes leave (Leave) and are not waited for.
class JobGpuCut {
 public:
  // Carries this node's word of `round` to the driving node, returns the job's.
  using Upstream = std::function<absl::StatusOr<gpu::CutWord>(int round, const gpu::CutWord& word)>;
  // `parties` are counted by name as they meet or leave; `up` and `left` (tells the driver that
  // no member here takes part) are set on a node driven by another.
  JobGpuCut(std::vector<std::string> parties, Upstream up = nullptr,
            std::function<void()> left = nullptr);

  // `party`'s word of `round`; the job's, once every party still in the cut gave its own.
  absl::StatusOr<gpu::CutWord> Meet(const std::string& party, int round, const gpu::CutWord& w,
                                    absl::Time deadline,
                                    const std::function<bool()>& cancelled = nullptr);
  void Leave(const std::string& party);
  void Fail(const std::string& party, const absl::Status& why);

  // The names of the parties: a member of this node's, another node.
  static std::string MemberParty(const std::string& member) { return "member " + member; }
  static std::string NodeParty(const std::string& node) { return "node " + node; }

  // `party`'s view, for DrainTogether.
  std::unique_ptr<gpu::CutParties> For(const std::string& party, absl::Time deadline,
                                       std::function<bool()> cancelled);

 private:
  struct Round {
    std::map<std::string, gpu::CutWord> words;
    bool deciding = false;
    bool decided = false;
    absl::Status status;
    gpu::CutWord job;
  };
  // Decides the newest round if every party still in gave its word (called with mu_ held; may
  // release it to ask the driver).
  void MaybeDecide() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Upstream up_;
  const std::function<void()> left_;
  mutable absl::Mutex mu_;
  std::set<std::string> in_ ABSL_GUARDED_BY(mu_);
  std::map<int, Round> rounds_ ABSL_GUARDED_BY(mu_);
  std::string failed_ ABSL_GUARDED_BY(mu_);
  bool told_left_ ABSL_GUARDED_BY(mu_) = false;
};

// The cut's parties are this node's members and, for a job that spans nodes, each other node
// taking part (its cryod reports its members at the cut; daemon/service/peer_service.h): the
// driving cryod counts every node, a node driven by another counts the driver's word as one.
class JobCut {
 public:
  // `gpu` is the GPU cut's parties (JobGpuCut); a failure here fails it too.
  explicit JobCut(int parties, std::shared_ptr<JobGpuCut> gpu = nullptr)
      : members_(parties), gpu_(std::move(gpu)) {}

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
  JobGpuCut* gpu() const { return gpu_.get(); }

  // Between the first and the last member's arrival (0 before all arrived): how long the
  // first member's job was held for the last one's dump.
  absl::Duration Skew() const;

 private:
  const int members_;
  const std::shared_ptr<JobGpuCut> gpu_;
  mutable absl::Mutex mu_;
  std::vector<absl::Time> arrivals_ ABSL_GUARDED_BY(mu_);
  std::string failed_ ABSL_GUARDED_BY(mu_);  // the first that failed, and why
};

}  // namespace cryo::engine
