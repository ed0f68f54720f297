#pragma once

// A leave-running checkpoint's dump into node memory (docs/operations.md, "Periodic
// checkpoints"): CRIU writes the job's images into a directory of cryod's private tmpfs while
// the job is frozen, the job runs on, and the images are copied into the store's stage
// (dump_write), each checked against the checksum taken while CRIU wrote it. The job is then
// held for CRIU and the node's memory, not for the store. The tmpfs is detached at cryod's start
// (gpu::MountPrivateTmpfs): whatever ends cryod, nothing staged there outlives it, and the
// store's stage without a manifest is collected at the next start.

#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "lib/base/file_digest.h"

namespace cryo::criu {
class PagesPool;
}

namespace cryo::engine {

class DumpStaging {
 public:
  DumpStaging() = default;
  // Directory `name` in the tmpfs whose O_PATH descriptor is `fs`; CRIU (and cryo-nsexec, which
  // opens it on the host before entering a container) reach it through /proc/<cryod>/fd/<fs>.
  // With `pool` (its directory in the same tmpfs), the pages images go to it when this ends.
  static absl::StatusOr<DumpStaging> Make(int fs, const std::string& name,
                                          criu::PagesPool* pool = nullptr);
  ~DumpStaging();  // removes the directory and everything in it (the pages images kept first)
  DumpStaging(DumpStaging&& o) noexcept { *this = std::move(o); }
  DumpStaging& operator=(DumpStaging&& o) noexcept;
  DumpStaging(const DumpStaging&) = delete;
  DumpStaging& operator=(const DumpStaging&) = delete;

  bool active() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }

  // Copies each file of `digests` (paths relative to dir()) into `to`, several at once, hashing
  // as it goes: DATA_LOSS naming the file whose copy does not hash to its digest. `progress`
  // (may be empty) gets the bytes copied so far, from the copying threads (several at once);
  // `stop` (may be empty), asked between pieces, ends it with CANCELLED.
  absl::Status CopyTo(const std::string& to, const std::map<std::string, FileDigest>& digests,
                      const std::function<void(uint64_t)>& progress,
                      const std::function<bool()>& stop) const;

 private:
  void Release();

  std::string dir_;
  criu::PagesPool* pool_ = nullptr;
};

}  // namespace cryo::engine
