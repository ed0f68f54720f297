#include "daemon/gpu/progress_page.h"

#include <sys/mman.h>
#include <unistd.h>

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
  p->words_ = wire::ProgressWords(m);
  return p;
}

ProgressPage::~ProgressPage() {
  if (words_) ::munmap(words_.page(), wire::kProgressBytes);
}

absl::Status ProgressPage::Waited(uint64_t end, bool until_verdict,
                                  const std::function<bool()>& stop) const {
  switch (words_.Wait(end, until_verdict, [&] { return stop && stop(); })) {
    case wire::ProgressWords::Waited::kDone:
      return absl::OkStatus();
    case wire::ProgressWords::Waited::kBad:
      return absl::FailedPreconditionError(
          absl::StrCat("the copy being followed failed after ", ready(), " bytes"));
    case wire::ProgressWords::Waited::kEndedShort:
      return absl::FailedPreconditionError(absl::StrCat("the copy being followed ended (verdict ",
                                                        verdict(), ") at ", ready(),
                                                        " bytes, short of ", end));
    case wire::ProgressWords::Waited::kStopped:
      break;
  }
  return absl::CancelledError("stopped while following a copy");
}

absl::Status ProgressPage::WaitReady(uint64_t end, const std::function<bool()>& stop) const {
  return Waited(end, /*verdict=*/false, stop);
}

absl::Status ProgressPage::WaitVerdict(const std::function<bool()>& stop) const {
  return Waited(0, /*verdict=*/true, stop);
}

}  // namespace cryo::gpu
