#pragma once

// What the engine asks of the GPU fast path (docs/gpu.md, "Fast path"): find the processes of a
// job that run the fast-path library, have each drain its device memory (into files of the
// store, or into its own memory) and refill it. The real one talks to the library in the
// processes (fastpath_client.h); tests use a fake.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/records/gpu_process.h"
#include "lib/base/fd.h"
#include "lib/base/file_digest.h"
#include "lib/base/proc.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::gpu {

// The unit by which a drain's bytes are striped over its files (gpu_fastpath.h, "Files").
inline constexpr uint64_t kFastpathStripeBytes = 64ull << 20;

struct FastpathDrainOptions {
  int threads = 8;
  absl::Duration quiesce_timeout = absl::Seconds(10);
  uint64_t stripe_bytes = kFastpathStripeBytes;
  absl::Duration reply_timeout = absl::Minutes(10);
  // Asked between waits (at least every 100 ms): true ends the wait with CANCELLED (the
  // caller's cancel, its deadline, cryod's SIGTERM).
  std::function<bool()> stop;
  // > 0: the drain stops at the cut (the job's GPU work stopped, nothing moved) and waits
  // there, at most this long, for Go() (libraries of version kVersionCut and later).
  absl::Duration hold = absl::ZeroDuration();
  // With hold: stop at "gated" (the gates shut, nothing synchronized) for Align().
  bool align = false;
};

// A drain in progress: the device memory is free (drained), the files may still be written.
class FastpathDrainHandle {
 public:
  virtual ~FastpathDrainHandle() = default;
  // What the library said when the memory was out.
  virtual const contract::gpu_fastpath::DrainedReply& drained() const = 0;
  uint64_t bytes() const { return drained().bytes; }
  uint64_t allocations() const { return drained().allocations; }
  // A held drain (FastpathDrainOptions::hold): lets it go on from the cut and waits for
  // "drained". Nothing to do for one that was not held. Destroying a held drain instead lets
  // the job go on untouched.
  virtual absl::Status Go() { return absl::OkStatus(); }
  // An aligned held drain: its gates shut, the NCCL kernels it launched so far.
  virtual const contract::gpu_fastpath::GatedReply& gated() const {
    static const contract::gpu_fastpath::GatedReply kNone;
    return kNone;
  }
  // Lets it run on until it has launched `to` NCCL kernels, then holds it at the cut
  // (synchronized; quiesced() then says what it shares). Within `bound`.
  virtual absl::Status Align(uint64_t to, absl::Duration bound) {
    return absl::FailedPreconditionError("this drain was not held for alignment");
  }
  // A held drain's first reply: what the process shares (empty for one not held).
  virtual const contract::gpu_fastpath::QuiescedReply& quiesced() const {
    static const contract::gpu_fastpath::QuiescedReply kNone;
    return kNone;
  }
  // With files: waits until they are written and out of the job's memory; their digests in
  // order. Without files: nothing to wait for. `stoppable`: the drain's stop predicate ends the
  // wait (CANCELLED, asked again later); an undo waits regardless of it, bounded by the reply
  // timeout and by `hard_stop` (may be empty: cryod stopping for good). Once answered, the same
  // answer comes back at once.
  virtual absl::StatusOr<std::vector<FileDigest>> WaitSaved(
      bool stoppable = true, const std::function<bool()>& hard_stop = nullptr) = 0;
};

// A held refill (version kVersionCut): the process's own memory is back and exported again; what
// it imported waits (refilled().importing) for Go with its exporters' new descriptors.
class FastpathRefillHandle {
 public:
  virtual ~FastpathRefillHandle() = default;
  virtual const contract::gpu_fastpath::RefillReply& refilled() const = 0;
  // `fds[i]` is import `ids[i]`'s new descriptor (this process's copies; the caller closes them).
  virtual absl::StatusOr<contract::gpu_fastpath::ImportedReply> Go(const std::vector<uint64_t>& ids,
                                                                   const std::vector<int>& fds) = 0;
};

// What "track" gives: a userfaultfd of the process, the features its handshake got, and where
// the library counts the process's forks (0: an older library that does not).
struct WriteTracker {
  UniqueFd uffd;
  uint64_t features = 0;
  uint64_t fork_counter = 0;
};

class Fastpath {
 public:
  virtual ~Fastpath() = default;
  // The processes among `pids` whose library is listening (CUDA started). FAILED_PRECONDITION
  // when one of them is not running normally (its memory is out since an earlier checkpoint).
  virtual absl::StatusOr<std::vector<FastpathProcess>> Find(const std::vector<pid_t>& pids) = 0;
  // Drains one process; `files` are empty files opened for writing (none: keep the data in the
  // process), or for a process with `memory` set, the one memfd of cryod's the data goes into. On
  // failure the library has put the memory back if it could.
  virtual absl::StatusOr<std::unique_ptr<FastpathDrainHandle>> Drain(
      const FastpathProcess& p, const FastpathDrainOptions& opt, const std::vector<int>& files) = 0;
  // Brings a process's memory back: from `files` (read, in order) checked against `expected`
  // (empty: unchecked), or from its own memory when there are none. DATA_LOSS on a mismatch (the
  // job stays held). `stop` (may be empty; asked at least every 100 ms) ends the wait with
  // CANCELLED: the library, which has the request and its descriptors, finishes by itself.
  virtual absl::StatusOr<contract::gpu_fastpath::RefillReply> Refill(
      const FastpathProcess& p, int threads, const std::vector<int>& files,
      const std::vector<FileDigest>& expected, const std::function<bool()>& stop) = 0;
  // A refill held for its imports (see FastpathRefillHandle); `stop` ends its waits too.
  virtual absl::StatusOr<std::unique_ptr<FastpathRefillHandle>> RefillHeld(
      const FastpathProcess& p, int threads, const std::vector<int>& files,
      const std::vector<FileDigest>& expected, const std::function<bool()>& stop) {
    return absl::UnimplementedError("this fast path holds no refill");
  }
  // Its state (running, drained, saved), what it owns, its version.
  virtual absl::StatusOr<contract::gpu_fastpath::StatusReply> Status(const FastpathProcess& p) = 0;
  // A userfaultfd of the process, to track its writes through ("track", criu/pre_copy.h).
  virtual absl::StatusOr<WriteTracker> TrackWrites(const FastpathProcess& p) {
    return absl::UnimplementedError("this fast path tracks no writes");
  }
};

// The fast path through the library's channel in each process.
std::unique_ptr<Fastpath> NewFastpath(const proc::ProcReader* proc);

}  // namespace cryo::gpu
