#include "plugins/fastpath/mover.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

// The library runs inside jobs, which may not have libxxhash: its code is compiled in.
#define XXH_INLINE_ALL
#include "lib/base/chunked_xxh3.h"
#include "lib/base/io_all.h"
#include "plugins/fastpath/mover_internal.h"
#include "plugins/fastpath/pinned_pipeline.h"

namespace cryo::fastpath {
namespace {

using mover_internal::Clock;
using mover_internal::Cuda;
using mover_internal::Ms;

// What a half-done drain must take back, newest first, unless it is dismissed (the drain
// succeeded). Each step pushes the undo of what it did once it did it.
class UndoStack {
 public:
  ~UndoStack() { Run(); }
  void Push(std::function<void()> f) { undos_.push_back(std::move(f)); }
  // A step whose failure needs more than the steps before it can take back: its one undo
  // stands for all of theirs.
  void ReplaceAll(std::function<void()> f) {
    undos_.clear();
    undos_.push_back(std::move(f));
  }
  void Run() {
    while (!undos_.empty()) {
      auto f = std::move(undos_.back());
      undos_.pop_back();
      f();
    }
  }
  void Dismiss() { undos_.clear(); }

 private:
  std::vector<std::function<void()>> undos_;
};

}  // namespace

Mover::~Mover() { StopWriters(); }

void Mover::OpenGates() {
  collectives_.Unlimit();
  gate_.Open();
  capture_.Release();
}

Result Mover::Hold(std::chrono::milliseconds timeout, int64_t* quiesce_ms) {
  if (state_ != State::kRunning || held_ || gated_) {
    return {std::string("the job's GPU memory is already out or held (") + StateName(state_) + ")",
            false};
  }
  Result q = Quiesce(timeout, &held_quiesce_ms_);
  if (!q.ok()) return q;
  held_ = true;
  *quiesce_ms = held_quiesce_ms_;
  return {};
}

void Mover::Unhold() {
  if (!held_ && !gated_) return;
  held_ = gated_ = false;
  collectives_.Unlimit();
  OpenGates();
}

Result Mover::ShutGates(std::chrono::milliseconds timeout) {
  if (!capture_.Quiesce(timeout)) {
    return {"a CUDA graph capture of the job did not end within " +
                std::to_string(timeout.count()) + " ms",
            true, ErrorCode::kDeadline};
  }
  if (!gate_.Shut(timeout)) {
    capture_.Release();
    return {"CUDA calls of the job were still in flight after " + std::to_string(timeout.count()) +
                " ms",
            true, ErrorCode::kDeadline};
  }
  return {};
}

Result Mover::SyncWork(std::chrono::milliseconds timeout) {
  // Work already submitted must finish before its memory moves. A synchronize cannot be
  // interrupted, so it runs on a thread of its own and is given up on at the deadline (a kernel
  // that waits for something outside the job never ends: the job runs on untouched).
  struct Sync {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Result result;
  };
  auto sync = std::make_shared<Sync>();
  std::set<CUcontext> ctxs = reg_.contexts();
  Driver d = d_;
  std::thread([d, ctxs, sync] {
    GateGuard::MarkLibraryThread();
    Result err;
    for (CUcontext c : ctxs) {
      CUresult r = d.cuCtxSetCurrent(c);
      if (r == CUDA_SUCCESS) r = d.cuCtxSynchronize();
      if (r != CUDA_SUCCESS && err.ok()) err = Cuda(d, "synchronizing the job's GPU work", r);
    }
    std::lock_guard<std::mutex> l(sync->mu);
    sync->done = true;
    sync->result = err;
    sync->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> l(sync->mu);
  if (!sync->cv.wait_for(l, timeout, [&] { return sync->done; }) || !sync->result.ok()) {
    Result why = sync->done ? sync->result
                            : Result::Failed("the job's GPU work did not finish within " +
                                                 std::to_string(timeout.count()) + " ms",
                                             ErrorCode::kDeadline);
    l.unlock();
    OpenGates();
    return std::move(why).RolledBack();
  }
  return {};
}

Result Mover::Quiesce(std::chrono::milliseconds timeout, int64_t* ms) {
  const auto t0 = Clock::now();
  Result o = ShutGates(timeout);
  if (o.ok()) o = SyncWork(timeout);
  if (o.ok()) *ms = Ms(t0);
  return o;
}

Result Mover::GateShut(std::chrono::milliseconds timeout, uint64_t* collectives) {
  if (state_ != State::kRunning || held_ || gated_) {
    return {std::string("the job's GPU memory is already out or held (") + StateName(state_) + ")",
            false};
  }
  Result o = ShutGates(timeout);
  if (!o.ok()) return o;
  gated_ = true;
  *collectives = collectives_.count();
  return {};
}

Result Mover::Align(uint64_t target, std::chrono::milliseconds timeout, int64_t* quiesce_ms) {
  if (!gated_) return {"no cut to align: the gates are not shut", false};
  const auto t0 = Clock::now();
  gated_ = false;
  auto fail = [&](Result o) {
    collectives_.Unlimit();
    OpenGates();
    o.rolled_back = true;
    return o;
  };
  if (collectives_.counting() && collectives_.count() < target) {
    // Behind its peers: on until its launch of collective `target`, held at the next one.
    collectives_.Limit(target);
    gate_.Open();
    if (!collectives_.WaitFor(target, timeout)) {
      return fail({"the job launched " + std::to_string(collectives_.count()) + " of the " +
                       std::to_string(target) + " collectives its peers launched within " +
                       std::to_string(timeout.count()) + " ms",
                   true, ErrorCode::kDeadline});
    }
    if (!gate_.Shut(timeout)) {
      return fail({"CUDA calls of the job were still in flight after " +
                       std::to_string(timeout.count()) + " ms",
                   true, ErrorCode::kDeadline});
    }
  } else if (collectives_.counting()) {
    collectives_.Limit(collectives_.count());
  }
  Result o = SyncWork(timeout);
  if (!o.ok()) {
    collectives_.Unlimit();
    return o;
  }
  held_ = true;
  held_quiesce_ms_ = *quiesce_ms = Ms(t0);
  return {};
}

// After the data is back: the job had let go of some handles while their mappings lived on;
// so does the library now.
static void DropUnheldReferences(const Driver& d, const std::vector<Phys*>& plan) {
  for (Phys* p : plan) {
    if (!Registry::HoldsReference(*p) && p->mappings > 0) d.cuMemRelease(p->real);
  }
}

// One writer per file: the units it owns (every nfiles_-th), each as soon as the copy has it in
// host memory, hashed in file order.
void Mover::StartWriters(const std::vector<int>& fds) {
  for (int k = 0; k < nfiles_; ++k) {
    auto w = std::make_unique<Writer>();
    w->fd = fds[k];
    w->index = k;
    Writer* wp = w.get();
    w->thread = std::thread([this, wp] { WriteUnits(wp); });
    writers_.push_back(std::move(w));
  }
}

void Mover::WriteUnits(Writer* w) {
  GateGuard::MarkLibraryThread();
  // Writing starts as soon as the first units are in host memory, but the copy threads
  // need every core to free the GPU fast: the writers (mostly waiting for the disk) yield.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
  const uint64_t units = (total_ + stripe_ - 1) / stripe_;
  // Waits until unit c is in host memory; false when the copy failed.
  auto wait_unit = [this](uint64_t c) {
    const uint64_t end = std::min<uint64_t>((c + 1) * stripe_, total_);
    std::unique_lock<std::mutex> l(progress_mu_);
    progress_cv_.wait(l, [&] { return copied_ >= end || copy_failed_; });
    return copied_ >= end;
  };
  xxh3chunked::Hasher hasher;
  for (uint64_t c = w->index; c < units; c += nfiles_) {
    if (!wait_unit(c)) return;  // the copy failed: the drain is rolled back
    const uint64_t off = c * stripe_;
    std::vector<iovec> iov;
    for (const Piece& pc : PiecesOf(off, std::min<uint64_t>(stripe_, total_ - off))) {
      iov.push_back({pc.phys->host + pc.offset, pc.len});
      // Hashed here, in file order, paced by the disk: a separate hashing thread (measured
      // on the H100, 2026-11-25) competed with the copy and slowed the driver's lock.
      hasher.Update(pc.phys->host + pc.offset, pc.len);
    }
    std::string why;
    if (!io::WriteAll(w->fd, iov, static_cast<off_t>((c / nfiles_) * stripe_), &why)) {
      w->result = Result::Failed("file " + std::to_string(w->index) + ": " + why);
      return;
    }
  }
  w->sum = hasher.Finish();
}

Result Mover::Drain(const DrainOptions& opt, DrainResult* out) {
  if (state_ != State::kRunning) {
    return {std::string("the job's GPU memory is already out (") + StateName(state_) + ")", false};
  }
  if (opt.stripe_bytes == 0 || opt.stripe_bytes % xxh3chunked::kChunk != 0) {
    Unhold();
    return {"stripe_bytes must be a multiple of " + std::to_string(xxh3chunked::kChunk), true};
  }
  drains_++;
  const auto t0 = Clock::now();
  if (held_) {
    // Quiesced already, at the cut: the time held is not the drain's.
    held_ = false;
    out->quiesce_ms = held_quiesce_ms_;
  } else {
    Result q = Quiesce(opt.timeout, &out->quiesce_ms);
    if (!q.ok()) return q;
  }
  // From here on a failure takes back, newest first, what the steps before it did: the job's
  // memory back on the GPU and its gates open.
  UndoStack undo;
  undo.Push([this] { OpenGates(); });
  Plan();
  // Parked: the data stays on the GPU, in cryod's memory there, and nothing touches the memfd.
  const bool park = opt.memfd >= 0 && opt.park >= 0 && FitsPark(opt.park_device, opt.park_bytes);
  out->parked = false;
  in_memfd_ = opt.memfd >= 0;
  if (!park) {
    undo.Push([this] { FreeHost(); });
    if (Result r = MapHost(opt.memfd, true); !r.ok()) return std::move(r).RolledBack();
  }
  {
    std::lock_guard<std::mutex> l(progress_mu_);
    copied_ = 0;
    copy_failed_ = false;
  }
  // Followed by cryod: told how far the copy is, then whether it succeeded (bad, unless it did).
  struct Told {
    Mover* m;
    ~Told() {
      std::lock_guard<std::mutex> l(m->progress_mu_);
      if (!m->told_) return;
      m->told_.SetVerdictIfPending(contract::gpu_fastpath::kVerdictBad);
      ::munmap(m->told_.page(), contract::gpu_fastpath::kProgressBytes);
      m->told_ = {};
    }
  } told{this};
  if (opt.memfd >= 0 && opt.progress >= 0 && !park) {
    void* pg = ::mmap(nullptr, contract::gpu_fastpath::kProgressBytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED, opt.progress, 0);
    if (pg == MAP_FAILED) {
      return Result(std::string("mapping cryod's progress page: ") + std::strerror(errno), true);
    }
    std::lock_guard<std::mutex> l(progress_mu_);
    told_ = contract::gpu_fastpath::ProgressWords(pg);
  }
  undo.Push([this] { UnmapTemporaries(); });
  if (Result r = FindSources(); !r.ok()) return std::move(r).RolledBack();
  // Writers go beside the copy: each file's units are written as soon as they are in memory.
  stripe_ = opt.stripe_bytes;
  nfiles_ = static_cast<int>(opt.fds.size());
  save_start_ = Clock::now();
  writers_.clear();
  undo.Push([this] {
    StopWriters();
    writers_.clear();
  });
  StartWriters(opt.fds);
  undo.Push([this] { DestroyStreams(); });
  const auto t_copy = Clock::now();
  Result err = park ? CopyPark(opt.park, opt.park_bytes, /*out=*/true) : CopyOut(opt.threads);
  out->copy_ms = Ms(t_copy);
  if (!err.ok()) return std::move(err).RolledBack();
  if (park) {
    // Until FinishSave the drain's descriptor of the park stays open: a rollback copies back
    // from it.
    parked_ = true;
    park_fd_ = opt.park;
    park_bytes_ = opt.park_bytes;
    out->parked = true;
  }
  {
    // All of it is in cryod's memory: what cryod writes from here on is the job's.
    std::lock_guard<std::mutex> l(progress_mu_);
    if (told_) told_.SetVerdict(contract::gpu_fastpath::kVerdictGood);
  }
  DestroyStreams();
  // Device memory goes from here on: only a copy back from host memory takes that back (and
  // when even that fails, the gates open on whatever memory the job still has).
  bool back = false;
  undo.ReplaceAll([this, &back] {
    StopWriters();
    writers_.clear();
    back = RestoreFromHost();
    if (!back) OpenGates();
    parked_ = false;
    park_fd_ = -1;
  });
  const auto t_rel = Clock::now();
  // Exports first: the duplicates the library keeps would keep the memory alive.
  {
    std::lock_guard<std::mutex> l(reg_.mu());
    for (Phys* p : plan_) {
      for (Share& e : p->exports) {
        if (e.fd >= 0) ::close(e.fd);
        e.fd = -1;
      }
    }
  }
  err = Release();
  if (!err.ok()) {
    out->release_ms = Ms(t_rel);
    undo.Run();
    return std::move(err).RolledBack(back);
  }
  // Then what it imported: its data is its exporter's, who saves it.
  ReleaseImports();
  out->release_ms = Ms(t_rel);
  undo.Dismiss();
  state_ = State::kDrained;
  out->bytes = total_;
  out->allocations = plan_.size();
  out->total_ms = Ms(t0);
  return {};
}

Result Mover::FinishSave(SaveResult* out) {
  if (state_ != State::kDrained) return {"no drain to finish", false};
  StopWriters();
  Result err;
  for (auto& w : writers_) {
    if (err.ok() && !w->result.ok()) err = w->result;
    out->files.push_back(w->sum);
  }
  writers_.clear();
  out->write_ms = Ms(save_start_);
  if (!err.ok()) {
    const bool back = RestoreFromHost();
    return std::move(err).RolledBack(back);
  }
  if (nfiles_ > 0 || in_memfd_) {
    FreeHost();
    state_ = State::kSaved;
  }
  park_fd_ = -1;  // the caller closes it now: only the refill's brings the park back
  return {};
}

bool Mover::RollBackFromHost() {
  switch (state_.load()) {
    case State::kRunning:
      return true;
    case State::kSaved:
    case State::kImporting:
      return false;
    case State::kDrained:
      return RestoreFromHost();
  }
  return false;
}

bool Mover::Abort() {
  StopWriters();
  writers_.clear();
  return RollBackFromHost();
}

bool Mover::RestoreFromHost() {
  // Parked: from the park, while the drain still holds its descriptor.
  const bool from_park = parked_ && park_fd_ >= 0;
  for (Phys* p : plan_) {
    if (p->real == 0 && p->host == nullptr && !from_park) return false;
  }
  Result err = Recreate();
  if (err.ok()) err = from_park ? CopyPark(park_fd_, park_bytes_, false) : CopyInFromHost(4);
  DestroyStreams();
  UnmapTemporaries();
  if (!err.ok()) return false;
  BackToRunning();
  return state_ == State::kRunning;
}

void Mover::BackToRunning() {
  parked_ = false;
  park_fd_ = -1;
  DropUnheldReferences(d_, plan_);
  FreeHost();
  // Importers of this memory import it again from new descriptors (cryod carries them).
  if (Result r = ExportAgain(); !r.ok()) {
    Say(r.error);
  }
  plan_.clear();
  sources_.clear();
  if (ImportsPending()) {
    state_ = State::kImporting;  // its imports are not mapped: no work may run yet
    return;
  }
  state_ = State::kRunning;
  OpenGates();
}

Result Mover::ExportAgain() {
  std::lock_guard<std::mutex> l(reg_.mu());
  Result err;
  for (auto& [id, p] : reg_.phys()) {
    if (p->real == 0 || p->imported) continue;
    for (Share& e : p->exports) {
      if (e.fd >= 0) continue;
      int fd = -1;
      CUresult r = d_.cuMemExportToShareableHandle(&fd, p->real,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (r != CUDA_SUCCESS && err.ok()) err = Cuda(d_, "exporting device memory again", r);
      if (r == CUDA_SUCCESS) e.fd = fd;
    }
  }
  return err;
}

bool Mover::ImportsPending() {
  std::lock_guard<std::mutex> l(reg_.mu());
  for (auto& [id, p] : reg_.phys()) {
    if (p->imported && p->real == 0) return true;
  }
  return false;
}

void Mover::ReleaseImports() {
  std::lock_guard<std::mutex> l(reg_.mu());
  for (Phys* p : imports_) {
    for (auto& [va, m] : reg_.mappings()) {
      if (m.phys == p) d_.cuMemUnmap(va, m.size);
    }
    if (Registry::HoldsReference(*p)) d_.cuMemRelease(p->real);
    p->real = 0;
    if (p->import.fd >= 0) ::close(p->import.fd);
    p->import.fd = -1;
  }
}

Result Mover::Import(const std::map<uint64_t, int>& fds, int64_t* ms) {
  const auto t0 = Clock::now();
  if (state_ != State::kImporting) {
    return {std::string("nothing to import: the job is ") + StateName(state_), false};
  }
  std::lock_guard<std::mutex> l(reg_.mu());
  for (auto& [id, p] : reg_.phys()) {
    if (!p->imported || p->real != 0) continue;
    auto it = fds.find(p->import.id);
    if (it == fds.end()) {
      return {"no descriptor came for import " + std::to_string(p->import.id), false};
    }
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d_.cuMemImportFromShareableHandle(
        &h, reinterpret_cast<void*>(static_cast<intptr_t>(it->second)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) return Cuda(d_, "importing shared device memory again", r);
    p->real = h;
    p->import.fd = ::fcntl(it->second, F_DUPFD_CLOEXEC, 3);
    for (auto& [va, m] : reg_.mappings()) {
      if (m.phys != p.get()) continue;
      r = d_.cuMemMap(va, m.size, m.offset, h, 0);
      for (size_t i = 0; r == CUDA_SUCCESS && i < m.access.size(); ++i) {
        r = d_.cuMemSetAccess(va, m.size, m.access[i].data(), m.access[i].size());
      }
      if (r != CUDA_SUCCESS) return Cuda(d_, "mapping imported memory at its old address", r);
    }
    // The job had let go of its handle (its mappings kept the memory): so does the library.
    if (!Registry::HoldsReference(*p) && p->mappings > 0) d_.cuMemRelease(h);
  }
  *ms = Ms(t0);
  state_ = State::kRunning;
  OpenGates();
  return {};
}

Result Mover::Refill(const RefillOptions& opt, RefillResult* out) {
  const auto t0 = Clock::now();
  const State s = state_;
  if (s == State::kRunning) return {"nothing to refill: the job's GPU memory is in place", false};
  if (s == State::kImporting) return {};  // its own memory is back; its imports come next
  if (opt.filled && (opt.park < 0 || !FitsPark(opt.park_device, opt.park_bytes))) {
    return {"the data cryod read into GPU " + opt.park_device +
                " is not for this process's memory (its GPU or its size differ)",
            false};
  }
  if (s == State::kSaved && opt.fds.empty() && opt.memfd < 0 && !opt.filled) {
    return {"the job's GPU data is in the drain's files: they must be given", false};
  }
  // Parked: back from the park within the GPU, when the refill brings it; else from the memfd,
  // which cryod filled from the park (gpu_fastpath.h, "Parking").
  const int park_fd = opt.park >= 0 ? opt.park : (s == State::kDrained ? park_fd_ : -1);
  const uint64_t park_bytes = opt.park >= 0 ? opt.park_bytes : park_bytes_;
  const bool from_park = (parked_ || opt.filled) && park_fd >= 0;
  // From cryod's memfd: read as the host copy it was.
  const bool from_memfd = s == State::kSaved && opt.memfd >= 0 && !from_park;
  if (from_memfd) {
    if (Result r = MapHost(opt.memfd, false); !r.ok()) return r;
  }
  if (from_memfd && opt.progress >= 0) {
    void* pg = ::mmap(nullptr, contract::gpu_fastpath::kProgressBytes, PROT_READ, MAP_SHARED,
                      opt.progress, 0);
    if (pg == MAP_FAILED) {
      FreeHost();
      return {std::string("mapping cryod's progress page: ") + std::strerror(errno), false};
    }
    followed_ = contract::gpu_fastpath::ProgressWords(pg);
  }
  Result err = Recreate();
  out->allocate_ms = Ms(t0);
  const auto t_copy = Clock::now();
  if (err.ok()) {
    if (from_park) {
      err = CopyPark(park_fd, park_bytes, /*out=*/false);
    } else if (s == State::kDrained || from_memfd) {
      err = CopyInFromHost(opt.threads);
    } else {
      err = CopyInFromFiles(opt.fds, &out->files);
    }
  }
  // Every piece is on the GPU; the gate opens only on what cryod found when its read was done.
  if (err.ok() && followed_) err = WaitFollowed(total_, /*verdict=*/true);
  if (followed_) {
    ::munmap(followed_.page(), contract::gpu_fastpath::kProgressBytes);
    followed_ = {};
  }
  out->copy_ms = Ms(t_copy);
  DestroyStreams();
  UnmapTemporaries();
  if (from_memfd && !err.ok()) FreeHost();
  if (err.ok() && s == State::kSaved && !from_memfd) {
    if (!opt.expected.empty() && opt.expected.size() != out->files.size()) {
      err = Result::Failed("expected " + std::to_string(opt.expected.size()) + " files, got " +
                           std::to_string(out->files.size()));
    }
    for (size_t i = 0; err.ok() && i < opt.expected.size(); ++i) {
      if (opt.expected[i].size != out->files[i].size ||
          opt.expected[i].checksum != out->files[i].checksum) {
        err = Result::Failed(
            "file " + std::to_string(i) + " does not hold what the checkpoint recorded (size " +
                std::to_string(out->files[i].size) + ", checksum " + out->files[i].checksum +
                "; recorded " + std::to_string(opt.expected[i].size) + ", " +
                opt.expected[i].checksum + ")",
            ErrorCode::kDataLoss);
      }
    }
  }
  // A failed refill keeps the gate shut: the job must not run on memory that is not its own.
  if (!err.ok()) return err;
  out->bytes = total_;
  BackToRunning();
  out->total_ms = Ms(t0);
  return {};
}

}  // namespace cryo::fastpath
