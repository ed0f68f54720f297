#pragma once

// A checkpoint's GPU fast-path participants (docs/architecture.md, "Participants"): the
// processes whose library moves their device memory (docs/gpu.md, "Fast path"). The session owns
// all a checkpoint holds of them: each process's durable record (FastpathProcess: what the
// journal entry and the manifest say of it), its drain in flight, the files the library writes
// (open until they are written), what those hold, and its data in cryod's memory for a drain
// into memory. The engine's steps (engine/fastpath_steps.cc) are its operations, in order; the
// undo needs only the records (Engine::RefillFastpath) and what Settle lends it.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/gpu/host_copy.h"
#include "daemon/gpu/host_copy_pool.h"
#include "daemon/gpu/parker.h"
#include "daemon/gpu/progress_page.h"
#include "daemon/records/gpu_process.h"
#include "daemon/store/manifest.h"
#include "lib/base/fd.h"
#include "lib/base/file_digest.h"

namespace cryo::gpu {

class FastpathSession {
 public:
  FastpathSession();
  explicit FastpathSession(std::vector<FastpathProcess> procs);
  FastpathSession(FastpathSession&&) noexcept;
  FastpathSession& operator=(FastpathSession&&) noexcept;
  // Ends a write begun early (BeginWrite) before the host copies it reads go.
  ~FastpathSession();

  bool empty() const { return records_.empty(); }
  size_t size() const { return records_.size(); }
  // The durable records, as the journal entry and the manifest hold them.
  const std::vector<FastpathProcess>& records() const { return records_; }
  // DrainTogether's: it records what each process shares.
  std::vector<FastpathProcess>& mutable_records() { return records_; }
  // What the processes own (before the drain) or moved (after).
  uint64_t bytes() const;
  // Their data is in cryod's memory, for gpu_write to write while the job runs on.
  bool in_memory() const;

  // gpu_host_copy: one copy of cryod's memory per process, all or none: a ready slot of `pool`
  // (may be null) where it has one, the largest processes first (one that owns nothing needs
  // none), fresh memory (NewHostCopy) for the rest once `fresh(bytes)` allows that much (not
  // asked when the rest owns nothing). The error (fresh's, or the allocation's) says why none.
  // Returns the processes given a slot.
  absl::StatusOr<size_t> AllocateHostCopies(int threads, int host_copy_fs, HostCopyPool* pool,
                                            const std::function<absl::Status(uint64_t)>& fresh);
  bool has_host_copies() const;

  // gpu_drain, before it: where each process's data goes, into its host copy (`memory`) or
  // into `writers` files each (none: it stays in the job's memory). Only the records change:
  // they are journaled before anything moves.
  void PlaceData(bool memory, int writers);
  // Then the files the records name, created under `dir` for the drains to write.
  absl::Status OpenDrainFiles(const std::string& dir);
  // A stop checkpoint's drains into host copies, followed (gpu_fastpath.h, "Following"): a
  // progress page per process, so that the write (BeginWrite) runs behind the drain instead of
  // after it. False, with nothing changed, where a library is older than that or a page cannot
  // be made.
  bool FollowDrains();
  // gpu_host_copy of a leave-running checkpoint, after the host copies: its drain parked on the
  // GPU where it can be (gpu_fastpath.h, "Parking"), all processes at once: a parking process
  // with room for each process's data on its GPU, whose memory the drain is given. A process whose
  // library is older, whose memory is not on one GPU, or whose GPU has no room, drains into its
  // host copy as before. Returns how many were given a park.
  size_t StartParkers(const ParkerOptions& opt);
  // gpu_write, before it: each parked process's data copied from the park into its host copy,
  // which the write follows (its progress page).
  absl::Status BeginParkCopies();
  // The descriptors each process's drain writes into, lent for DrainTogether.
  std::vector<std::vector<int>> DrainTargets() const;
  // gpu_drain, after it: the drains that began (null where none did), what each moved, and the
  // device memory it left to the driver (what the GPU plugins saw it use, less what moved).
  void TakeDrains(std::vector<std::unique_ptr<FastpathDrainHandle>> drains,
                  const std::vector<GpuProcess>& gpu);
  const FastpathDrainHandle* drain(size_t i) const { return held_[i].drain.get(); }

  // gpu_save: every drain's answer that its data is out of the job. Into files: each file
  // checked against what the library says it wrote, made durable with its metadata when
  // `durable`, closed, and listed for the manifest.
  absl::Status WaitSaved(bool durable);

  // gpu_refill of a leave-running checkpoint: each process's source (its host copy, or its
  // files under `dir`) and what those must hold.
  struct Sources {
    std::vector<std::vector<UniqueFd>> files;
    std::vector<std::vector<FileDigest>> expected;
  };
  absl::StatusOr<Sources> RefillSources(const std::string& dir) const;

  // A stop checkpoint's gpu_write begun as soon as the drain is over: the host copies are
  // written in the background while the driver's checkpoint and CRIU's dump run (nothing
  // refills from them: the job is stopped). WriteHostCopies then waits for it, with the same
  // arguments as given here (`prev` is copied).
  void BeginWrite(const std::string& dir, int writers, const store::Manifest* prev, bool durable,
                  std::function<bool()> stop);
  bool writing() const { return pending_ != nullptr; }

  // gpu_write: each host copy into `writers` files under `dir`, made durable when `durable`;
  // chunks unchanged since `prev` (the workload's newest good checkpoint, or null) are not
  // written but referred to. The copies go back to the node; the records say files from then
  // on. `written(pid, bytes)` after each process; `stop` ends it with CANCELLED. Returns the
  // bytes referred to.
  absl::StatusOr<uint64_t> WriteHostCopies(const std::string& dir, int writers,
                                           const store::Manifest* prev, bool durable,
                                           const std::function<bool()>& stop,
                                           const std::function<void(pid_t, uint64_t)>& written);

  // The manifest's entries for the files written (gpu_save or gpu_write), in process order.
  std::vector<store::ManifestFile> ManifestFiles() const;

  // A live undo's first half: drains still writing their files finished (`hard_stop` ends the
  // wait), files closed. The host copies, lent (-1: none), for the refill.
  std::vector<int> Settle(const std::function<bool()>& hard_stop);

 private:
  // What only this cryod holds of one process, gone after a crash.
  struct Held {
    std::unique_ptr<FastpathDrainHandle> drain;
    std::vector<UniqueFd> files;               // open for writing until gpu_save
    std::vector<FileDigest> digests;           // what the files hold, once written
    HostCopy host_copy;                        // a drain into cryod's memory: the data
    std::shared_ptr<const ProgressPage> page;  // that drain's, when followed
    std::vector<store::ManifestFile> listed;   // its files as the manifest lists them
    std::unique_ptr<Parker> parker;            // its park on the GPU (StartParkers)
  };
  // A parked process's park copied into its host copy, the write to follow (its progress page);
  // nothing when it is not parked or its copy began already.
  absl::Status BeginParkCopy(size_t i);
  // Its parking process's copy waited for, if one began, and the process let go (its GPU
  // memory with it).
  absl::Status EndPark(size_t i);
  // Both: false when the park could not be copied (the host copy then does not hold the data).
  bool CopyParkNow(size_t i);
  absl::Status CheckSaved(size_t i, bool durable);
  void List(size_t i);
  struct Pending;
  using Written = std::vector<std::vector<WrittenFile>>;
  // The files of every process in memory, written (the part BeginWrite runs in the background).
  std::unique_ptr<Pending> NewPending(const std::string& dir, int writers,
                                      const store::Manifest* prev, bool durable,
                                      std::function<bool()> stop) const;
  static absl::StatusOr<Written> WriteFiles(const Pending& p,
                                            const std::function<void(pid_t, uint64_t)>& written);
  // Ends a write begun early: cancelled (when `cancel`) and waited for.
  void EndPending(bool cancel);

  // First: a write begun early ends before the host copies it reads are closed.
  std::unique_ptr<Pending> pending_;
  std::vector<FastpathProcess> records_;
  std::vector<Held> held_;  // one per record
};

}  // namespace cryo::gpu
