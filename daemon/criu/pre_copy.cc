#include "daemon/criu/pre_copy.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

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

// A mapping of anonymous shared memory ("/dev/zero (deleted)", rw-s), from /proc/<pid>/smaps.
struct AnonSharedMapping {
  pid_t pid = 0;
  uint64_t start = 0, end = 0, pgoff = 0, inode = 0;
  bool trackable = false;
};

void ListAnonShared(pid_t pid, std::vector<AnonSharedMapping>* out) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps"));
  AnonSharedMapping cur;
  bool candidate = false;
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmFlags:")) {
      std::vector<std::string> flags = absl::StrSplit(line.substr(8), ' ', absl::SkipEmpty());
      if (candidate) {
        cur.trackable = !Untrackable(flags);
        out->push_back(cur);
      }
      candidate = false;
      continue;
    }
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 5 || f[0].find('-') == std::string::npos || f[1].size() != 4) continue;
    const std::vector<std::string> range = absl::StrSplit(f[0], '-');
    candidate = range.size() == 2 && absl::SimpleHexAtoi(range[0], &cur.start) &&
                absl::SimpleHexAtoi(range[1], &cur.end) && absl::SimpleHexAtoi(f[2], &cur.pgoff) &&
                absl::SimpleAtoi(f[4], &cur.inode) && f[1] == "rw-s" && f.size() == 7 &&
                f[5] == "/dev/zero" && f[6] == "(deleted)";
    cur.pid = pid;
  }
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

PreCopy::Segment::~Segment() {
  if (copy != nullptr) ::munmap(copy, bytes);
}

PreCopy::~PreCopy() { WaitShared(); }

void PreCopy::StopTracking() {
  WaitShared();
  // Closing the last descriptor unregisters its ranges and lifts their protection: a walk of
  // each process's page tables (30-45 ms for four ranks one after another, while the job is
  // frozen), so the processes are done side by side.
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  (void)EachIndex(tasks_.size(), threads, [&](size_t i) {
    tasks_[i]->uffd.reset();
    return absl::OkStatus();
  });
}

void PreCopy::Release() {
  WaitShared();
  segments_.clear();
  tasks_.clear();
}

uint64_t CoverRuns(const std::vector<PreCopyRun>& runs, const char* copy, uint64_t vaddr,
                   uint64_t pages, const char** src) {
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

uint64_t PreCopy::shared_bytes() const {
  uint64_t n = 0;
  for (const auto& g : segments_) n += g->bytes;
  return n;
}

const PreCopy::Segment* PreCopy::FindShared(uint64_t shmid) const {
  for (const auto& g : segments_) {
    if (g->shmid != shmid) continue;
    const Task* t = Find(g->pid);
    uint64_t forks = 0;
    if (t == nullptr ||
        !ReadTaskMemory(t->pid, -1, t->fork_counter, reinterpret_cast<char*>(&forks), sizeof(forks))
             .ok() ||
        forks != t->forks) {
      return nullptr;  // it forked since: a child may have written the segment
    }
    return g.get();
  }
  return nullptr;
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

absl::Status PreCopy::Add(pid_t pid, UniqueFd uffd, int threads, uint64_t features,
                          uint64_t fork_counter) {
  const absl::Time t0 = absl::Now();
  auto task = std::make_unique<Task>();
  task->pid = pid;
  task->uffd = std::move(uffd);
  task->features = features;
  task->fork_counter = fork_counter;
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
  (void)EachIndex(pieces.size(), threads, [&](size_t i) {
    Piece& p = pieces[i];
    // A piece the job unmapped meanwhile is not in the copy: its pages, if any are there at the
    // freeze, are copied then.
    p.ok = ReadTaskMemory(pid, mem.get(), p.vaddr, task->copy + p.offset, p.len).ok();
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

void PreCopy::AddShared(const std::function<std::vector<pid_t>()>& tree, int threads,
                        const std::function<bool(uint64_t)>& holds) {
  const absl::Time t0 = absl::Now();
  // The fork counts first: a fork after this is seen at the freeze, one before it is in the tree.
  std::map<pid_t, Task*> able;
  for (auto& t : tasks_) {
    if ((t->features & kUffdFeatureWpShmem) == 0 || t->fork_counter == 0) continue;
    if (ReadTaskMemory(t->pid, -1, t->fork_counter, reinterpret_cast<char*>(&t->forks),
                       sizeof(t->forks))
            .ok()) {
      able[t->pid] = t.get();
    }
  }
  if (able.empty()) return;
  std::vector<AnonSharedMapping> maps;
  for (pid_t pid : tree()) ListAnonShared(pid, &maps);
  std::map<uint64_t, int> holders;
  for (const AnonSharedMapping& m : maps) ++holders[m.inode];

  struct Piece {
    Segment* seg;
    int fd;
    uint64_t offset, len, at;
    bool ok = false;
  };
  std::vector<Piece> pieces;
  std::vector<UniqueFd> files;
  files.reserve(maps.size());
  uint64_t total = 0;
  for (const AnonSharedMapping& m : maps) {
    auto t = able.find(m.pid);
    if (holders[m.inode] != 1 || !m.trackable || t == able.end()) continue;
    uffdio_register reg{};
    reg.range.start = m.start;
    reg.range.len = m.end - m.start;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    if (::ioctl(t->second->uffd.get(), UFFDIO_REGISTER, &reg) != 0) continue;
    const UniqueFd pagemap(
        ::open(absl::StrCat("/proc/", m.pid, "/pagemap").c_str(), O_RDONLY | O_CLOEXEC));
    std::vector<PageRun> ignored;
    // Protected before it is read: a page written after this is written at the freeze.
    if (!pagemap.ok() ||
        !ScanSharedWritten(pagemap.get(), m.start, m.end, /*protect=*/true, &ignored).ok()) {
      continue;
    }
    UniqueFd file(::open(
        absl::StrCat("/proc/", m.pid, "/map_files/", absl::Hex(m.start), "-", absl::Hex(m.end))
            .c_str(),
        O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (!file.ok() || ::fstat(file.get(), &st) != 0 || st.st_ino != m.inode) continue;
    auto seg = std::make_unique<Segment>();
    seg->shmid = m.inode;
    seg->pid = m.pid;
    seg->start = m.start;
    seg->end = m.end;
    seg->pgoff = m.pgoff;
    // Its data (SEEK_DATA), as the freeze would take it.
    std::vector<Piece> mine;
    const uint64_t end = m.pgoff + (m.end - m.start);
    for (uint64_t at = m.pgoff; at < end;) {
      const off_t data = ::lseek(file.get(), static_cast<off_t>(at), SEEK_DATA);
      if (data < 0) break;
      const off_t hole = ::lseek(file.get(), data, SEEK_HOLE);
      if (hole < 0) break;
      const uint64_t b = static_cast<uint64_t>(data) / kPageBytes * kPageBytes;
      const uint64_t e = std::min<uint64_t>(
          end, (static_cast<uint64_t>(hole) + kPageBytes - 1) / kPageBytes * kPageBytes);
      if (b >= end) break;
      for (uint64_t o = b; o < e;) {
        const uint64_t n = std::min(kAheadPieceBytes, e - o);
        mine.push_back(Piece{seg.get(), file.get(), o, n, seg->bytes});
        seg->bytes += n;
        o += n;
      }
      at = e;
    }
    if (seg->bytes == 0 || !holds(total + seg->bytes)) continue;
    void* c = ::mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (c == MAP_FAILED) continue;
    seg->copy = static_cast<char*>(c);
    ::madvise(seg->copy, seg->bytes, MADV_HUGEPAGE);
    total += seg->bytes;
    pieces.insert(pieces.end(), mine.begin(), mine.end());
    files.push_back(std::move(file));
    segments_.push_back(std::move(seg));
  }
  (void)EachIndex(pieces.size(), threads, [&](size_t i) {
    Piece& p = pieces[i];
    p.ok = PreadAll(p.fd, p.seg->copy + p.at, p.len, p.offset, "shared memory").ok();
    return absl::OkStatus();
  });
  for (const Piece& p : pieces) {
    if (!p.ok) continue;  // left out of the runs: taken at the freeze
    std::vector<PreCopyRun>& runs = p.seg->runs;
    if (!runs.empty() && runs.back().vaddr + runs.back().pages * kPageBytes == p.offset &&
        runs.back().offset + runs.back().pages * kPageBytes == p.at) {
      runs.back().pages += p.len / kPageBytes;
    } else {
      runs.push_back(PreCopyRun{p.offset, p.len / kPageBytes, p.at});
    }
  }
  shared_took_ += absl::Now() - t0;
}

void PreCopy::StartShared(std::function<std::vector<pid_t>()> tree, int threads,
                          std::function<bool(uint64_t)> holds) {
  WaitShared();
  shared_thread_ = std::thread([this, tree = std::move(tree), threads, holds = std::move(holds)] {
    AddShared(tree, threads, holds);
  });
}

void PreCopy::WaitShared() {
  if (shared_thread_.joinable()) shared_thread_.join();
}

}  // namespace cryo::criu
