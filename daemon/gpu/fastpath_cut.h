#pragma once

// The fast path's cut across the processes of one job (docs/gpu.md, "The cut across ranks").
// Ranks of an NCCL job wait on each other inside collectives: a rank drained while its peer's
// kernel still waits for it would never let that kernel end. So no process is drained until
// every one has shut its gate and seen its submitted work finish: each drain is held at that
// point (FastpathDrainOptions::hold); when all are held, all go on. When some could not stop
// because their work still ran (a peer stopped first inside the same collective), all are let
// go and it is tried again with a longer bound (attempts.h), within the drain's quiesce
// timeout; then DEADLINE_EXCEEDED, every process running on with its memory in place.

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/records/gpu_process.h"

namespace cryo::gpu {

// Drains `procs` (files[i]: process i's files, as for Fastpath::Drain) at one cut. One process,
// or a library older than kVersionCut in any of them, drains each on its own as before (the
// latter logged). On success out[i] is process i's drain. On failure, out[i] is set for each
// process that did drain (the caller undoes those); the others run on, untouched.
absl::Status DrainTogether(Fastpath& fp, const std::vector<FastpathProcess>& procs,
                           const FastpathDrainOptions& opt,
                           const std::vector<std::vector<int>>& files,
                           std::vector<std::unique_ptr<FastpathDrainHandle>>* out);

}  // namespace cryo::gpu
