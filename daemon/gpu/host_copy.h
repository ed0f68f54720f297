#pragma once

// cryod's host memory for a leave-running drain (lib/contract/gpu_fastpath.h, "Memory"): the
// library copies a process's GPU data into a memfd of cryod's, refills the GPU from it, and
// cryod writes it into the checkpoint's files while the job runs on. The job then stalls only
// for the copies, not for the store.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/fd.h"
#include "lib/base/file_digest.h"

namespace cryo::gpu {

// What the node can give cryod now: MemAvailable, or less when cryod's cgroup (or one above it)
// has a memory limit closer to its usage; 0 when unknown.
uint64_t AvailableHostMemory();
// The same below the cgroups `proc_cgroup` (as /proc/self/cgroup) names under `sys_fs_cgroup`.
uint64_t AvailableUnderCgroups(uint64_t avail, const std::string& proc_cgroup,
                               const std::string& sys_fs_cgroup);

// A tmpfs with huge pages for NewHostCopy, mounted on `where` (made if need be) and detached at
// once: the descriptor returned is all that holds it.
absl::StatusOr<UniqueFd> MountHostCopyFs(const std::string& where);

// An unnamed file of `bytes` in `fs` (MountHostCopyFs's), or a memfd when `fs` is -1,
// its pages allocated now by `threads` threads of cryod (so they count against cryod's memory,
// not the job's, and the copy into it does not wait for fresh pages). RESOURCE_EXHAUSTED when
// the node cannot give them.
absl::StatusOr<UniqueFd> NewHostCopy(uint64_t bytes, int threads, int fs = -1);

// Writes the first `bytes` of `memfd` into `files` in the fast path's layout (unit c of
// `stripe` bytes goes to file c % W at offset (c / W) * stripe), one writer per file, each
// hashing what it writes with the store's checksum; the digests in file order. `stop` (may be
// empty) is asked between units: true ends it with CANCELLED.
absl::StatusOr<std::vector<FileDigest>> WriteHostCopy(int memfd, uint64_t bytes, uint64_t stripe,
                                                      const std::vector<int>& files,
                                                      const std::function<bool()>& stop);

}  // namespace cryo::gpu
