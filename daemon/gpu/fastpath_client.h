#pragma once

// cryod's end of the GPU fast-path channel (lib/contract/gpu_fastpath.h): finds the library in a
// job's process, asks it to drain its GPU memory (into files of the store) and to refill it.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/records/gpu_process.h"
#include "lib/base/fd.h"
#include "lib/base/file_digest.h"
#include "lib/base/proc.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::gpu {

// One reply of the library to `p`, read as untrusted input (T: one of the reply types of
// lib/contract/gpu_fastpath_messages.h): the reply, or ABORTED / DEADLINE_EXCEEDED / DATA_LOSS /
// FAILED_PRECONDITION for the library's own failures (by their code), PERMISSION_DENIED for a
// status that names another process, FAILED_PRECONDITION for a library version this cryod does
// not speak, INVALID_ARGUMENT for anything malformed. Never throws.
template <typename T>
absl::StatusOr<T> ParseFastpathReply(absl::string_view text, const FastpathProcess& p);

// Where a process's drained data goes, relative to a checkpoint's directory:
// gpu/fastpath-<ns_pid>.<k>.bin.
std::string FastpathFileName(pid_t ns_pid, int k);

// Opens the n files of a process under `dir` (created, 0600, direct I/O where the file system
// has it) for a drain, or the existing ones read-only for a refill.
absl::StatusOr<std::vector<UniqueFd>> OpenFastpathFiles(const std::string& dir, pid_t ns_pid, int n,
                                                        bool write);

// Whether the process maps the library (it may still not have started CUDA).
bool LoadsFastpathLibrary(const proc::ProcReader& proc, pid_t pid);

// Connects to the library of `p`, from its network namespace when that is not cryod's.
// NOT_FOUND when it does not listen (no library, or CUDA not started yet); PERMISSION_DENIED
// when the name is held by another process than `p` (SO_PEERCRED: its pid and user), which
// then hears nothing.
absl::StatusOr<UniqueFd> ConnectFastpath(const proc::ProcReader& proc, const FastpathProcess& p);

// The library's status: its version (checked), state, what it owns.
absl::StatusOr<contract::gpu_fastpath::StatusReply> FastpathStatus(const proc::ProcReader& proc,
                                                                   const FastpathProcess& p,
                                                                   absl::Duration timeout);

// A userfaultfd of `p`'s process, from its library ("track", version 8), for cryod to track the
// process's writes through while it copies its memory (criu/pre_copy.h). FAILED_PRECONDITION
// from an older library, ABORTED where the kernel or the process cannot make one.
absl::StatusOr<WriteTracker> FastpathWriteTracker(const proc::ProcReader& proc,
                                                  const FastpathProcess& p, absl::Duration timeout);

// One drain, from the request to the library's last word. The library rolls back by itself on
// a failure it reports; if cryod goes away (or this object is destroyed before WaitSaved),
// the library also rolls back as long as the data is still in the job's memory.
class FastpathDrain : public FastpathDrainHandle {
 public:
  // Sends the request with `files` (descriptors of empty files opened for writing; none keeps
  // the data in the job's memory) and waits for "drained": the GPU memory is free then. With
  // opt.hold, waits for "quiesced" instead; Go() then waits for "drained".
  static absl::StatusOr<std::unique_ptr<FastpathDrain>> Start(const proc::ProcReader& proc,
                                                              const FastpathProcess& p,
                                                              const FastpathDrainOptions& opt,
                                                              const std::vector<int>& files);
  ~FastpathDrain() override;

  const contract::gpu_fastpath::DrainedReply& drained() const override { return drained_; }
  absl::Status Go() override;
  const contract::gpu_fastpath::QuiescedReply& quiesced() const override { return quiesced_; }
  const contract::gpu_fastpath::GatedReply& gated() const override { return gated_; }
  absl::Status Align(uint64_t to, absl::Duration bound) override;
  absl::StatusOr<std::vector<FileDigest>> WaitSaved(
      bool stoppable = true, const std::function<bool()>& hard_stop = nullptr) override;

 private:
  FastpathDrain(UniqueFd fd, FastpathProcess p, absl::Duration timeout, bool files,
                std::function<bool()> stop)
      : fd_(std::move(fd)), p_(p), timeout_(timeout), files_(files), stop_(std::move(stop)) {}
  UniqueFd fd_;
  FastpathProcess p_;
  absl::Duration timeout_;
  bool files_;
  std::function<bool()> stop_;
  bool held_ = false;
  contract::gpu_fastpath::QuiescedReply quiesced_;
  contract::gpu_fastpath::GatedReply gated_;
  contract::gpu_fastpath::DrainedReply drained_;
  // The first WaitSaved's answer: the channel is closed after it, and asking again (an undo
  // after gpu_save) gets the same answer at once instead of waiting on nothing.
  std::optional<absl::StatusOr<std::vector<FileDigest>>> saved_;
};

// A refill held for its imports (fastpath.h, FastpathRefillHandle).
class FastpathHeldRefill : public FastpathRefillHandle {
 public:
  static absl::StatusOr<std::unique_ptr<FastpathHeldRefill>> Start(
      const proc::ProcReader& proc, const FastpathProcess& p, int threads,
      const std::vector<int>& files, const std::vector<FileDigest>& expected,
      absl::Duration timeout, std::function<bool()> stop = nullptr);
  ~FastpathHeldRefill() override;
  const contract::gpu_fastpath::RefillReply& refilled() const override { return refilled_; }
  absl::StatusOr<contract::gpu_fastpath::ImportedReply> Go(const std::vector<uint64_t>& ids,
                                                           const std::vector<int>& fds) override;

 private:
  FastpathHeldRefill(UniqueFd fd, FastpathProcess p, absl::Duration timeout,
                     std::function<bool()> stop)
      : fd_(std::move(fd)), p_(std::move(p)), timeout_(timeout), stop_(std::move(stop)) {}
  UniqueFd fd_;
  FastpathProcess p_;
  absl::Duration timeout_;
  std::function<bool()> stop_;
  contract::gpu_fastpath::RefillReply refilled_;
};

// Refills a drained or restored process: with `files` (read descriptors of the drain's files, in
// order) and the digests the checkpoint recorded for them, or with none when the data is still in
// the job's memory. The library checks every file before the job's GPU work may go on; a
// mismatch is DATA_LOSS and the job stays held (the caller ends it).
absl::StatusOr<contract::gpu_fastpath::RefillReply> FastpathRefill(
    const proc::ProcReader& proc, const FastpathProcess& p, int threads,
    const std::vector<int>& files, const std::vector<FileDigest>& expected, absl::Duration timeout,
    const std::function<bool()>& stop = nullptr);

}  // namespace cryo::gpu
