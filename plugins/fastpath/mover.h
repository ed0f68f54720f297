#pragma once

// Moves a job's owned device memory out of the GPU and back, fast: through a small ring of
// pinned host buffers (the driver's DMA runs at PCIe speed into them) and a pool of threads
// that copy between the ring and the job's host memory (filling fresh host memory is the slow
// part, and it scales with threads); to and from files with one writer or reader per file, each
// hashing what it moves with the store's checksum.
//
//   Drain    running -> drained: gate shut, work synchronized, every owned allocation copied to
//            host memory, its device memory released (the address ranges stay reserved).
//            With files, writers start as soon as the first bytes are in host memory.
//   Saved    drained -> saved: the writers are done, the host copies are freed (so CRIU does
//            not dump them again).
//   Refill   drained|saved -> running: device memory created and mapped at the same addresses,
//            the data copied in (from host memory or the files, checked), exported again where
//            it had been exported, gate open; -> importing instead while memory the process
//            imported from another is not back (Import brings it, then the gate opens).
// A failed drain rolls itself back (refill from host memory) whenever it can.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/contract/gpu_fastpath_messages.h"
#include "plugins/fastpath/driver.h"
#include "plugins/fastpath/gate.h"
#include "plugins/fastpath/registry.h"
#include "plugins/fastpath/result.h"

namespace cryo::fastpath {

// The states and file sums are the channel's own (lib/contract/gpu_fastpath_messages.h).
using State = contract::gpu_fastpath::State;
using FileSum = contract::gpu_fastpath::FileSum;
using contract::gpu_fastpath::StateName;

struct DrainOptions {
  int threads = 8;
  std::chrono::milliseconds timeout{10000};
  uint64_t stripe_bytes = 64ull << 20;
  std::vector<int> fds;  // the files to save into; empty keeps the data in host memory
  // >= 0: the host memory is this memfd (cryod's), mapped shared; FinishSave unmaps it
  // (gpu_fastpath.h, "Memory"). No files then.
  int memfd = -1;
  // With memfd: cryod's progress page (gpu_fastpath.h, "Following"), where the drain says how
  // much of the stream is in the memfd as it goes, and then whether the copy succeeded, so that
  // cryod writes the files behind it.
  int progress = -1;
  // With memfd: device memory of cryod's parking process (gpu_fastpath.h, "Parking"), `park_bytes`
  // of it on the GPU of PCI bus id `park_device`. The data goes there instead when it fits and
  // lives on that GPU alone; the memfd and the progress page are then left to cryod.
  int park = -1;
  uint64_t park_bytes = 0;
  std::string park_device;
};

// What the channel reports is what the mover measures (lib/contract/gpu_fastpath_messages.h).
using DrainResult = contract::gpu_fastpath::DrainedReply;

using SaveResult = contract::gpu_fastpath::SavedReply;

struct RefillOptions {
  int threads = 8;
  std::vector<int> fds;           // the drain's files, when the data is only there
  std::vector<FileSum> expected;  // what each file must be (checked before the gate opens)
  int memfd = -1;                 // the data is in this memfd (a drain's `memfd`), not in files
  // cryod is still reading the data into `memfd`: its progress page (gpu_fastpath.h,
  // "Following"); each piece is copied once it is there, and the gate waits for the verdict.
  int progress = -1;
  // A parked drain's park, `park_bytes` of it: the data comes back from it within the GPU.
  int park = -1;
  uint64_t park_bytes = 0;
  // Or a park cryod filled from the store and checked (gpu_fastpath.h, "Filled"), on the GPU of
  // PCI bus id `park_device`, whatever the drain was.
  bool filled = false;
  std::string park_device;
};

using RefillResult = contract::gpu_fastpath::RefillReply;

// Tunables, mostly for tests.
struct MoverConfig {
  size_t ring_slot_bytes = 32ull << 20;  // one pinned buffer of the drain's ring
  int ring_slots = 4;
  size_t read_bytes = 32ull << 20;  // one read (and pinned buffer) of a refill from files
  bool huge_pages = true;           // madvise(MADV_HUGEPAGE) on host copies
  // cryod's memory (a drain or refill with a memfd) registered with the driver, so that the
  // DMA goes straight into it rather than through the ring and a copy by the threads (the job's
  // kEnvHostRegister; off by default, see there).
  bool register_host = false;
  // A drain into cryod's memory, and a followed refill from it, register that memory a window
  // at a time and copy straight to or from it (the job's kEnvRegisterWindows; off by default).
  bool register_windows = false;
  uint64_t register_window_bytes = 256ull << 20;  // one such window
};

class Mover {
 public:
  Mover(const Driver& d, Registry& reg, Gate& gate, CaptureGate& capture, MoverConfig cfg = {},
        CollectiveGate* collectives = nullptr)
      : d_(d),
        reg_(reg),
        gate_(gate),
        capture_(capture),
        cfg_(cfg),
        collectives_(collectives != nullptr ? *collectives : own_collectives_) {}
  ~Mover();
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // The first half of a drain held at a cut across processes (gpu_fastpath.h, version 2): the
  // gates shut and the work synchronized, nothing moved. A Drain then goes on from there;
  // Unhold lets the job go on instead. A failure leaves the gates open.
  Result Hold(std::chrono::milliseconds timeout, int64_t* quiesce_ms);
  void Unhold();
  // The cut in two steps, aligned on NCCL's collectives: GateShut shuts the gates (no sync: a
  // rank ahead waits on its peers) and says how many collectives the job launched; Align lets
  // the job run on until it has launched `target` of them (held at the next), shuts the gates
  // again and synchronizes. Then the job is held as after Hold. A failure leaves it running.
  Result GateShut(std::chrono::milliseconds timeout, uint64_t* collectives);
  Result Align(uint64_t target, std::chrono::milliseconds timeout, int64_t* quiesce_ms);
  CollectiveGate& collectives() { return collectives_; }
  bool held() const { return held_; }

  Result Drain(const DrainOptions& opt, DrainResult* out);
  // After a Drain with files: waits for the writers, then frees the host copies. A failure
  // refills from the host copies (rolled back). After a Drain into a memfd: unmaps it.
  Result FinishSave(SaveResult* out);
  // Brings the job's own memory back, exports it again (new descriptors, kept in the registry),
  // and opens the gates unless memory it imported is still to be imported (then: kImporting,
  // gates shut, until Import). In kImporting, does nothing but say so.
  Result Refill(const RefillOptions& opt, RefillResult* out);
  // kImporting -> running: each imported allocation imported again from its exporter's new
  // descriptor (by import id), mapped where it was, its access granted again; the gates open.
  Result Import(const std::map<uint64_t, int>& fds, int64_t* ms);
  // Whatever the state, back to running if the data is still in host memory (a drain whose
  // caller went away). False when the data is only in files: a refill with them must come.
  bool RollBackFromHost();
  // A drain with files whose caller went away: stops the writers and rolls back.
  bool Abort();

  State state() const { return state_.load(); }
  // The PCI bus id of the one GPU that holds all the memory a drain would move now; "" when
  // there is none, or several, or host memory among it (gpu_fastpath.h, "Parking").
  std::string Device();
  // Drains begun so far: a legacy IPC open that saw this change while it fetched its descriptor
  // fetches again (the exporter's memory moved meanwhile; legacy_ipc.h).
  uint64_t drains() const { return drains_.load(); }

 private:
  struct Piece {  // bytes [offset, offset + len) of one physical allocation
    Phys* phys;
    uint64_t offset;
    uint64_t len;
  };
  struct Writer {
    int fd = -1;
    int index = 0;
    std::thread thread;
    Result result;
    FileSum sum;
  };

  Result Quiesce(std::chrono::milliseconds timeout, int64_t* ms);
  Result ShutGates(std::chrono::milliseconds timeout);
  Result SyncWork(std::chrono::milliseconds timeout);
  void OpenGates();
  bool Plan();
  std::vector<Piece> PiecesOf(uint64_t stream_off, uint64_t len) const;
  CUdeviceptr SourceOf(Phys* p);
  Result FindSources();
  Result MapTemporary(Phys* p);
  bool RestoreFromHost();
  void BackToRunning();
  void ReleaseImports();
  bool ImportsPending();
  Result ExportAgain();
  void UnmapTemporaries();
  Result CopyOut(int threads);
  Result Release();
  Result Recreate();
  Result CopyInFromHost(int threads);
  // Copies between the GPU and cryod's memory with no pass through the ring: that memory
  // registered with the driver a window at a time, ahead of the copies. Out: a drain into it.
  // In: a followed refill (cryod reading into it meanwhile), each piece copied once cryod's
  // read has passed it. `*fallback`: the first window could not be registered and nothing was
  // copied (the ring does it).
  Result CopyRegistered(bool out, bool* fallback);
  Result CopyInFromFiles(const std::vector<int>& fds, std::vector<FileSum>* sums);
  // The copies straight between the GPU and registered host memory (MapHost's, registered):
  // out of the GPU (a drain), or back into it.
  // `window` (0: none): no piece spans a multiple of it; `ahead` (may be empty) runs before the
  // piece ending at stream byte `end` is copied (CopyRegistered registers its windows there).
  Result CopyDirect(bool out, uint64_t window = 0,
                    const std::function<Result(uint64_t end)>& ahead = nullptr);
  Result MapHost(int memfd, bool write);
  // Whether the planned data can go into a park of `bytes` on the GPU `device` (Device()).
  bool FitsPark(const std::string& device, uint64_t bytes);
  // Every planned allocation copied within the GPU into the park (`out`) or back from it, at its
  // place in the stream; the park imported from `fd` and let go again before it returns.
  Result CopyPark(int fd, uint64_t bytes, bool out);
  void FreeHost();
  // A following refill (RefillOptions::progress): until cryod's read has passed stream byte
  // `end`; then, with `verdict`, until cryod says what it found. DATA_LOSS when it found the data
  // damaged.
  Result WaitFollowed(uint64_t end, bool verdict = false);
  // A followed drain: copied_ onto cryod's progress page (under progress_mu_).
  void Tell();
  void StartWriters(const std::vector<int>& fds);
  void WriteUnits(Writer* w);
  void StopWriters();
  CUstream StreamFor(CUcontext ctx);
  void DestroyStreams();

  const Driver& d_;
  Registry& reg_;
  Gate& gate_;
  CaptureGate& capture_;
  const MoverConfig cfg_;
  std::atomic<State> state_{State::kRunning};
  std::atomic<uint64_t> drains_{0};
  bool held_ = false;   // gates shut by Hold (or Align), waiting for Drain or Unhold
  bool gated_ = false;  // gates shut by GateShut, waiting for Align or Unhold
  CollectiveGate own_collectives_;
  CollectiveGate& collectives_;
  int64_t held_quiesce_ms_ = 0;

  // The drained allocations in stream order, and the files' layout. Kept in the process's
  // memory, which CRIU saves, so a refill after a restore knows where everything goes.
  std::vector<Phys*> plan_;
  std::vector<Phys*> imports_;  // imported allocations released by the drain
  uint64_t total_ = 0;
  uint64_t stripe_ = 0;
  int nfiles_ = 0;
  bool in_memfd_ = false;  // the drain's host memory was a memfd of cryod's
  // The drain's data went into cryod's park (and not into the memfd): until the refill, only
  // the park holds it. park_fd_ is the drain's descriptor of it, until FinishSave.
  bool parked_ = false;
  int park_fd_ = -1;
  uint64_t park_bytes_ = 0;
  char* host_base_ = nullptr;  // that memfd, mapped (stream order)
  uint64_t host_len_ = 0;
  bool host_registered_ = false;  // host_base_ is registered with the driver (register_host)
  // A following refill's progress page, mapped read-only (only read through).
  contract::gpu_fastpath::ProgressWords followed_;
  // A followed drain's progress page, mapped (under progress_mu_).
  contract::gpu_fastpath::ProgressWords told_;
  std::map<Phys*, CUdeviceptr> temp_maps_;  // physical allocations mapped only for a copy
  std::map<Phys*, CUdeviceptr> sources_;    // where each one is mapped whole
  std::map<CUcontext, CUstream> streams_;

  // Copy progress for the writers: stream bytes [0, copied_) are in host memory.
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  uint64_t copied_ = 0;
  bool copy_failed_ = false;
  std::vector<std::unique_ptr<Writer>> writers_;
  std::chrono::steady_clock::time_point save_start_;
};

}  // namespace cryo::fastpath
