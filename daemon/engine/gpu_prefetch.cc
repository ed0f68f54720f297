#include "daemon/engine/gpu_prefetch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/parallel.h"

namespace cryo::engine {

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
    UniqueFd slot = pool.Take(procs[i].bytes);
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
  p->procs_ = std::move(procs);
  p->open_ = std::move(open);
  p->thread_ = std::thread([q = p.get(), stripe] {
    const absl::Time t0 = absl::Now();
    q->status_ = FirstError(EachInParallel(q->procs_.size(), [&](size_t i) -> absl::Status {
      const Process& pr = q->procs_[i];
      if (pr.bytes == 0) return absl::OkStatus();
      return gpu::ReadHostCopy(q->copies_[i].get(), pr.bytes, stripe, pr.files);
    }));
    q->read_time_ = absl::Now() - t0;
  });
  return p;
}

absl::Status GpuPrefetch::Wait() {
  if (thread_.joinable()) thread_.join();
  open_.clear();
  return status_;
}

GpuPrefetch::~GpuPrefetch() { (void)Wait(); }

}  // namespace cryo::engine
