#pragma once

// Pages images' memory kept for the next dump into node memory (dump_pages_pool_mib,
// docs/operations.md). cryod's copy of a frozen job's memory into the pages images
// (anon_pages.h) writes into fresh pages of its tmpfs: each is allocated and zeroed first, which
// made that copy run at 25-34 GB/s where a copy into pages already there ran at 91-100 GB/s (one
// H200 host, 2026-12-01; on a VM whose memory is backed on first touch, a fresh page could cost
// far more). The images of a leave-running dump are copied into the store after the thaw and
// then dropped; with this pool their files are kept instead (up to a cap), and the next dump's
// pages images are written over them.
//
// A kept file is overwritten whole before it is named as an image (every byte of a pages image
// is copied from the job) and cut to its new size, so nothing of one dump is left in another's
// images. The files live in cryod's private tmpfs, root's only, like the images themselves.
// While the node has less than its low-water mark of memory available, kept files are let go.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/fd.h"

namespace cryo::criu {

class PagesPool {
 public:
  struct Options {
    std::string dir;  // a directory of the tmpfs the dumps go into (rename must reach it)
    uint64_t cap = 0;
    // What the node can give now, and the mark under which nothing is kept.
    std::function<uint64_t()> available;
    uint64_t low_water = 1ull << 30;
    // How often a thread of the pool calls Trim (zero: no thread; Take and Keep still do).
    absl::Duration poll = absl::ZeroDuration();
  };
  // A file taken from the pool: its descriptor, where it is, how many bytes it holds.
  struct File {
    UniqueFd fd;
    std::string path;
    uint64_t bytes = 0;
  };

  explicit PagesPool(Options o);
  ~PagesPool();  // the kept files are removed
  PagesPool(const PagesPool&) = delete;
  PagesPool& operator=(const PagesPool&) = delete;

  // The kept file closest above `bytes` (else the largest), or none. The caller sizes it, writes
  // it whole and renames it where it belongs, or gives it back with Return.
  std::optional<File> Take(uint64_t bytes);
  // A file taken and not renamed: kept again, as it is now.
  void Return(File f);
  // The file at `path` (in the same tmpfs), moved into the pool if it fits under the cap and
  // the node has memory to spare; otherwise left where it is.
  void Keep(const std::string& path);
  // Lets kept files go while the node's available memory is under the low-water mark.
  void Trim();

  uint64_t held() const;
  int files() const;

 private:
  struct Kept {
    std::string path;
    uint64_t bytes = 0;
  };
  void Drop(std::vector<Kept>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Options o_;
  mutable absl::Mutex mu_;
  std::vector<Kept> kept_ ABSL_GUARDED_BY(mu_);
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watch_;
};

}  // namespace cryo::criu
