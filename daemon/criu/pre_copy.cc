#include "daemon/criu/pre_copy.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/criu/page_scan.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"

namespace cryo::criu {
namespace {

constexpr uint64_t kAheadPieceBytes = 8ull << 20;

struct TrackedMapping {
  uint64_t start = 0, end = 0;
};

// VmFlags of mappings whose pages may change without a fault: pinned for DMA (MADV_DONTFORK,
// "dc", as RDMA and GPU drivers mark it), device memory ("io", "pf"), hugetlb ("ht"); or already
// under a userfaultfd of the job's own ("um", "uw", "ui").
bool Untrackable(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    if (f == "dc" || f == "io" || f == "pf" || f == "ht" || f == "um" || f == "uw" || f == "ui") {
      return true;
    }
  }
  return false;
}

// The private anonymous mappings of `pid` a write-protect tracks, from /proc/<pid>/smaps.
absl::StatusOr<std::vector<TrackedMapping>> TrackableMappings(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps"));
  if (!in) return absl::NotFoundError(absl::StrCat("pid ", pid, " is gone"));
  std::vector<TrackedMapping> out;
  TrackedMapping cur;
  bool candidate = false;
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmFlags:")) {
      std::vector<std::string> flags = absl::StrSplit(line.substr(8), ' ', absl::SkipEmpty());
      if (candidate && !Untrackable(flags)) out.push_back(cur);
      candidate = false;
      continue;
    }
    // A mapping's first line: "start-end perms offset dev inode [path]".
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 5 || f[0].find('-') == std::string::npos || f[1].size() != 4) continue;
    const std::vector<std::string> range = absl::StrSplit(f[0], '-');
    if (range.size() != 2 || !absl::SimpleHexAtoi(range[0], &cur.start) ||
        !absl::SimpleHexAtoi(range[1], &cur.end)) {
      continue;
    }
    const std::string path = f.size() > 5 ? f[5] : "";
    candidate =
        f[1][3] == 'p' && f[4] == "0" &&
        (path.empty() || path == "[heap]" || path == "[stack]" || absl::StartsWith(path, "[anon:"));
  }
  return out;
}

}  // namespace

bool PreCopyVerify() {
  static const bool verify = [] {
    const char* v = std::getenv("CRYO_PRE_COPY_VERIFY");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return verify;
}

PreCopy::Task::~Task() {
  if (copy != nullptr) ::munmap(copy, bytes);
}

uint64_t PreCopy::Task::Cover(uint64_t vaddr, uint64_t pages, const char** src) const {
  auto it = std::upper_bound(runs.begin(), runs.end(), vaddr,
                             [](uint64_t v, const PreCopyRun& r) { return v < r.vaddr; });
  if (it != runs.begin()) {
    const PreCopyRun& r = *std::prev(it);
    const uint64_t end = r.vaddr + r.pages * kPageBytes;
    if (vaddr < end) {
      *src = copy + r.offset + (vaddr - r.vaddr);
      return std::min(pages, (end - vaddr) / kPageBytes);
    }
  }
  *src = nullptr;
  if (it == runs.end()) return pages;
  return std::min(pages, (it->vaddr - vaddr) / kPageBytes);
}

const PreCopy::Task* PreCopy::Find(pid_t pid) const {
  for (const auto& t : tasks_) {
    if (t->pid == pid) return t.get();
  }
  return nullptr;
}

uint64_t PreCopy::bytes() const {
  uint64_t n = 0;
  for (const auto& t : tasks_) n += t->bytes;
  return n;
}

absl::Status PreCopy::Add(pid_t pid, UniqueFd uffd, int threads) {
  const absl::Time t0 = absl::Now();
  auto task = std::make_unique<Task>();
  task->pid = pid;
  task->uffd = std::move(uffd);
  CRYO_ASSIGN_OR_RETURN(std::vector<TrackedMapping> maps, TrackableMappings(pid));
  const UniqueFd pagemap(
      ::open(absl::StrCat("/proc/", pid, "/pagemap").c_str(), O_RDONLY | O_CLOEXEC));
  if (!pagemap.ok()) return ErrnoStatus(errno, absl::StrCat("opening the pagemap of pid ", pid));

  // Registered, then each mapping's pages write-protected as they are listed (one ioctl): a
  // page written after that is reported written at the freeze, whatever this copy read.
  std::vector<PageRun> pages;
  for (const TrackedMapping& m : maps) {
    uffdio_register reg{};
    reg.range.start = m.start;
    reg.range.len = m.end - m.start;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    // A mapping that changed since smaps was read, or that the kernel will not track: copied
    // at the freeze.
    if (::ioctl(task->uffd.get(), UFFDIO_REGISTER, &reg) != 0) continue;
    std::vector<PageRun> got;
    if (!ScanWritten(pagemap.get(), m.start, m.end, /*protect=*/true, &got).ok()) continue;
    ++task->mappings;
    for (const PageRun& r : got) AddPageRun(&pages, r.vaddr, r.pages);
  }

  struct Piece {
    uint64_t vaddr, len, offset;
    bool ok = false;
  };
  std::vector<Piece> pieces;
  for (const PageRun& r : pages) {
    for (uint64_t done = 0; done < r.pages * kPageBytes;) {
      const uint64_t n = std::min(kAheadPieceBytes, r.pages * kPageBytes - done);
      pieces.push_back(Piece{r.vaddr + done, n, task->bytes, false});
      task->bytes += n;
      done += n;
    }
  }
  if (task->bytes > 0) {
    void* m = ::mmap(nullptr, task->bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      task->bytes = 0;
      return ErrnoStatus(errno, absl::StrCat("memory for a copy of pid ", pid));
    }
    task->copy = static_cast<char*>(m);
    ::madvise(task->copy, task->bytes, MADV_HUGEPAGE);
  }
  const UniqueFd mem(::open(absl::StrCat("/proc/", pid, "/mem").c_str(), O_RDONLY | O_CLOEXEC));
  std::atomic<size_t> next{0};
  const size_t n = std::min<size_t>(std::max(threads, 1), std::max<size_t>(1, pieces.size()));
  (void)EachInParallel(n, [&](size_t) {
    for (size_t i = next++; i < pieces.size(); i = next++) {
      Piece& p = pieces[i];
      // A piece the job unmapped meanwhile is not in the copy: its pages, if any are there at
      // the freeze, are copied then.
      p.ok = ReadTaskMemory(pid, mem.get(), p.vaddr, task->copy + p.offset, p.len).ok();
    }
    return absl::OkStatus();
  });
  for (const Piece& p : pieces) {
    if (!p.ok) continue;
    if (!task->runs.empty() &&
        task->runs.back().vaddr + task->runs.back().pages * kPageBytes == p.vaddr &&
        task->runs.back().offset + task->runs.back().pages * kPageBytes == p.offset) {
      task->runs.back().pages += p.len / kPageBytes;
    } else {
      task->runs.push_back(PreCopyRun{p.vaddr, p.len / kPageBytes, p.offset});
    }
  }
  tasks_.push_back(std::move(task));
  took_ += absl::Now() - t0;
  return absl::OkStatus();
}

}  // namespace cryo::criu
