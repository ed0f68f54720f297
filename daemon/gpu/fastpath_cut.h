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
#include "lib/base/file_digest.h"

namespace cryo::gpu {

// Memory the processes share (NCCL's P2P over cuMem, docs/proposals/nccl-shared-memory.md) is
// found at the cut: each held process lists its exports and imports as descriptors, and two name
// the same export when they are the same open file (kcmp). Every import must come from another
// process of the job; one that does not (or memory shared another way) is refused before
// anything moves, and every process runs on. The matches are recorded in procs[i].imports.
//
// Drains `procs` (files[i]: process i's files, as for Fastpath::Drain) at one cut. A library
// older than kVersionCut in any of them drains each on its own as before (logged when there are
// several). On success out[i] is process i's drain. On failure, out[i] is set for each process
// that did drain (the caller undoes those); the others run on, untouched.
absl::Status DrainTogether(Fastpath& fp, std::vector<FastpathProcess>& procs,
                           const FastpathDrainOptions& opt,
                           const std::vector<std::vector<int>>& files,
                           std::vector<std::unique_ptr<FastpathDrainHandle>>* out);

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
