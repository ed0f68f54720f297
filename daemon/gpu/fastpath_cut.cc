#include "daemon/gpu/fastpath_cut.h"

#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/gpu/attempts.h"
#include "lib/base/log.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::gpu {

namespace {

// Whether fd_a of pid a and fd_b of pid b are one open file.
bool SameFile(pid_t a, int64_t fd_a, pid_t b, int64_t fd_b, std::string* err) {
  long r = ::syscall(SYS_kcmp, a, b, KCMP_FILE, static_cast<unsigned long>(fd_a),
                     static_cast<unsigned long>(fd_b));
  if (r < 0 && err->empty()) *err = absl::StrCat("kcmp: ", strerror(errno));
  return r == 0;
}

// Who exported what each held process imported; procs[i].imports filled.
absl::Status MatchShares(std::vector<FastpathProcess>& procs,
                         const std::vector<std::unique_ptr<FastpathDrainHandle>>& held) {
  for (size_t i = 0; i < procs.size(); ++i) {
    const auto& q = held[i]->quiesced();
    if (q.foreign_shares > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pid ", procs[i].pid, " shares ", q.foreign_shares,
          " GPU allocations with other processes in a way cryo cannot carry (not as POSIX "
          "descriptors: fabric handles, legacy CUDA IPC handles the driver made for memory the "
          "fast path does not own, such as a cudaMalloc below ",
          contract::gpu_fastpath::kEnvMinBytes,
          ", or imports of another kind; docs/gpu.md, \"Multi-GPU jobs\"). Nothing was stopped"));
    }
    procs[i].imports.clear();
    for (const auto& imp : q.imports) {
      std::string err;
      bool found = false;
      for (size_t j = 0; j < procs.size() && !found; ++j) {
        if (j == i) continue;
        for (const auto& e : held[j]->quiesced().exports) {
          if (e.fd >= 0 && imp.fd >= 0 &&
              SameFile(procs[i].pid, imp.fd, procs[j].pid, e.fd, &err)) {
            procs[i].imports.push_back({imp.id, procs[j].ns_pid, e.id});
            found = true;
            break;
          }
        }
      }
      if (!found) {
        return absl::FailedPreconditionError(absl::StrCat(
            "pid ", procs[i].pid,
            " maps GPU memory exported by a process that is not part of this job",
            err.empty() ? "" : absl::StrCat(" (", err, ")"),
            ": cryo can only carry memory the job's own processes share. Nothing was stopped"));
      }
    }
    // A restore brings the new descriptors in one message up to version 3 of the library.
    const size_t most = static_cast<size_t>(contract::gpu_fastpath::kMaxFiles);
    if (procs[i].imports.size() > most &&
        procs[i].version < contract::gpu_fastpath::kVersionBatchedGo) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pid ", procs[i].pid, " imported ", procs[i].imports.size(),
          " GPU allocations from other processes of the job, and its GPU fast-path library "
          "(version ",
          procs[i].version, ") takes back at most ", most,
          " at a restore: start the job with this node's library (version ",
          contract::gpu_fastpath::kVersionBatchedGo, " or later). Nothing was stopped"));
    }
  }
  return absl::OkStatus();
}

// A descriptor of another process, as cryod's own (-1 and *err on failure).
int TakeFd(pid_t pid, int64_t fd, std::string* err) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    *err = absl::StrCat("pidfd_open(", pid, "): ", strerror(errno));
    return -1;
  }
  int got = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, static_cast<int>(fd), 0));
  if (got < 0) *err = absl::StrCat("pidfd_getfd(", pid, ", ", fd, "): ", strerror(errno));
  ::close(pidfd);
  return got;
}

}  // namespace

CutWord Combine(const CutWord& a, const CutWord& b) {
  CutWord c;
  c.collectives = std::max(a.collectives, b.collectives);
  const CutWord& worse = b.outcome > a.outcome ? b : a;
  c.outcome = worse.outcome;
  c.why = worse.why;
  return c;
}

namespace {

// This call's word from its processes' statuses: failed if any failed for a reason other than
// its work still running, busy if some only ran on.
CutWord WordOf(const std::vector<absl::Status>& st) {
  CutWord w;
  for (const auto& s : st) {
    if (s.ok()) continue;
    const CutWord::Outcome o = absl::IsDeadlineExceeded(s) ? CutWord::kBusy : CutWord::kFailed;
    if (o > w.outcome) {
      w.outcome = o;
      w.why = std::string(s.message());
    }
  }
  return w;
}

// The files of process `i` (none where the caller gave fewer lists).
const std::vector<int>& FilesOf(const std::vector<std::vector<int>>& files, size_t i) {
  static const std::vector<int> kNone;
  return i < files.size() ? files[i] : kNone;
}

// Processes whose library predates the cut: each drained on its own, as it comes.
absl::Status DrainOneByOne(Fastpath& fp, std::vector<FastpathProcess>& procs,
                           const FastpathDrainOptions& opt,
                           const std::vector<std::vector<int>>& files,
                           std::vector<std::unique_ptr<FastpathDrainHandle>>* out,
                           CutParties* others) {
  const size_t n = procs.size();
  if (n > 1 || others != nullptr) {
    CRYO_LOG(Warning) << "a process of this job runs a GPU fast-path library older than version "
                      << contract::gpu_fastpath::kVersionCut << ": its " << n
                      << " processes are drained one by one, not at one cut"
                      << (others != nullptr ? " (nor at the cut of the job's other members)" : "");
  }
  if (others != nullptr) others->Leave();
  return FirstError(EachInParallel(n, [&](size_t i) -> absl::Status {
    auto d = fp.Drain(procs[i], opt, FilesOf(files, i));
    if (!d.ok()) return d.status();
    (*out)[i] = std::move(*d);
    return absl::OkStatus();
  }));
}

}  // namespace

absl::Status DrainTogether(Fastpath& fp, std::vector<FastpathProcess>& procs,
                           const FastpathDrainOptions& opt,
                           const std::vector<std::vector<int>>& files,
                           std::vector<std::unique_ptr<FastpathDrainHandle>>* out,
                           CutParties* others) {
  const size_t n = procs.size();
  out->clear();
  out->resize(n);
  auto files_of = [&](size_t i) -> const std::vector<int>& { return FilesOf(files, i); };
  const bool cut = n > 0 && std::all_of(procs.begin(), procs.end(), [](const FastpathProcess& p) {
                     return p.version >= contract::gpu_fastpath::kVersionCut;
                   });
  if (!cut) {
    return DrainOneByOne(fp, procs, opt, files, out, others);
  }
  // Held at the cut, every one of them; only then does any move memory.
  std::vector<std::unique_ptr<FastpathDrainHandle>> held(n);
  int tries = 0;
  // Every held one lets go (closing its channel opens its gate).
  auto release = [&] {
    for (auto& h : held) h.reset();
  };
  // The other parties' word in `round` (with this call's), or what ends the attempt: this
  // call's own failure first, else theirs (retried when all only ran on).
  auto meet = [&](int round, std::vector<absl::Status>& st, uint64_t collectives,
                  uint64_t* to) -> std::optional<Attempt> {
    CutWord mine = WordOf(st);
    mine.collectives = collectives;
    if (others == nullptr) {
      if (mine.outcome == CutWord::kOk) return std::nullopt;
    } else {
      auto all = others->Meet(round, mine);
      if (!all.ok()) {
        release();
        return Attempt{all.status(), false};
      }
      if (all->outcome == CutWord::kOk) {
        *to = all->collectives;
        return std::nullopt;
      }
      if (mine.outcome == CutWord::kOk) {
        release();
        return Attempt{
            all->outcome == CutWord::kBusy
                ? absl::DeadlineExceededError(
                      absl::StrCat("another member of the job could not stop: ", all->why))
                : absl::AbortedError(absl::StrCat("another member of the job failed: ", all->why)),
            all->outcome == CutWord::kBusy};
      }
      mine.outcome = std::max(mine.outcome, all->outcome);
    }
    release();
    return Attempt{FirstError(st), mine.outcome == CutWord::kBusy};
  };
  auto attempt = [&](absl::Duration bound) -> Attempt {
    FastpathDrainOptions o = opt;
    o.quiesce_timeout = bound;
    // The hold outlasts the other processes' quiesce and the replies on their way.
    o.hold = bound + absl::Seconds(30);
    // Ranks are stopped after the same NCCL collective: the gates shut on all, each says how
    // many it launched, and each runs on to the most any launched before it synchronizes (a
    // rank ahead waits on its peers' matching launches, which the others then make). Jobs whose
    // ranks launch different numbers (several process groups, pipeline stages) may never align:
    // every other attempt stops them where they are instead, as the lock does.
    o.align = (++tries % 2) == 1;
    const int round = 2 * (tries - 1);
    std::vector<absl::Status> st = EachInParallel(n, [&](size_t i) -> absl::Status {
      auto d = fp.Drain(procs[i], o, files_of(i));
      if (!d.ok()) return d.status();
      held[i] = std::move(*d);
      return absl::OkStatus();
    });
    uint64_t to = 0;
    if (o.align && FirstError(st).ok()) {
      for (const auto& h : held) to = std::max(to, h->gated().collectives);
    }
    // Gated: the target is the most any rank of the job launched, on every member.
    if (auto end = meet(round, st, to, &to)) return *end;
    if (o.align) {
      // A process that launched none is no rank (a launcher, a data loader): not aligned.
      st = EachInParallel(n, [&](size_t i) {
        return held[i]->Align(held[i]->gated().collectives == 0 ? 0 : to, bound);
      });
    }
    // What the processes share is known once they are held, and checked before any goes.
    if (FirstError(st).ok()) {
      if (absl::Status m = MatchShares(procs, held); !m.ok()) st.assign(1, m);
    }
    uint64_t unused = 0;
    if (auto end = meet(round + 1, st, 0, &unused)) return *end;
    return {absl::OkStatus(), false};
  };
  int attempts = 0;
  absl::Status st = InAttempts(opt.quiesce_timeout,
                               absl::StrCat("stop the GPU work of the job's ", n, " processes"),
                               attempt, &attempts);
  if (!st.ok()) {
    if (others != nullptr) others->Fail(st);
    return st;
  }
  if (others != nullptr) {
    CRYO_LOG(Info) << "GPU fast path: the job's " << n << " process(es) here held at one cut with "
                   << "the job's other members at attempt " << attempts;
  } else if (attempts > 1) {
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

namespace cryo::gpu {

absl::Status RefillTogether(Fastpath& fp, const std::vector<FastpathProcess>& procs, int threads,
                            const std::vector<std::vector<int>>& files,
                            const std::vector<std::vector<FileDigest>>& expected,
                            const std::vector<FastpathProcess>& running,
                            const std::function<bool()>& stop) {
  const size_t n = procs.size();
  static const std::vector<int> kNoFiles;
  static const std::vector<FileDigest> kNoSums;
  auto files_of = [&](size_t i) -> const std::vector<int>& {
    return i < files.size() ? files[i] : kNoFiles;
  };
  auto sums_of = [&](size_t i) -> const std::vector<FileDigest>& {
    return i < expected.size() ? expected[i] : kNoSums;
  };
  const bool shared = std::any_of(procs.begin(), procs.end(),
                                  [](const FastpathProcess& p) { return !p.imports.empty(); });
  if (!shared) {
    return FirstError(EachInParallel(n, [&](size_t i) -> absl::Status {
      return fp.Refill(procs[i], threads, files_of(i), sums_of(i), stop).status();
    }));
  }
  // 1. Each its own memory, exported again; importers wait with their gates shut.
  std::vector<std::unique_ptr<FastpathRefillHandle>> held(n);
  CRYO_RETURN_IF_ERROR(FirstError(EachInParallel(n, [&](size_t i) -> absl::Status {
    CRYO_ASSIGN_OR_RETURN(held[i], fp.RefillHeld(procs[i], threads, files_of(i), sums_of(i), stop));
    return absl::OkStatus();
  })));
  // Where each exporter's descriptors are now: (host pid, export id -> descriptor number).
  std::map<pid_t, std::pair<pid_t, std::map<uint64_t, int64_t>>> exports;
  for (size_t i = 0; i < n; ++i) {
    auto& e = exports[procs[i].ns_pid];
    e.first = procs[i].pid;
    for (const auto& r : held[i]->refilled().exports) e.second[r.id] = r.fd;
  }
  for (const auto& p : running) {
    if (exports.count(p.ns_pid)) continue;
    auto st = fp.Status(p);
    if (!st.ok()) continue;  // an importer of it names it below
    auto& e = exports[p.ns_pid];
    e.first = p.pid;
    for (const auto& r : st->exports) e.second[r.id] = r.fd;
  }
  // 2. Each importer gets its exporters' new descriptors, then runs.
  return FirstError(EachInParallel(n, [&](size_t i) -> absl::Status {
    if (!held[i]->refilled().importing) return absl::OkStatus();
    std::vector<uint64_t> ids;
    std::vector<int> fds;
    absl::Status st;
    for (const auto& imp : procs[i].imports) {
      auto e = exports.find(imp.from);
      if (e == exports.end() || !e->second.second.count(imp.export_id)) {
        st = absl::FailedPreconditionError(
            absl::StrCat("pid ", procs[i].pid, " imported memory that process ", imp.from,
                         " of the job exported, and that process has no such export now"));
        break;
      }
      std::string err;
      int got = TakeFd(e->second.first, e->second.second[imp.export_id], &err);
      if (got < 0) {
        st = absl::InternalError(
            absl::StrCat("carrying shared GPU memory to pid ", procs[i].pid, ": ", err));
        break;
      }
      ids.push_back(imp.id);
      fds.push_back(got);
    }
    if (st.ok()) st = held[i]->Go(ids, fds).status();
    for (int f : fds) ::close(f);
    return st;
  }));
}

}  // namespace cryo::gpu
