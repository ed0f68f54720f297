#pragma once

// cryod's end of a parking process (cryo-gpu-parker; lib/contract/gpu_fastpath.h, "Parking"):
// device memory on one GPU, held by a process of cryod's, that a leave-running drain parks a
// job's data in while the job is held; after the thaw it copies that memory into cryod's memfd
// and cryod writes the files behind it (the progress page says how far it is).

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/gpu/progress_page.h"
#include "lib/base/fd.h"
#include "lib/base/file_digest.h"

namespace cryo::gpu {

struct ParkerOptions {
  std::string binary;                          // cryo-gpu-parker
  std::string libcuda;                         // the driver it opens (empty: libcuda.so.1)
  absl::Duration timeout = absl::Seconds(30);  // for its memory, and for each reply
};

class Parker {
 public:
  // A parking process with `bytes` (or a little more) of device memory on the GPU of PCI bus id
  // `device`. UNAVAILABLE when the GPU has not that much free, or the process fails to start.
  // `fill_files`: a BeginFill of that many files follows, whose pinned ring the process makes
  // while it starts.
  static absl::StatusOr<std::unique_ptr<Parker>> Start(const ParkerOptions& opt,
                                                       const std::string& device, uint64_t bytes,
                                                       uint32_t fill_files = 0);
  ~Parker();  // the process ends, and its memory with it
  Parker(const Parker&) = delete;
  Parker& operator=(const Parker&) = delete;

  int fd() const { return park_.get(); }  // the memory's POSIX descriptor, for the library
  uint64_t bytes() const { return bytes_; }
  const std::string& device() const { return device_; }

  // Has the process copy its first `bytes` into `memfd`, raising `page` (bad on any failure,
  // the process's death included) as it goes. WaitCopied then waits for its word.
  absl::Status BeginCopy(int memfd, std::shared_ptr<const ProgressPage> page, uint64_t bytes);
  absl::Status WaitCopied();
  bool copying() const { return copied_.valid(); }

  // For a restore (docs/proposals/restore-into-gpu.md): has the process read `files` (the fast
  // path's layout: unit c of `stripe` bytes of the stream in file c % W) into its memory, the
  // first `bytes` of it. WaitFilled then gives each file's size and checksum as read, for the
  // caller to compare with what the checkpoint recorded; the memory stays until the Parker goes.
  absl::Status BeginFill(const std::vector<int>& files, uint64_t stripe, uint64_t bytes);
  absl::StatusOr<std::vector<FileDigest>> WaitFilled();
  bool filling() const { return filled_.valid(); }

  // Lets go of `parkers` without waiting for their processes to end: each frees its GPU memory
  // as it exits (the driver's teardown of that memory and of its context), which a restore
  // need not wait for once the job's library has copied from the park.
  static void LetGoInBackground(std::vector<std::unique_ptr<Parker>> parkers);

 private:
  Parker() = default;
  UniqueFd sock_, park_;
  pid_t pid_ = -1;
  uint64_t bytes_ = 0;
  std::string device_;
  absl::Duration timeout_;
  absl::Duration started_in_;  // from the spawn until it offered its memory
  std::future<absl::Status> copied_;
  std::future<absl::StatusOr<std::vector<FileDigest>>> filled_;
};

}  // namespace cryo::gpu
