#pragma once

// The pages of private anonymous memory, dumped by cryod instead of CRIU.
//
// CRIU copies a dump's memory with one thread, one task after another, and for jobs of several
// GB per process that copy is most of the time a checkpoint holds them (docs/benchmarks.md,
// issue 41). With kAnonPagesEnv=1 the project's CRIU (scripts/criu-patches/0002-*) leaves the
// pages of regular private anonymous mappings out of its images. At its post-dump action (the
// images written, the tasks still frozen: criu/action_gate.h) cryod copies those pages from the
// tasks with several threads and merges them into each task's pagemap-<pid>.img and
// pages-<id>.img, in address order, as CRIU would have written them. CRIU's restore reads them
// as its own.
//
// Which mappings are cryod's is decided from mm-<pid>.img alone, by the same rule as the patch
// (IsExternalAnonVma). A CRIU without the patch dumps them itself: its pagemap then has entries
// inside them, and cryod leaves that task's images as they are.

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/file_digest.h"

namespace cryo::criu {

inline constexpr char kAnonPagesEnv[] = "CRIU_ANON_PAGES_EXTERNAL";
inline constexpr uint32_t kPagemapMagic = 0x56084025;
inline constexpr uint32_t kMmMagic = 0x57492820;
inline constexpr uint32_t kMemfdInodeMagic = 0x48453499;

// criu/include/image.h's VMA status bits, and pagemap.h's entry flags.
namespace vma {
inline constexpr uint32_t kRegular = 1u << 0;
inline constexpr uint32_t kVdso = 1u << 3;
inline constexpr uint32_t kFilePrivate = 1u << 6;
inline constexpr uint32_t kFileShared = 1u << 7;
inline constexpr uint32_t kAnonShared = 1u << 8;
inline constexpr uint32_t kAnonPrivate = 1u << 9;
inline constexpr uint32_t kSysVIpc = 1u << 10;
inline constexpr uint32_t kSocket = 1u << 11;
inline constexpr uint32_t kVvar = 1u << 12;
inline constexpr uint32_t kAioRing = 1u << 13;
inline constexpr uint32_t kMemfd = 1u << 14;
inline constexpr uint32_t kShadowStack = 1u << 15;
inline constexpr uint32_t kVsyscall = 1u << 2;
inline constexpr uint32_t kUnsupported = 1u << 31;
}  // namespace vma
inline constexpr uint32_t kPagemapParent = 1u << 0;
inline constexpr uint32_t kPagemapLazy = 1u << 1;
inline constexpr uint32_t kPagemapPresent = 1u << 2;

// The threads that copy by default: one per core, at most 16; none (CRIU copies) below 4
// cores, where two threads are no faster than CRIU's one (0.83-1.03x on a 2-core VM since the
// copy stays in the cache; 1.26x before: docs/benchmarks.md).
inline int DefaultDumpCopyThreads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return cores < 4 ? 0 : std::min(cores, 16);
}

// Whether the patched CRIU leaves a mapping's pages to cryod (its status and mmap flags from
// mm-<pid>.img).
bool IsExternalAnonVma(uint32_t status, uint32_t flags);

struct AnonPagesResult {
  int tasks = 0;                  // tasks whose pages cryod wrote
  int segments = 0;               // shared memory segments and memfds whose pages cryod wrote
  int left_to_criu = 0;           // tasks whose images already held them (a CRIU without the patch)
  uint64_t bytes = 0;             // bytes of memory copied from the tasks
  uint64_t criu_bytes = 0;        // pages CRIU copied itself (shared memory, file-backed private)
  absl::Duration scan;            // reading the images and the tasks' pagemaps
  absl::Duration copy;            // copying while the tasks are frozen, with `threads` threads
  absl::Duration after_thaw;      // copying the pages taken ahead, checksumming what holds them
  absl::Duration replace;         // writing the pagemaps, putting the new files in place
  uint64_t ahead_bytes = 0;       // pages taken from the copy ahead (pre_copy.h), not written since
  uint64_t ahead_mismatches = 0;  // CRYO_PRE_COPY_VERIFY=1: pages of those that were wrong
  int pooled = 0;                 // pages images written over files kept from an earlier dump
  uint64_t pooled_bytes = 0;      // ... so much of them in pages already there
  uint64_t huge_bytes = 0;        // the node's shared memory in huge pages grew so much in the copy
  // The pages images rewritten, with their checksums (taken from the copy as it went), and the
  // pagemaps rewritten (small: hashed by whoever lists the directory).
  std::map<std::string, FileDigest> pages;
  std::vector<std::string> pagemaps;
};

class PreCopy;
class PagesPool;

// Copies the anonymous pages of every task of the dump in `images_dir` (pstree.img) into its
// images, with `threads` threads, in two parts: WhileFrozen copies what only the frozen tasks
// hold; Finish, once they run on, copies the pages `ahead` (may be null) holds of them (copied
// before the freeze and not written since: pre_copy.h), checksums the files and puts them in
// place. The tasks must be in cryod's pid namespace (pids as in the images). Any error leaves the
// images incomplete: the dump must fail. With `pool`, whose directory is in the same file system
// as `images_dir`, the new pages images are written over files kept from earlier dumps
// (pages_pool.h).
class AnonPagesCopy {
 public:
  static absl::StatusOr<std::unique_ptr<AnonPagesCopy>> WhileFrozen(const std::string& images_dir,
                                                                    int threads,
                                                                    const PreCopy* ahead,
                                                                    PagesPool* pool = nullptr);
  absl::StatusOr<AnonPagesResult> Finish();
  ~AnonPagesCopy();

 private:
  AnonPagesCopy();
  struct State;
  std::unique_ptr<State> s_;
};

// Both parts at once (the tasks frozen throughout).
absl::StatusOr<AnonPagesResult> WriteAnonPages(const std::string& images_dir, int threads,
                                               const PreCopy* ahead = nullptr,
                                               PagesPool* pool = nullptr);

}  // namespace cryo::criu
