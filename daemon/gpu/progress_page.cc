#include "daemon/gpu/progress_page.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/contract/gpu_fastpath.h"

namespace cryo::gpu {
namespace wire = contract::gpu_fastpath;

absl::StatusOr<std::unique_ptr<ProgressPage>> ProgressPage::Make() {
  std::unique_ptr<ProgressPage> p(new ProgressPage());
  p->fd_ = UniqueFd(::memfd_create("cryo-progress", MFD_CLOEXEC));
  if (!p->fd_.ok() || ::ftruncate(p->fd_.get(), wire::kProgressBytes) != 0) {
    return ErrnoStatus(errno, "a progress page");
  }
  void* m =
      ::mmap(nullptr, wire::kProgressBytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd_.get(), 0);
  if (m == MAP_FAILED) return ErrnoStatus(errno, "mapping a progress page");
  p->words_ = static_cast<uint64_t*>(m);
  return p;
}

ProgressPage::~ProgressPage() {
  if (words_ != nullptr) ::munmap(words_, wire::kProgressBytes);
}

uint64_t ProgressPage::ready() const {
  return __atomic_load_n(words_ + wire::kProgressReadyOffset / 8, __ATOMIC_ACQUIRE);
}

uint64_t ProgressPage::verdict() const {
  return __atomic_load_n(words_ + wire::kProgressVerdictOffset / 8, __ATOMIC_ACQUIRE);
}

void ProgressPage::Raise(uint64_t bytes) {
  uint64_t* word = words_ + wire::kProgressReadyOffset / 8;
  uint64_t cur = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  while (cur < bytes && !__atomic_compare_exchange_n(word, &cur, bytes, false, __ATOMIC_RELEASE,
                                                     __ATOMIC_ACQUIRE)) {
  }
}

void ProgressPage::SetVerdict(uint64_t v) {
  __atomic_store_n(words_ + wire::kProgressVerdictOffset / 8, v, __ATOMIC_RELEASE);
}

absl::Status ProgressPage::WaitReady(uint64_t end, const std::function<bool()>& stop) const {
  for (;;) {
    // The verdict first: a good one comes after the last "ready", which is then final.
    const uint64_t v = verdict();
    const uint64_t r = ready();
    if (r >= end) return absl::OkStatus();
    if (v == wire::kVerdictBad) {
      return absl::FailedPreconditionError(
          absl::StrCat("the copy being followed failed after ", r, " bytes"));
    }
    if (v != wire::kVerdictPending) {
      return absl::FailedPreconditionError(absl::StrCat("the copy being followed ended (verdict ",
                                                        v, ") at ", r, " bytes, short of ", end));
    }
    if (stop && stop()) return absl::CancelledError("stopped while following a copy");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

absl::Status ProgressPage::WaitVerdict(const std::function<bool()>& stop) const {
  for (;;) {
    const uint64_t v = verdict();
    if (v == wire::kVerdictGood) return absl::OkStatus();
    if (v != wire::kVerdictPending) {
      return absl::FailedPreconditionError(
          absl::StrCat("the copy being followed failed after ", ready(), " bytes"));
    }
    if (stop && stop()) return absl::CancelledError("stopped while following a copy");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace cryo::gpu
