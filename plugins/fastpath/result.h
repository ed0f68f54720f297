#pragma once

// The in-job library's one result type. Every step of the mover, the channel's handlers and the
// legacy IPC fetch answer with it: done, or what failed, whether the job's memory is back on the
// GPU (rolled_back) and what kind of failure it was. It maps one to one onto the channel's error
// reply, so what a step says reaches cryod unchanged. Not absl::Status: the library is loaded
// into jobs and links nothing it does not carry.

#include <cstdio>
#include <string>
#include <utility>

#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::fastpath {

using ErrorCode = contract::gpu_fastpath::ErrorCode;

struct [[nodiscard]] Result {
  Result() = default;
  Result(std::string e, bool rb, ErrorCode c = ErrorCode::kNone)
      : error(std::move(e)), rolled_back(rb), code(c) {}
  // A failure that took nothing back (the callers that did decide rolled_back).
  static Result Failed(std::string e, ErrorCode c = ErrorCode::kNone) {
    return {std::move(e), false, c};
  }

  bool ok() const { return error.empty(); }
  // This failure, with whether the job's memory is back on the GPU and it runs on.
  Result RolledBack(bool back = true) && {
    rolled_back = back;
    return std::move(*this);
  }
  // The channel's error reply for it.
  contract::gpu_fastpath::Error Reply() const { return {error, rolled_back, code}; }

  std::string error;         // empty: done
  bool rolled_back = false;  // on error: the job's memory is back on the GPU and it runs on
  // What kind of failure, for cryod's status code: kDeadline (the job's GPU work did not stop in
  // time), kDataLoss (a file is not what the drain wrote), kBusy (ask again), or kNone.
  ErrorCode code = ErrorCode::kNone;
};

// The library's one line on the job's stderr: what failed with nobody to answer to.
inline void Say(const std::string& what) {
  ::fprintf(stderr, "cryo fast path: %s\n", what.c_str());
}

}  // namespace cryo::fastpath
