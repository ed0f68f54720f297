#include "daemon/engine/gpu_prefetch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"
#include "lib/contract/gpu_fastpath.h"

namespace cryo::engine {
namespace {
constexpr int kReaderNice = 10;
// How long a slot being zeroed is waited for. Zeroing 32 GiB took 0.7-0.9 s on an H200 host;
// without a slot the library reads the files itself, and its 32 GiB refill took 4.6 s there
// against 1.9-2.0 s behind the read ahead (two H200s, 2026-11-30).
constexpr absl::Duration kSlotWait = absl::Seconds(3);
}  // namespace

absl::StatusOr<std::unique_ptr<GpuPrefetch>> GpuPrefetch::Start(gpu::HostCopyPool& pool,
                                                                std::vector<Process> procs,
                                                                std::vector<UniqueFd> open,
                                                                uint64_t stripe) {
  std::unique_ptr<GpuPrefetch> p(new GpuPrefetch());
  p->copies_.resize(procs.size());
  int wanted = 0, taken = 0;
  for (size_t i = 0; i < procs.size(); ++i) {
    if (procs[i].bytes == 0) continue;
    ++wanted;
    UniqueFd slot = pool.Take(procs[i].bytes, kSlotWait, "a restore");
    if (!slot.ok()) continue;
    ++taken;
    p->copies_[i] = gpu::HostCopy(std::move(slot), &pool, procs[i].bytes);
    p->bytes_ += procs[i].bytes;
  }
  if (taken < wanted || wanted == 0) {
    for (auto& c : p->copies_) c.ResetUnused();  // nothing was read into them
    return absl::FailedPreconditionError(absl::StrCat("the staging memory has a ready slot for ",
                                                      taken, " of the ", wanted,
                                                      " processes with GPU data"));
  }
  p->pages_ = std::vector<Page>(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    if (procs[i].bytes == 0) continue;
    auto page = gpu::ProgressPage::Make();
    if (!page.ok()) {
      for (auto& c : p->copies_) c.ResetUnused();
      return page.status();
    }
    p->pages_[i].page = *std::move(page);
    p->pages_[i].next.reset(new std::atomic<uint64_t>[procs[i].files.size()]);
    for (size_t k = 0; k < procs[i].files.size(); ++k) p->pages_[i].next[k] = 0;
  }
  p->procs_ = std::move(procs);
  p->open_ = std::move(open);
  p->thread_ = std::thread([q = p.get(), stripe] {
    namespace wire = contract::gpu_fastpath;
    // Below CRIU and the driver, which restore the job meanwhile on the same cores (CRIU took
    // 1.1 s instead of 0.45 beside 16 readers on 16 cores, one H200 host, 2026-11-30); the
    // readers it starts inherit this.
    NiceThisThread(kReaderNice);
    const absl::Time t0 = absl::Now();
    q->status_ = FirstError(EachInParallel(q->procs_.size(), [&](size_t i) -> absl::Status {
      const Process& pr = q->procs_[i];
      if (pr.bytes == 0) return absl::OkStatus();
      absl::Status st =
          gpu::ReadHostCopy(q->copies_[i].get(), pr.bytes, stripe, pr.files,
                            [&](size_t k, uint64_t read) { q->Advance(i, k, read, stripe); });
      q->pages_[i].page->SetVerdict(st.ok() ? wire::kVerdictGood : wire::kVerdictBad);
      return st;
    }));
    q->read_time_ = absl::Now() - t0;
  });
  return p;
}

void GpuPrefetch::Advance(size_t i, size_t k, uint64_t read, uint64_t stripe) {
  Page& pg = pages_[i];
  pg.next[k].store(read, std::memory_order_release);
  const uint64_t ready =
      gpu::StreamBytesRead([&](size_t j) { return pg.next[j].load(std::memory_order_acquire); },
                           procs_[i].files.size(), stripe, procs_[i].bytes);
  pg.page->Raise(ready);  // readers race to raise it: it only ever goes up
}

absl::Status GpuPrefetch::Wait() {
  if (thread_.joinable()) thread_.join();
  open_.clear();
  return status_;
}

GpuPrefetch::~GpuPrefetch() { (void)Wait(); }

}  // namespace cryo::engine
