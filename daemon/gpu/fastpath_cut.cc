#include "daemon/gpu/fastpath_cut.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/gpu/attempts.h"
#include "lib/base/log.h"
#include "lib/base/parallel.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::gpu {

absl::Status DrainTogether(Fastpath& fp, const std::vector<FastpathProcess>& procs,
                           const FastpathDrainOptions& opt,
                           const std::vector<std::vector<int>>& files,
                           std::vector<std::unique_ptr<FastpathDrainHandle>>* out) {
  const size_t n = procs.size();
  out->clear();
  out->resize(n);
  auto files_of = [&](size_t i) -> const std::vector<int>& {
    static const std::vector<int> kNone;
    return i < files.size() ? files[i] : kNone;
  };
  const bool cut = n > 1 && std::all_of(procs.begin(), procs.end(), [](const FastpathProcess& p) {
                     return p.version >= contract::gpu_fastpath::kVersionCut;
                   });
  if (!cut) {
    if (n > 1) {
      CRYO_LOG(Warning) << "a process of this job runs a GPU fast-path library older than version "
                        << contract::gpu_fastpath::kVersionCut << ": its " << n
                        << " processes are drained one by one, not at one cut";
    }
    return FirstError(EachInParallel(n, [&](size_t i) -> absl::Status {
      auto d = fp.Drain(procs[i], opt, files_of(i));
      if (!d.ok()) return d.status();
      (*out)[i] = std::move(*d);
      return absl::OkStatus();
    }));
  }
  // Held at the cut, every one of them; only then does any move memory.
  std::vector<std::unique_ptr<FastpathDrainHandle>> held(n);
  auto attempt = [&](absl::Duration bound) -> Attempt {
    FastpathDrainOptions o = opt;
    o.quiesce_timeout = bound;
    // The hold outlasts the other processes' quiesce and the replies on their way.
    o.hold = bound + absl::Seconds(30);
    std::vector<absl::Status> st = EachInParallel(n, [&](size_t i) -> absl::Status {
      auto d = fp.Drain(procs[i], o, files_of(i));
      if (!d.ok()) return d.status();
      held[i] = std::move(*d);
      return absl::OkStatus();
    });
    absl::Status first = FirstError(st);
    if (first.ok()) return {first, false};
    // Let every held one go (closing its channel opens its gate) before anything else.
    for (auto& h : held) h.reset();
    const bool only_busy = std::all_of(st.begin(), st.end(), [](const absl::Status& s) {
      return s.ok() || absl::IsDeadlineExceeded(s);
    });
    return {first, only_busy};
  };
  int attempts = 0;
  absl::Status st = InAttempts(opt.quiesce_timeout,
                               absl::StrCat("stop the GPU work of the job's ", n, " processes"),
                               attempt, &attempts);
  if (!st.ok()) return st;
  if (attempts > 1) {
    CRYO_LOG(Info) << "GPU fast path: the job's " << n << " processes held at one cut at attempt "
                   << attempts;
  }
  // All are at the cut: now each drains. A failure leaves the ones that drained to the caller.
  std::vector<absl::Status> went = EachInParallel(n, [&](size_t i) { return held[i]->Go(); });
  for (size_t i = 0; i < n; ++i) {
    if (went[i].ok()) (*out)[i] = std::move(held[i]);
  }
  return FirstError(went);
}

}  // namespace cryo::gpu
