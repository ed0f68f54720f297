#include "daemon/engine/job_cut.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cryo::engine {

absl::Status JobCut::Arrive(const std::string& member, absl::Time deadline,
                            const std::function<bool()>& cancelled) {
  absl::MutexLock l(&mu_);
  arrivals_.push_back(absl::Now());
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failed_.empty() || static_cast<int>(arrivals_.size()) >= members_;
  };
  for (;;) {
    // Woken by every arrival or failure; cancellation is polled.
    mu_.AwaitWithDeadline(absl::Condition(&settled),
                          std::min(deadline, absl::Now() + absl::Milliseconds(100)));
    if (!failed_.empty()) {
      return absl::AbortedError(
          absl::StrCat("the job checkpoint's cut was not reached: ", failed_));
    }
    if (static_cast<int>(arrivals_.size()) >= members_) return absl::OkStatus();
    const int waiting_for = members_ - static_cast<int>(arrivals_.size());
    if (absl::Now() >= deadline) {
      failed_ = absl::StrCat("member ", member, " waited past its deadline for ", waiting_for,
                             " other member(s) to be dumped");
      return absl::DeadlineExceededError(failed_);
    }
    if (cancelled && cancelled()) {
      failed_ = absl::StrCat("member ", member, "'s checkpoint was cancelled at the cut");
      return absl::CancelledError(failed_);
    }
  }
}

void JobCut::Mark(const std::string& party) {
  absl::MutexLock l(&mu_);
  arrivals_.push_back(absl::Now());
}

absl::Status JobCut::WaitFor(int count, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failed_.empty() || static_cast<int>(arrivals_.size()) >= count;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (!failed_.empty()) {
    return absl::AbortedError(absl::StrCat("the job checkpoint's cut was not reached: ", failed_));
  }
  if (static_cast<int>(arrivals_.size()) >= count) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(count - static_cast<int>(arrivals_.size()),
                                                  " member(s) were not dumped in time"));
}

void JobCut::Fail(const std::string& member, const absl::Status& why) {
  if (gpu_)
    // (Another node fails here under its party's name, JobGpuCut::NodeParty.)
    gpu_->Fail(absl::StartsWith(member, "node ") ? member : JobGpuCut::MemberParty(member), why);
  absl::MutexLock l(&mu_);
  if (failed_.empty()) failed_ = absl::StrCat("member ", member, " failed: ", why.message());
}

absl::Duration JobCut::Skew() const {
  absl::MutexLock l(&mu_);
  if (static_cast<int>(arrivals_.size()) < members_ || arrivals_.empty()) {
    return absl::ZeroDuration();
  }
  auto [lo, hi] = std::minmax_element(arrivals_.begin(), arrivals_.end());
  return *hi - *lo;
}

JobGpuCut::JobGpuCut(std::vector<std::string> parties, Upstream up, std::function<void()> left)
    : up_(std::move(up)), left_(std::move(left)), in_(parties.begin(), parties.end()) {}

void JobGpuCut::MaybeDecide() {
  if (rounds_.empty()) return;
  auto& [number, r] = *rounds_.rbegin();
  if (r.deciding || r.decided) return;
  for (const auto& p : in_) {
    if (!r.words.count(p)) return;
  }
  gpu::CutWord job;
  for (const auto& [p, w] : r.words) job = gpu::Combine(job, w);
  if (!up_) {
    r.job = job;
    r.decided = true;
    return;
  }
  // The driver decides for the job: asked without the lock (a round trip to another node).
  r.deciding = true;
  const int round = number;
  mu_.Unlock();
  absl::StatusOr<gpu::CutWord> got = up_(round, job);
  mu_.Lock();
  Round& again = rounds_[round];
  again.deciding = false;
  again.decided = true;
  if (got.ok()) {
    again.job = *got;
  } else {
    again.status = got.status();
    if (failed_.empty()) failed_ = absl::StrCat("the driving node: ", got.status().message());
  }
}

absl::StatusOr<gpu::CutWord> JobGpuCut::Meet(const std::string& party, int round,
                                             const gpu::CutWord& w, absl::Time deadline,
                                             const std::function<bool()>& cancelled) {
  absl::MutexLock l(&mu_);
  rounds_[round].words[party] = w;
  MaybeDecide();
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failed_.empty() || rounds_[round].decided;
  };
  for (;;) {
    // Woken by every word, decision and failure; cancellation is polled.
    mu_.AwaitWithDeadline(absl::Condition(&settled),
                          std::min(deadline, absl::Now() + absl::Milliseconds(100)));
    const Round& r = rounds_[round];
    if (r.decided) {
      if (!r.status.ok()) return r.status;
      return r.job;
    }
    if (!failed_.empty()) {
      return absl::AbortedError(absl::StrCat("the job's GPU cut was not reached: ", failed_));
    }
    if (absl::Now() >= deadline) {
      failed_ = absl::StrCat(party, " waited past its deadline for the other members' GPU work to ",
                             "stop at one cut");
      return absl::DeadlineExceededError(failed_);
    }
    if (cancelled && cancelled()) {
      failed_ = absl::StrCat(party, "'s checkpoint was cancelled at the GPU cut");
      return absl::CancelledError(failed_);
    }
  }
}

void JobGpuCut::Leave(const std::string& party) {
  bool tell = false;
  {
    absl::MutexLock l(&mu_);
    if (in_.erase(party) == 0) return;
    MaybeDecide();
    tell = in_.empty() && left_ && !told_left_;
    if (tell) told_left_ = true;
  }
  if (tell) left_();  // (a message to the driving node: not under the lock)
}

void JobGpuCut::Fail(const std::string& party, const absl::Status& why) {
  absl::MutexLock l(&mu_);
  if (failed_.empty()) failed_ = absl::StrCat(party, " failed: ", why.message());
}

namespace {

class PartyView : public gpu::CutParties {
 public:
  PartyView(JobGpuCut& cut, std::string party, absl::Time deadline, std::function<bool()> cancelled)
      : cut_(cut),
        party_(std::move(party)),
        deadline_(deadline),
        cancelled_(std::move(cancelled)) {}
  absl::StatusOr<gpu::CutWord> Meet(int round, const gpu::CutWord& mine) override {
    return cut_.Meet(party_, round, mine, deadline_, cancelled_);
  }
  void Leave() override { cut_.Leave(party_); }
  void Fail(const absl::Status& why) override { cut_.Fail(party_, why); }

 private:
  JobGpuCut& cut_;
  const std::string party_;
  const absl::Time deadline_;
  const std::function<bool()> cancelled_;
};

}  // namespace

std::unique_ptr<gpu::CutParties> JobGpuCut::For(const std::string& party, absl::Time deadline,
                                                std::function<bool()> cancelled) {
  return std::make_unique<PartyView>(*this, party, deadline, std::move(cancelled));
}

}  // namespace cryo::engine
