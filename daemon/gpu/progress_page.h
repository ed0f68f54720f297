#pragma once

// cryod's side of a progress page (lib/contract/gpu_fastpath.h, "Following"): a shared page of
// two words through which one side tells the other how much of a copy's stream is in memory
// ("ready", only ever up) and, once, what it found ("verdict"). A restore's read ahead writes
// it for the library that refills behind it; a stop checkpoint's drain is written by the library
// for cryod's write behind it. What the job's library writes there is the job's word about its
// own data: a lie makes cryod write the job whatever its slot holds, never another job's data.

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/base/fd.h"
#include "lib/contract/gpu_fastpath.h"

namespace cryo::gpu {

class ProgressPage {
 public:
  static absl::StatusOr<std::unique_ptr<ProgressPage>> Make();
  ~ProgressPage();
  ProgressPage(const ProgressPage&) = delete;
  ProgressPage& operator=(const ProgressPage&) = delete;

  int fd() const { return fd_.get(); }
  uint64_t ready() const { return words_.ready(); }
  uint64_t verdict() const { return words_.verdict(); }
  // Raises "ready" to `bytes` (never lowers it: writers may race).
  void Raise(uint64_t bytes) { words_.Raise(bytes); }
  void SetVerdict(uint64_t v) { words_.SetVerdict(v); }
  // A bad verdict unless one was given (the writer on the other side died before its own).
  void FailIfPending() const {
    contract::gpu_fastpath::ProgressWords w = words_;
    w.SetVerdictIfPending(contract::gpu_fastpath::kVerdictBad);
  }
  // Until "ready" reaches `end`: FAILED_PRECONDITION on a bad verdict (or ready stuck under
  // `end` after a good one), CANCELLED when `stop` says so.
  absl::Status WaitReady(uint64_t end, const std::function<bool()>& stop) const;
  // Until the verdict: OK when good, FAILED_PRECONDITION when bad, CANCELLED when `stop` says.
  absl::Status WaitVerdict(const std::function<bool()>& stop) const;

 private:
  ProgressPage() = default;
  absl::Status Waited(uint64_t end, bool until_verdict, const std::function<bool()>& stop) const;
  UniqueFd fd_;
  contract::gpu_fastpath::ProgressWords words_;
};

}  // namespace cryo::gpu
