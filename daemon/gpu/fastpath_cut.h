#pragma once

// The fast path's cut across the processes of one job (docs/gpu.md, "The cut across ranks").
// Ranks of an NCCL job wait on each other inside collectives: a rank drained while its peer's
// kernel still waits for it would never let that kernel end. So no process is drained until
// every one has shut its gate and seen its submitted work finish: each drain is held at that
// point (FastpathDrainOptions::hold); when all are held, all go on. When some could not stop
// because their work still ran (a peer stopped first inside the same collective), all are let
// go and it is tried again with a longer bound (attempts.h), within the drain's quiesce
// timeout; then DEADLINE_EXCEEDED, every process running on with its memory in place.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/records/gpu_process.h"
#include "lib/base/file_digest.h"

namespace cryo::gpu {

// One party's word in a round of the cut shared with other parties (below): the most NCCL
// kernels its processes launched (a "gated" round) and how its attempt went.
struct CutWord {
  enum Outcome { kOk = 0, kBusy = 1, kFailed = 2 };
  uint64_t collectives = 0;
  Outcome outcome = kOk;
  std::string why;  // for kBusy and kFailed
};
// The job's word from two parties' words: the most collectives, the worst outcome, the first
// reason of the worst.
CutWord Combine(const CutWord& a, const CutWord& b);

// The other processes of a job that span checkpoint transactions: the members of a job
// checkpoint (issue 37), on this node or on other nodes, each drained by its own DrainTogether.
// An NCCL job's ranks on two nodes wait on each other inside collectives just as on one node,
// so the cut is one across all of them: every attempt meets the other parties twice, once
// "gated" (round 2k: the target is the job's most collectives) and once "held" (round 2k+1:
// every party held at the cut, or why not); all go on, retry or give up together.
class CutParties {
 public:
  virtual ~CutParties() = default;
  // This party's word of `round`; returns every party's, combined (Combine). An error when a
  // party failed or the wait ended (deadline, cancel): the caller gives up.
  virtual absl::StatusOr<CutWord> Meet(int round, const CutWord& mine) = 0;
  // This party takes no part in the rounds (it drains each process on its own, or none).
  virtual void Leave() = 0;
  // This party gave up: every other party's wait ends, naming why.
  virtual void Fail(const absl::Status& why) = 0;
};

// Memory the processes share (NCCL's P2P over cuMem, docs/proposals/nccl-shared-memory.md) is
// found at the cut: each held process lists its exports and imports as descriptors, and two name
// the same export when they are the same open file (kcmp). Every import must come from another
// process of the job; one that does not (or memory shared another way) is refused before
// anything moves, and every process runs on. The matches are recorded in procs[i].imports.
//
// Drains `procs` (files[i]: process i's files, as for Fastpath::Drain) at one cut. A library
// older than kVersionCut in any of them drains each on its own as before (logged when there are
// several). On success out[i] is process i's drain. On failure, out[i] is set for each process
// that did drain (the caller undoes those); the others run on, untouched. With `others`, the cut
// is also the other parties' (CutParties): this call's processes go on only when theirs do.
absl::Status DrainTogether(Fastpath& fp, std::vector<FastpathProcess>& procs,
                           const FastpathDrainOptions& opt,
                           const std::vector<std::vector<int>>& files,
                           std::vector<std::unique_ptr<FastpathDrainHandle>>* out,
                           CutParties* others = nullptr);

// Refills `procs` (files[i] and expected[i] as for Fastpath::Refill; missing entries: none).
// When some imported memory from others (procs[i].imports), every one is refilled held: each
// brings its own memory back and exports it again, then each importer is given its exporters'
// new descriptors (taken from the exporters with pidfd_getfd) and only then runs. Exporters among
// `running` (already refilled) are asked for their descriptors. `stop` (may be empty) ends every
// wait (Fastpath::Refill).
absl::Status RefillTogether(Fastpath& fp, const std::vector<FastpathProcess>& procs, int threads,
                            const std::vector<std::vector<int>>& files,
                            const std::vector<std::vector<FileDigest>>& expected,
                            const std::vector<FastpathProcess>& running = {},
                            const std::function<bool()>& stop = nullptr);

}  // namespace cryo::gpu
