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
// The node's memory (MemTotal); 0 when unknown.
uint64_t TotalHostMemory();
// The same below the cgroups `proc_cgroup` (as /proc/self/cgroup) names under `sys_fs_cgroup`.
uint64_t AvailableUnderCgroups(uint64_t avail, const std::string& proc_cgroup,
                               const std::string& sys_fs_cgroup);

// A private tmpfs mounted on `where` (made if need be) and detached at once: the O_PATH
// descriptor returned is all that holds it, so it goes with cryod however cryod ends. `source`
// names it in /proc/self/mountinfo. Its huge pages (tmpfs "huge="): always, or only where a
// file's size already covers one (a file sized before it is written gets them; one that grows
// as it is appended to does not).
enum class TmpfsHuge { kAlways, kWithinSize };
absl::StatusOr<UniqueFd> MountPrivateTmpfs(const std::string& where, const std::string& source,
                                           TmpfsHuge huge);
// The one with huge pages for NewHostCopy.
inline absl::StatusOr<UniqueFd> MountHostCopyFs(const std::string& where) {
  return MountPrivateTmpfs(where, "cryo-gpu-host-copy", TmpfsHuge::kAlways);
}

// Whether cryod can take `bytes` more of the node's memory (AvailableHostMemory) and leave a
// margin for the rest of the node: an eighth more and 1 GiB.
bool HostMemoryHolds(uint64_t bytes);

// An unnamed file of `bytes` in `fs` (MountHostCopyFs's), or a memfd when `fs` is -1,
// its pages allocated now by `threads` threads of cryod (so they count against cryod's memory,
// not the job's, and the copy into it does not wait for fresh pages). RESOURCE_EXHAUSTED when
// the node cannot give them.
absl::StatusOr<UniqueFd> NewHostCopy(uint64_t bytes, int threads, int fs = -1);

// `each(piece, length)` over the first `bytes` of `fd`, mapped shared for writing, in pieces of
// 256 MiB that `threads` threads take in turn; the first error stops the rest and is returned.
absl::Status EachPieceMapped(int fd, uint64_t bytes, int threads,
                             const std::function<absl::Status(char*, uint64_t)>& each);

// One file's chunk digests (the store's checksum chunks, hex) and its size.
struct ChunkDigests {
  uint64_t size = 0;
  std::vector<std::string> chunks;
};

// What WriteHostCopy put into one file.
struct WrittenFile {
  FileDigest digest;  // of all its bytes, the chunks it did not write included
  ChunkDigests chunks;
  std::vector<uint32_t> skipped;  // chunks not written (a hole): `previous` holds them
};

// Whether a write to `fd` copies the bytes through the CPU: buffered, or a tmpfs (which takes
// O_DIRECT and still copies). If not, the device reads them itself and wants large writes.
// WriteHostCopy writes the former a cache-sized piece at a time, each right after hashing it.
bool WriteCopiesThroughTheCpu(int fd);

// Writes the first `bytes` of `memfd` into `files` in the fast path's layout (unit c of
// `stripe` bytes goes to file c % W at offset (c / W) * stripe), one writer per file, each
// hashing what it writes with the store's checksum. A chunk whose digest and length are those
// of the same chunk of `previous[k]` (the same file of an earlier checkpoint; may be shorter
// than `files` or empty) is not written: the file keeps a hole there, and the caller records
// where the bytes are. `stop` (may be empty) is asked between chunks: true ends it with
// CANCELLED. `ready` (may be empty; a drain still copying into `memfd`) is asked before each
// chunk whether the stream's first `end` bytes are there, and waits until they are; its error
// ends the write.
absl::StatusOr<std::vector<WrittenFile>> WriteHostCopy(
    int memfd, uint64_t bytes, uint64_t stripe, const std::vector<int>& files,
    const std::vector<ChunkDigests>& previous, const std::function<bool()>& stop,
    const std::function<absl::Status(uint64_t end)>& ready = {});

// How much of the stream, from its start, is in memory when each of the `w` files of the fast
// path's layout (unit c of `stripe` bytes in file c % w at (c / w) * stripe) has its first
// `next(k)` bytes read: up to the first byte some file still lacks, at most `bytes`.
uint64_t StreamBytesRead(const std::function<uint64_t(size_t k)>& next, size_t w, uint64_t stripe,
                         uint64_t bytes);

// One file of GPU data to read back: chunk j from `fds[j]` (the file itself, or the same file
// of the checkpoint that holds that chunk, at the same offset), checked against `chunks[j]`;
// then the whole against `expected`. With no chunk digests (the library wrote the file), every
// chunk comes from `fds[0]` and only the whole is checked.
struct ChunkSources {
  std::vector<int> fds;
  std::vector<std::string> chunks;
  FileDigest expected;
};

// The reverse of WriteHostCopy: reads `files` (in the fast path's layout) into the first
// `bytes` of `memfd` (at least that large), so that the library refills from cryod's memory.
// DATA_LOSS naming the file and chunk that does not hold what the checkpoint recorded.
// `progress` (may be empty) is told, from the file's reader, each time file k has its first
// `read` bytes in memory (checked or not yet).
absl::Status ReadHostCopy(int memfd, uint64_t bytes, uint64_t stripe,
                          const std::vector<ChunkSources>& files,
                          const std::function<void(size_t k, uint64_t read)>& progress = {});

}  // namespace cryo::gpu
