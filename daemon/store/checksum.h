#pragma once

// Image checksums. XXH3-128 over 64 MiB chunks, then XXH3-128 over the chunk digests: fast
// enough to run beside CRIU while it writes (TailHasher) and parallel across the chunks of one
// large pages file when a restore verifies it. Detects corruption and truncation; it is not a
// signature (see docs/architecture.md, "Trust").

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/file_digest.h"

namespace cryo {

inline constexpr char kChecksumAlgorithm[] = "xxh3-128-chunked-64m";
inline constexpr uint64_t kChecksumChunk = xxh3chunked::kChunk;

// Incremental form of the checksum, fed in order.
class ChunkedHasher {
 public:
  ChunkedHasher();
  ~ChunkedHasher();
  ChunkedHasher(const ChunkedHasher&) = delete;
  ChunkedHasher& operator=(const ChunkedHasher&) = delete;
  void Update(const void* data, size_t len);
  FileDigest Finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Hashes one file, using up to `threads` threads over its chunks. `progress` (optional) is
// advanced by the bytes read.
absl::StatusOr<FileDigest> HashFile(const std::string& path, int threads = 1,
                                    std::atomic<uint64_t>* progress = nullptr);

struct ExpectedFile {
  std::string path;  // relative to the root
  uint64_t size = 0;
  std::string checksum;
  // Checked for size (and being a regular file of the checkpoint) only: its reader checks the
  // checksum while it reads (the GPU fast path's files), so it is not read twice.
  bool size_only = false;
};

// The same over an open descriptor, left open (the caller owns it); `path` names it in errors.
absl::StatusOr<FileDigest> HashFd(int fd, const std::string& path, int threads = 1,
                                  std::atomic<uint64_t>* progress = nullptr);

// Checks every file's size, then its checksum. DATA_LOSS naming the first bad file; a file that
// is a link, a FIFO or anything but a regular file inside `root` is DATA_LOSS too, and is never
// read.
absl::Status VerifyFiles(const std::string& root, const std::vector<ExpectedFile>& files,
                         int threads, std::atomic<uint64_t>* progress = nullptr);

// PERMISSION_DENIED naming them (a few, and how many) when `root` holds anything but the files
// `listed` names (relative paths), the directories above them and the names in `also` at its top
// (the manifest, the damaged mark): CRIU reads images by name, so an unlisted one would reach it
// unverified and unsigned. Walks at most `max_entries` entries (more is refused too).
absl::Status RefuseUnlistedFiles(const std::string& root, const std::set<std::string>& listed,
                                 const std::set<std::string>& also, size_t max_entries = 1 << 20);

// Hashes the files of a directory while another process (CRIU) writes them, so the checksum
// costs no extra pass. Assumes files are written sequentially, as CRIU writes images; Finish()
// reads whatever is left after the writer exited.
class TailHasher {
 public:
  // start_writeback: also ask the kernel to start writing each hashed range to disk
  // (sync_file_range), so that a final fsync finds little left to do.
  explicit TailHasher(std::string dir, bool start_writeback = false);
  ~TailHasher();
  void Start();
  // Stops following and hashes the remainder of every file. Relative path -> digest.
  absl::StatusOr<std::map<std::string, FileDigest>> Finish();
  uint64_t bytes_hashed() const { return bytes_.load(); }
  // The digests of files that were replaced behind it by their writer, who hashed them as it
  // wrote (cryod's own pages images: criu/anon_pages.h): Finish takes them instead of reading
  // those files again, where the size agrees.
  void Provide(const std::map<std::string, FileDigest>& digests) {
    absl::MutexLock l(&mu_);
    for (const auto& [rel, d] : digests) provided_[rel] = d;
  }

 private:
  struct Tracked;
  void Loop();
  absl::Status Poll(bool final_pass);

  std::string dir_;
  bool start_writeback_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bytes_{0};
  std::thread thread_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Tracked>> files_;
  std::map<std::string, FileDigest> provided_;
  absl::Status error_;
};

}  // namespace cryo
