#include "daemon/fastpath/session.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/gpu/fastpath_client.h"
#include "daemon/gpu/host_copy.h"
#include "lib/base/log.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"
#include "lib/contract/gpu_fastpath.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::gpu {
namespace {

// What striping may add to a drain's bytes in its files (alignment of the last unit of each).
constexpr uint64_t kMaxStripeSlack = uint64_t{contract::gpu_fastpath::kMaxFiles} << 20;

// The device memory the GPU plugins saw a process use (NVML), 0 when unknown.
uint64_t UsedBytes(const std::vector<GpuProcess>& gpu, pid_t pid) {
  uint64_t used = 0;
  for (const auto& g : gpu) {
    if (g.pid != pid || !g.facts.is_object()) continue;
    auto it = g.facts.find("devices");
    if (it == g.facts.end() || !it->is_array()) continue;
    for (const auto& d : *it) {
      if (d.is_object() && d.contains("memory_used_bytes") &&
          d["memory_used_bytes"].is_number_unsigned()) {
        used += d["memory_used_bytes"].get<uint64_t>();
      }
    }
  }
  return used;
}

// A drain's files, written (by the library with direct I/O, or by cryod), made durable with
// their metadata when the store is, before the checkpoint that names them is published.
absl::Status SyncFiles(const std::vector<UniqueFd>& fds, bool durable) {
  if (!durable) return absl::OkStatus();
  for (const UniqueFd& fd : fds) {
    if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync of a fast-path file");
  }
  return absl::OkStatus();
}

}  // namespace

FastpathSession::FastpathSession(std::vector<FastpathProcess> procs)
    : records_(std::move(procs)), held_(records_.size()) {}

uint64_t FastpathSession::bytes() const {
  uint64_t b = 0;
  for (const auto& f : records_) b += f.bytes;
  return b;
}

bool FastpathSession::in_memory() const {
  return std::any_of(records_.begin(), records_.end(),
                     [](const FastpathProcess& f) { return f.memory; });
}

absl::StatusOr<size_t> FastpathSession::AllocateHostCopies(
    int threads, int host_copy_fs, HostCopyPool* pool,
    const std::function<absl::Status(uint64_t)>& fresh) {
  size_t pooled = 0;
  uint64_t rest = 0;
  // The largest first: a slot holds any of them, and a process that owns nothing (a job's
  // launcher under the library) needs none.
  std::vector<size_t> order(records_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return records_[a].bytes > records_[b].bytes; });
  for (size_t i : order) {
    const uint64_t bytes = records_[i].bytes;
    UniqueFd slot = pool != nullptr && bytes > 0 ? pool->Take(bytes) : UniqueFd();
    if (slot.ok()) {
      held_[i].host_copy = HostCopy(std::move(slot), pool, bytes);
      ++pooled;
    } else {
      rest += bytes;
    }
  }
  absl::Status st = rest > 0 ? fresh(rest) : absl::OkStatus();
  for (size_t i = 0; i < records_.size() && st.ok(); ++i) {
    if (held_[i].host_copy.ok()) continue;
    auto m = NewHostCopy(records_[i].bytes, threads, host_copy_fs);
    if (!m.ok()) {
      st = Annotate(m.status(), absl::StrCat("the GPU data of pid ", records_[i].pid));
    } else {
      held_[i].host_copy = HostCopy(*std::move(m), nullptr, 0);
    }
  }
  if (!st.ok()) {
    for (Held& h : held_) h.host_copy.ResetUnused();  // no library has seen them yet
    return st;
  }
  return pooled;
}

bool FastpathSession::has_host_copies() const {
  return !held_.empty() &&
         std::all_of(held_.begin(), held_.end(), [](const Held& h) { return h.host_copy.ok(); });
}

void FastpathSession::PlaceData(bool memory, int writers) {
  for (auto& f : records_) {
    f.memory = memory;
    f.files = memory ? 0 : writers;
  }
}

absl::Status FastpathSession::OpenDrainFiles(const std::string& dir) {
  for (size_t i = 0; i < records_.size(); ++i) {
    if (records_[i].memory || records_[i].files <= 0) continue;
    CRYO_ASSIGN_OR_RETURN(held_[i].files,
                          OpenFastpathFiles(dir, records_[i].ns_pid, records_[i].files, true));
  }
  return absl::OkStatus();
}

bool FastpathSession::FollowDrains() {
  std::vector<std::shared_ptr<const ProgressPage>> pages(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) {
    if (!records_[i].memory) continue;
    if (records_[i].version < contract::gpu_fastpath::kVersionFollow) return false;
    auto page = ProgressPage::Make();
    if (!page.ok()) return false;
    pages[i] = *std::move(page);
  }
  for (size_t i = 0; i < records_.size(); ++i) {
    held_[i].page = std::move(pages[i]);
    records_[i].follow = held_[i].page != nullptr;
  }
  return true;
}

size_t FastpathSession::StartParkers(const ParkerOptions& opt) {
  // All at once: each waits for its process's driver to start.
  std::atomic<size_t> parked{0};
  (void)EachInParallel(records_.size(), [&](size_t i) -> absl::Status {
    FastpathProcess& f = records_[i];
    if (f.bytes == 0 || !held_[i].host_copy.ok()) return absl::OkStatus();
    if (f.version < contract::gpu_fastpath::kVersionPark || f.device.empty()) {
      CRYO_LOG(Info) << "fast path of pid " << f.pid << ": not parked on its GPU ("
                     << (f.version < contract::gpu_fastpath::kVersionPark
                             ? "its library is older"
                             : "its memory is not all device memory of one GPU")
                     << "): drained into cryod's memory";
      return absl::OkStatus();
    }
    auto p = Parker::Start(opt, f.device, f.bytes);
    if (!p.ok()) {
      CRYO_LOG(Info) << "fast path of pid " << f.pid << ": no park on GPU " << f.device << " ("
                     << p.status().message() << "): drained into cryod's memory";
      return absl::OkStatus();
    }
    f.park = (*p)->bytes();
    held_[i].parker = *std::move(p);
    ++parked;
    return absl::OkStatus();
  });
  return parked;
}

absl::Status FastpathSession::BeginParkCopy(size_t i) {
  Held& h = held_[i];
  if (!records_[i].parked || h.parker == nullptr || h.parker->copying()) return absl::OkStatus();
  const std::string what = absl::StrCat("the park of pid ", records_[i].pid);
  // The write must follow the copy: it reads the host copy only where the page says.
  if (h.page == nullptr) {
    auto page = ProgressPage::Make();
    CRYO_RETURN_IF_ERROR(Annotate(page.status(), what));
    h.page = *std::move(page);
  }
  records_[i].follow = true;
  return Annotate(h.parker->BeginCopy(h.host_copy.get(), h.page, records_[i].bytes), what);
}

absl::Status FastpathSession::EndPark(size_t i) {
  Held& h = held_[i];
  if (h.parker == nullptr) return absl::OkStatus();
  absl::Status copied = h.parker->copying() ? h.parker->WaitCopied() : absl::OkStatus();
  h.parker.reset();
  return copied;
}

bool FastpathSession::CopyParkNow(size_t i) {
  if (!records_[i].parked || held_[i].parker == nullptr) return true;
  absl::Status st = BeginParkCopy(i);
  absl::Status copied = EndPark(i);
  if (st.ok()) st = copied;
  if (!st.ok()) {
    CRYO_LOG(Error) << "fast path of pid " << records_[i].pid << ": its park could not be copied "
                    << "into cryod's memory: " << st;
  }
  return st.ok();
}

absl::Status FastpathSession::BeginParkCopies() {
  for (size_t i = 0; i < records_.size(); ++i) CRYO_RETURN_IF_ERROR(BeginParkCopy(i));
  return absl::OkStatus();
}

std::vector<std::vector<int>> FastpathSession::DrainTargets() const {
  std::vector<std::vector<int>> out(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) {
    if (!records_[i].memory) {
      out[i] = Borrow(held_[i].files);
      continue;
    }
    out[i] = {held_[i].host_copy.get()};
    if (held_[i].parker != nullptr) {
      out[i].push_back(held_[i].parker->fd());  // (no page: gpu_fastpath.h, "Parking")
    } else if (records_[i].follow && held_[i].page) {
      out[i].push_back(held_[i].page->fd());
    }
  }
  return out;
}

void FastpathSession::TakeDrains(std::vector<std::unique_ptr<FastpathDrainHandle>> drains,
                                 const std::vector<GpuProcess>& gpu) {
  for (size_t i = 0; i < drains.size() && i < records_.size(); ++i) {
    if (drains[i] == nullptr) continue;
    FastpathProcess& f = records_[i];
    held_[i].drain = std::move(drains[i]);
    f.bytes = held_[i].drain->bytes();
    held_[i].host_copy.use(f.bytes);  // (the library may have grown it)
    f.allocations = held_[i].drain->allocations();
    const auto& d = held_[i].drain->drained();
    // Parked: the write will follow the parking process's copy into the host copy
    // (BeginParkCopies); not parked, the park is not needed.
    f.parked = d.parked && held_[i].parker != nullptr;
    if (!f.parked) {
      held_[i].parker.reset();  // its memory goes back to the GPU now
      f.park = 0;
    }
    CRYO_LOG(Info) << "fast path of pid " << f.pid << ": " << f.bytes << " bytes off the GPU in "
                   << d.total_ms << " ms (quiesce " << d.quiesce_ms << ", copy " << d.copy_ms
                   << ", release " << d.release_ms << ")"
                   << (f.parked   ? ", parked on its GPU"
                       : f.memory ? ", into cryod's memory"
                                  : "");
    const uint64_t used = UsedBytes(gpu, f.pid);
    f.driver_bytes = used > f.bytes ? used - f.bytes : 0;
  }
}

absl::Status FastpathSession::CheckSaved(size_t i, bool durable) {
  const FastpathProcess& f = records_[i];
  Held& h = held_[i];
  if (h.drain == nullptr) {
    return absl::InternalError(absl::StrCat("no drain of pid ", f.pid, " to wait for"));
  }
  CRYO_ASSIGN_OR_RETURN(h.digests, h.drain->WaitSaved());
  // Into cryod's memory: "saved" says the job holds no copy (CRIU dumps next); gpu_write
  // writes the files after the refill.
  if (f.memory) return absl::OkStatus();
  if (h.digests.size() != h.files.size()) {
    return absl::InternalError(absl::StrCat("the fast path of pid ", f.pid, " wrote ",
                                            h.digests.size(), " files, not ", h.files.size()));
  }
  // What the job says it wrote is checked against what the files hold: a job (or whoever
  // answers for it) cannot have a size published that the files do not have.
  uint64_t total = 0;
  for (size_t k = 0; k < h.digests.size(); ++k) {
    struct stat st;
    if (::fstat(h.files[k].get(), &st) != 0) return ErrnoStatus(errno, "fstat");
    const uint64_t claimed = h.digests[k].size;
    if (static_cast<uint64_t>(st.st_size) != claimed) {
      return absl::DataLossError(absl::StrCat("the fast path of pid ", f.pid, " says its file ", k,
                                              " holds ", claimed, " bytes; it holds ", st.st_size));
    }
    total += claimed;
  }
  if (total < f.bytes || total - f.bytes > kMaxStripeSlack) {
    return absl::DataLossError(absl::StrCat("the fast path of pid ", f.pid, " drained ", f.bytes,
                                            " bytes but its files hold ", total));
  }
  CRYO_RETURN_IF_ERROR(SyncFiles(h.files, durable));
  h.files.clear();
  return absl::OkStatus();
}

absl::Status FastpathSession::WaitSaved(bool durable) {
  CRYO_RETURN_IF_ERROR(FirstError(
      EachInParallel(records_.size(), [&](size_t i) { return CheckSaved(i, durable); })));
  for (size_t i = 0; i < records_.size(); ++i) List(i);
  return absl::OkStatus();
}

void FastpathSession::List(size_t i) {
  Held& h = held_[i];
  h.listed.clear();
  for (size_t k = 0; k < h.digests.size(); ++k) {
    h.listed.push_back({FastpathFileName(records_[i].ns_pid, static_cast<int>(k)),
                        h.digests[k].size, h.digests[k].checksum});
  }
}

absl::StatusOr<FastpathSession::Sources> FastpathSession::RefillSources(
    const std::string& dir) const {
  Sources s;
  s.files.resize(records_.size());
  s.expected.resize(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) {
    const FastpathProcess& f = records_[i];
    if (f.memory) {
      // From cryod's memory, at host memory speed (the library is given its own descriptor),
      // or from its park within the GPU.
      UniqueFd m(::dup(held_[i].host_copy.get()));
      if (!m.ok()) return ErrnoStatus(errno, "dup of cryod's host memory");
      s.files[i].push_back(std::move(m));
      if (f.parked && held_[i].parker != nullptr) {
        UniqueFd park(::dup(held_[i].parker->fd()));
        if (!park.ok()) return ErrnoStatus(errno, "dup of a park's descriptor");
        s.files[i].push_back(std::move(park));
      }
      continue;
    }
    s.expected[i] = held_[i].digests;
    if (f.files == 0) continue;
    CRYO_ASSIGN_OR_RETURN(s.files[i], OpenFastpathFiles(dir, f.ns_pid, f.files, false));
  }
  return s;
}

// What a write of the host copies needs, held apart from the session (which may move while a
// write begun early runs).
struct FastpathSession::Pending {
  struct Copy {
    int memfd = -1;  // -1: this process's data is not in cryod's memory
    uint64_t bytes = 0;
    pid_t pid = 0, ns_pid = 0;
    std::shared_ptr<const ProgressPage> page;  // its drain's, when the write follows it
  };
  std::vector<Copy> copies;
  std::string dir;
  int writers = 1;
  bool durable = false;
  std::optional<store::Manifest> prev;
  std::map<std::string, const store::ManifestFile*> prev_files;  // into prev
  std::function<bool()> stop;
  std::atomic<bool> cancel{false};
  std::future<absl::StatusOr<Written>> result;
};

FastpathSession::FastpathSession() = default;
FastpathSession::FastpathSession(FastpathSession&&) noexcept = default;
FastpathSession& FastpathSession::operator=(FastpathSession&& o) noexcept {
  if (this != &o) {
    EndPending(/*cancel=*/true);
    pending_ = std::move(o.pending_);
    records_ = std::move(o.records_);
    held_ = std::move(o.held_);
  }
  return *this;
}

FastpathSession::~FastpathSession() { EndPending(/*cancel=*/true); }

void FastpathSession::EndPending(bool cancel) {
  if (pending_ == nullptr) return;
  if (cancel) pending_->cancel = true;
  if (pending_->result.valid()) pending_->result.wait();
  pending_.reset();
}

absl::StatusOr<FastpathSession::Written> FastpathSession::WriteFiles(
    const Pending& p, const std::function<void(pid_t, uint64_t)>& written) {
  Written out(p.copies.size());
  auto stop = [&p] { return p.cancel.load() || (p.stop && p.stop()); };
  CRYO_RETURN_IF_ERROR(FirstError(EachInParallel(p.copies.size(), [&](size_t i) -> absl::Status {
    const Pending::Copy& c = p.copies[i];
    if (c.memfd < 0) return absl::OkStatus();
    std::vector<ChunkDigests> previous(p.writers);
    for (int k = 0; k < p.writers; ++k) {
      auto it = p.prev_files.find(FastpathFileName(c.ns_pid, k));
      if (it != p.prev_files.end()) previous[k] = {it->second->size, it->second->chunks};
    }
    CRYO_ASSIGN_OR_RETURN(std::vector<UniqueFd> fds,
                          OpenFastpathFiles(p.dir, c.ns_pid, p.writers, true));
    // Behind a drain still copying: each chunk once the library says it is there, and the
    // files kept only if the drain then says it succeeded.
    std::function<absl::Status(uint64_t)> ready;
    if (c.page) ready = [&](uint64_t end) { return c.page->WaitReady(end, stop); };
    CRYO_ASSIGN_OR_RETURN(out[i], WriteHostCopy(c.memfd, c.bytes, kFastpathStripeBytes, Borrow(fds),
                                                previous, stop, ready));
    if (c.page) CRYO_RETURN_IF_ERROR(c.page->WaitVerdict(stop));
    CRYO_RETURN_IF_ERROR(SyncFiles(fds, p.durable));
    if (written) written(c.pid, c.bytes);
    return absl::OkStatus();
  })));
  return out;
}

std::unique_ptr<FastpathSession::Pending> FastpathSession::NewPending(
    const std::string& dir, int writers, const store::Manifest* prev, bool durable,
    std::function<bool()> stop) const {
  auto p = std::make_unique<Pending>();
  for (size_t i = 0; i < records_.size(); ++i) {
    const FastpathProcess& f = records_[i];
    p->copies.push_back({f.memory ? held_[i].host_copy.get() : -1, f.bytes, f.pid, f.ns_pid,
                         f.memory && f.follow ? held_[i].page : nullptr});
  }
  p->dir = dir;
  p->writers = std::max(1, writers);
  p->durable = durable;
  if (prev != nullptr) p->prev = *prev;
  if (p->prev) {
    for (const auto& mf : p->prev->files) {
      if (!mf.chunks.empty()) p->prev_files[mf.path] = &mf;
    }
  }
  p->stop = std::move(stop);
  return p;
}

void FastpathSession::BeginWrite(const std::string& dir, int writers, const store::Manifest* prev,
                                 bool durable, std::function<bool()> stop) {
  EndPending(/*cancel=*/true);
  pending_ = NewPending(dir, writers, prev, durable, std::move(stop));
  const Pending* raw = pending_.get();
  pending_->result = std::async(std::launch::async, [raw] {
    // Below the drain, the driver's checkpoint and CRIU's dump, which it runs beside (written
    // beside the driver's checkpoint at the same priority, it made that 0.4-0.5 s slower); its
    // writers inherit this.
    NiceThisThread(10);
    return WriteFiles(*raw, nullptr);
  });
}

absl::StatusOr<uint64_t> FastpathSession::WriteHostCopies(
    const std::string& dir, int writers, const store::Manifest* prev, bool durable,
    const std::function<bool()>& stop, const std::function<void(pid_t, uint64_t)>& written) {
  // Begun early (the progress then comes at once), or written now.
  std::unique_ptr<Pending> p = std::move(pending_);
  absl::StatusOr<Written> got;
  if (p != nullptr) {
    got = p->result.get();
    for (const auto& c : p->copies) {
      if (got.ok() && written && c.memfd >= 0) written(c.pid, c.bytes);
    }
  } else {
    p = NewPending(dir, writers, prev, durable, stop);
    got = WriteFiles(*p, written);
  }
  // The parks, copied (the write followed them), go back to their GPUs.
  for (size_t i = 0; i < records_.size(); ++i) {
    absl::Status copied = EndPark(i);
    if (got.ok() && !copied.ok()) got = copied;
  }
  CRYO_RETURN_IF_ERROR(got.status());
  const Written& out = *got;
  uint64_t referenced = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    FastpathProcess& f = records_[i];
    if (!f.memory) continue;
    f.memory = false;
    f.follow = false;
    f.parked = false;
    f.park = 0;
    f.files = p->writers;
    held_[i].digests.clear();
    for (const auto& wf : out[i]) held_[i].digests.push_back(wf.digest);
    held_[i].host_copy.reset();  // the memory goes back to the node, or to the pool
    List(i);
    for (size_t k = 0; k < out[i].size(); ++k) {
      store::ManifestFile& mf = held_[i].listed[k];
      mf.chunks = out[i][k].chunks.chunks;
      auto pit = p->prev_files.find(mf.path);
      const store::ManifestFile* pf = pit != p->prev_files.end() ? pit->second : nullptr;
      for (uint32_t j : out[i][k].skipped) {
        // Where the previous checkpoint refers on, so does this one: to the holder.
        std::string holder = p->prev->id;
        for (const auto& [id, list] : pf->refs) {
          if (std::find(list.begin(), list.end(), j) != list.end()) holder = id;
        }
        mf.refs[holder].push_back(j);
      }
      referenced += mf.ReferencedBytes();
    }
  }
  return referenced;
}

std::vector<store::ManifestFile> FastpathSession::ManifestFiles() const {
  std::vector<store::ManifestFile> out;
  for (const Held& h : held_) out.insert(out.end(), h.listed.begin(), h.listed.end());
  return out;
}

std::vector<int> FastpathSession::Settle(const std::function<bool()>& hard_stop) {
  EndPending(/*cancel=*/true);  // its files go with the checkpoint's staging
  std::vector<int> host_copies;
  for (Held& h : held_) {
    // A drain still writing its files is finished first: the library then is in a state a
    // refill knows (its memory in its own memory, or in the files).
    if (h.drain != nullptr) {
      // Its failure is the refill's to meet: the files it reads are checked by their digests.
      (void)h.drain->WaitSaved(/*stoppable=*/false, hard_stop);
    }
    h.drain.reset();
    h.files.clear();
    // Parked: the refill that undoes comes from the host copy, once the park is in it; a park
    // that cannot be copied leaves none (the process's data is lost, as with cryod's memory).
    const bool held = CopyParkNow(host_copies.size());
    host_copies.push_back(held ? h.host_copy.get() : -1);
  }
  return host_copies;
}

}  // namespace cryo::gpu
