#include "daemon/criu/anon_pages.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "daemon/criu/page_scan.h"
#include "daemon/criu/pages_pool.h"
#include "daemon/criu/pre_copy.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/fs.h"
#include "lib/base/io_all.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"

namespace cryo::criu {
// The plan of a copy, named (not anonymous): AnonPagesCopy::State holds it across the thaw.
namespace anon_pages_detail {

// One entry of the new pagemap: CRIU's as it was, or a run of cryod's.
struct Segment {
  ::criu::pagemap_entry entry;
  bool has_data = false;
  bool from_task = false;
  uint64_t src = 0;             // CRIU's: its offset in the old pages file
  const char* ahead = nullptr;  // cryod's copy ahead of the freeze (pre_copy.h), when from it
};

// One pagemap and its pages file to write: a task's private memory (from the task), or a
// shared memory segment or memfd (from its file, `shm`).
struct TaskPlan {
  pid_t pid = 0;
  std::string pagemap;  // its name in the directory
  UniqueFd shm;
  uint32_t pages_id = 0;
  std::vector<Segment> segments;
  uint64_t out_bytes = 0;
  UniqueFd old_pages;
  UniqueFd new_pages;
  UniqueFd mem;  // /proc/<pid>/mem, for pages the task cannot read itself (PROT_NONE)
  std::vector<XXH128_hash_t> chunks;  // the new pages file's checksum, per 64 MiB chunk
  // The new pages file, mapped: the threads copy into it at once. Writes through the file
  // (pwrite) would take its inode lock, one thread at a time.
  char* map = nullptr;
  // Where new_pages may come from (pages_pool.h); `pooled` says where it is until it is renamed
  // into place.
  PagesPool* pool = nullptr;
  std::optional<PagesPool::File> pooled;
  TaskPlan() = default;
  TaskPlan(const TaskPlan&) = delete;
  TaskPlan& operator=(const TaskPlan&) = delete;
  ~TaskPlan() {
    if (map != nullptr) ::munmap(map, out_bytes);
    if (pooled) {
      pooled->fd = std::move(new_pages);
      pool->Return(*std::move(pooled));
    }
  }
};

struct Piece {
  TaskPlan* task = nullptr;
  uint64_t out = 0;
  uint64_t len = 0;
  bool from_task = false;
  uint64_t src = 0;             // the task's address, or the old file's offset
  const char* ahead = nullptr;  // taken from the copy ahead, after the thaw
};

// What one thread does at a time: one checksum chunk of one new pages file, its pieces in file
// order, so that the checksum is taken from the copy as it passes (no second read).
struct ChunkWork {
  TaskPlan* task = nullptr;
  size_t index = 0;
  std::vector<Piece> pieces;
  uint64_t bytes = 0;
  bool ahead = false;  // some of it comes from the copy ahead: finished after the thaw
};

}  // namespace anon_pages_detail

namespace {

constexpr uint64_t kPage = kPageBytes;
constexpr uint64_t kPieceBytes = 8ull << 20;  // what one thread copies at a time
constexpr uint64_t kMaxMmImage = 256ull << 20;
constexpr uint64_t kMaxPagemapImage = 1ull << 30;
constexpr uint64_t kMaxPstreeImage = 64ull << 20;

using anon_pages_detail::ChunkWork;
using anon_pages_detail::Piece;
using anon_pages_detail::Segment;
using anon_pages_detail::TaskPlan;

std::string PagemapName(pid_t pid) { return absl::StrCat("pagemap-", pid, ".img"); }
std::string PagesName(uint32_t id) { return absl::StrCat("pages-", id, ".img"); }

bool HasData(const ::criu::pagemap_entry& e) {
  if (e.has_flags()) return (e.flags() & kPagemapPresent) != 0;
  return !e.in_parent();  // images older than the flags
}

template <typename M>
absl::StatusOr<M> ParseEntry(const std::string& raw, const std::string& image) {
  M m;
  if (!m.ParseFromString(raw)) {
    return absl::InvalidArgumentError(absl::StrCat("CRIU image ", image, " does not parse"));
  }
  return m;
}

// A file in `dir` with no name yet: the hasher that follows the directory (TailHasher) and
// anyone listing it never see it half-written.
absl::StatusOr<UniqueFd> OpenUnnamed(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.ok()) return ErrnoStatus(errno, absl::StrCat("making a file in ", dir));
  return fd;
}

// Puts the unnamed file `fd` at `name` in `dir`, in place of what was there.
absl::Status NameFile(int fd, const std::string& dir, const std::string& name) {
  const std::string path = fs::Join(dir, name);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("removing CRIU's ", name));
  }
  const std::string self = absl::StrCat("/proc/self/fd/", fd);
  if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    return ErrnoStatus(errno, absl::StrCat("writing ", name));
  }
  return absl::OkStatus();
}

// lib/base/io_all.h's whole write, its error as a status: one that makes no progress is a full
// file system. (Reads: PreadAll, page_scan.h.)
absl::Status WriteAll(int fd, const char* p, uint64_t len, uint64_t off, const char* what) {
  std::string err;
  errno = 0;
  if (io::WriteAll(fd, {iovec{const_cast<char*>(p), len}}, static_cast<off_t>(off), &err)) {
    return absl::OkStatus();
  }
  return ErrnoStatus(errno != 0 ? errno : ENOSPC, what);
}

// CopyPiece fills the destination a window at a time, each window ending at a huge page's
// boundary: its pages allocated (the kernel zeroes them), filled and checksummed while they are
// still in the CPU's cache. Allocating, filling and hashing a whole 8 MiB piece one pass after the
// other went through memory three times; the frozen copy is bound by memory bandwidth
// (docs/benchmarks.md).
constexpr uint64_t kWindowBytes = 2ull << 20;

// Copies piece `p` into its place in the new pages file (through `buf` where the file is not
// mapped), and adds it to `hash` (may be null: hashed later). A piece from the copy ahead is left
// for the thaw unless `ahead`.
absl::Status CopyPiece(const Piece& p, char* buf, XXH3_state_t* hash, bool ahead = false) {
  TaskPlan& t = *p.task;
  // Not even its pages allocated while the tasks are frozen.
  if (p.ahead != nullptr && !ahead) return absl::OkStatus();
  if (t.map == nullptr && p.ahead != nullptr) {
    return absl::InternalError("a pages image taken from the copy ahead must be mapped");
  }
  char* const base = t.map != nullptr ? t.map + p.out : buf;
  for (uint64_t done = 0; done < p.len;) {
    char* dst = base + done;
    const uint64_t to_boundary =
        kWindowBytes - (reinterpret_cast<uintptr_t>(dst) & (kWindowBytes - 1));
    const uint64_t n = std::min(p.len - done, to_boundary);
    // The pages of the file are allocated here, where a full tmpfs or disk is an error; a write
    // into a mapping that cannot get its page would be a SIGBUS instead.
    if (t.map != nullptr && ::madvise(dst, n, MADV_POPULATE_WRITE) != 0) {
      // EFAULT is how it reports a page the file system could not give (a full tmpfs or disk).
      const int err = errno;
      if (err == EFAULT || err == ENOSPC || err == ENOMEM) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "no room for the pages image (", t.out_bytes,
            " bytes) where the dump is written: ", std::strerror(err == EFAULT ? ENOSPC : err)));
      }
      return ErrnoStatus(err, "allocating the pages image");
    }
    if (p.ahead != nullptr) {
      std::memcpy(dst, p.ahead + done, n);
    } else if (p.from_task && t.shm.ok()) {
      CRYO_RETURN_IF_ERROR(PreadAll(t.shm.get(), dst, n, p.src + done,
                                    absl::StrCat("reading shared memory ", t.pagemap)));
    } else if (p.from_task) {
      CRYO_RETURN_IF_ERROR(ReadTaskMemory(t.pid, t.mem.get(), p.src + done, dst, n));
    } else {
      CRYO_RETURN_IF_ERROR(PreadAll(t.old_pages.get(), dst, n, p.src + done,
                                    absl::StrCat("reading CRIU's ", PagesName(t.pages_id))));
    }
    if (hash != nullptr) XXH3_128bits_update(hash, dst, n);
    done += n;
  }
  if (t.map != nullptr) return absl::OkStatus();
  return WriteAll(t.new_pages.get(), buf, p.len, p.out, "writing the pages image");
}

// With CRYO_PRE_COPY_VERIFY=1: the pages of piece `p` (from the copy ahead) that differ from the
// frozen task's, which the tracking said were not written.
uint64_t AheadMismatches(const Piece& p, char* buf) {
  const uint64_t pages = p.len / kPage;
  const TaskPlan& t = *p.task;
  if (!(t.shm.ok() ? PreadAll(t.shm.get(), buf, p.len, p.src, "shared memory")
                   : ReadTaskMemory(t.pid, t.mem.get(), p.src, buf, p.len))
           .ok()) {
    return pages;
  }
  uint64_t bad = 0;
  for (uint64_t off = 0; off < p.len; off += kPage) {
    if (std::memcmp(buf + off, p.ahead + off, kPage) != 0) ++bad;
  }
  return bad;
}

// cryod's entries for `pages` pages of data at `vaddr` (a task's address, or an offset in a
// segment), read from `src`: as many as nr_pages (32 bits) needs.
void AddEntries(std::vector<Segment>* out, uint64_t vaddr, uint64_t src, uint64_t pages,
                const char* ahead = nullptr) {
  for (uint64_t done = 0; done < pages;) {
    const uint64_t take = std::min<uint64_t>(pages - done, 1u << 30);
    Segment s;
    s.entry.set_vaddr(vaddr + done * kPage);
    s.entry.set_nr_pages(static_cast<uint32_t>(take));
    s.entry.set_flags(kPagemapPresent);
    s.has_data = true;
    s.from_task = ahead == nullptr;
    s.src = src + done * kPage;
    s.ahead = ahead != nullptr ? ahead + done * kPage : nullptr;
    out->push_back(std::move(s));
    done += take;
  }
}

// The old pages file (CRIU's) and the new one, sized and mapped.
// With a pool, the new one is a file kept from an earlier dump: its pages are there already, and
// the copy writes every byte of it (the planned pages are the whole file).
absl::Status OpenOutput(const std::string& dir, TaskPlan* plan) {
  CRYO_ASSIGN_OR_RETURN(plan->old_pages, fs::OpenRegularBeneath(dir, PagesName(plan->pages_id)));
  if (plan->pool != nullptr && plan->out_bytes > 0) {
    plan->pooled = plan->pool->Take(plan->out_bytes);
    if (plan->pooled) plan->new_pages = std::move(plan->pooled->fd);
  }
  if (!plan->new_pages.ok()) {
    CRYO_ASSIGN_OR_RETURN(plan->new_pages, OpenUnnamed(dir));
  }
  if (plan->out_bytes > 0) {
    if (::ftruncate(plan->new_pages.get(), static_cast<off_t>(plan->out_bytes)) != 0) {
      return ErrnoStatus(errno, "sizing the pages image");
    }
    void* m = ::mmap(nullptr, plan->out_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                     plan->new_pages.get(), 0);
    if (m == MAP_FAILED) return ErrnoStatus(errno, "mapping the pages image");
    plan->map = static_cast<char*>(m);
    // Kernels before 5.14 cannot allocate a mapping's pages ahead (MADV_POPULATE_WRITE): the
    // copy then writes through the file.
    if (::madvise(plan->map, std::min<uint64_t>(plan->out_bytes, kPage), MADV_POPULATE_WRITE) !=
            0 &&
        errno == EINVAL) {
      ::munmap(plan->map, plan->out_bytes);
      plan->map = nullptr;
    }
  }
  return absl::OkStatus();
}

// The node's shared memory in huge pages (ShmemHugePages of /proc/meminfo), in bytes.
uint64_t ShmemHugeBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (in >> key) {
    if (key == "ShmemHugePages:" && (in >> kb)) return kb << 10;
    in.ignore(4096, '\n');
  }
  return 0;
}

// Task `pid`'s mappings, as mm-<pid>.img lists them.
absl::StatusOr<::criu::mm_entry> ReadMm(const std::string& dir, pid_t pid) {
  const std::string mm_name = absl::StrCat("mm-", pid, ".img");
  CRYO_ASSIGN_OR_RETURN(auto mm_raw, ReadImageEntries(dir, mm_name, kMmMagic, true, kMaxMmImage));
  if (mm_raw.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("CRIU image ", mm_name, ": not one entry"));
  }
  return ParseEntry<::criu::mm_entry>(mm_raw[0], mm_name);
}

// A run of pages to copy: from the task, or (ahead) from the copy taken before the freeze.
struct PlannedRun {
  uint64_t vaddr = 0, pages = 0;
  const char* ahead = nullptr;
};

// The pages of mapping [start, end) to copy, into `runs`: with `ahead` (the task's copy ahead),
// those not written since it was taken come from it.
absl::Status PlanMapping(int pagemap, uint64_t start, uint64_t end, uint64_t zero_pfn,
                         bool* use_scan, const PreCopy::Task* ahead, std::vector<PlannedRun>* runs,
                         uint64_t* ahead_bytes) {
  std::vector<PageRun> found;
  absl::Status tracked = absl::FailedPreconditionError("no copy ahead");
  if (ahead != nullptr) tracked = ScanWritten(pagemap, start, end, /*protect=*/false, &found);
  if (!tracked.ok()) {
    // Not tracked (a mapping made or made anew since): all of it from the task.
    if (!absl::IsFailedPrecondition(tracked)) return tracked;
    found.clear();
    CRYO_RETURN_IF_ERROR(ScanRange(pagemap, start, end, zero_pfn, use_scan, &found));
    for (const PageRun& r : found) runs->push_back(PlannedRun{r.vaddr, r.pages, nullptr});
    return absl::OkStatus();
  }
  for (const PageRun& r : found) {
    if (r.written) {
      runs->push_back(PlannedRun{r.vaddr, r.pages, nullptr});
      continue;
    }
    for (uint64_t done = 0; done < r.pages;) {
      const char* src = nullptr;
      const uint64_t n = ahead->Cover(r.vaddr + done * kPage, r.pages - done, &src);
      runs->push_back(PlannedRun{r.vaddr + done * kPage, n, src});
      if (src != nullptr) *ahead_bytes += n * kPage;
      done += n;
    }
  }
  return absl::OkStatus();
}

// Plans one task: CRIU's entries and cryod's runs, merged in address order. Sets `criu_did_it`
// when CRIU dumped the mappings itself.
absl::Status PlanTask(const std::string& dir, pid_t pid, const ::criu::mm_entry& mm,
                      uint64_t zero_pfn, bool* use_scan, const PreCopy::Task* ahead, TaskPlan* plan,
                      bool* criu_did_it, uint64_t* ahead_bytes) {
  *criu_did_it = false;
  const std::string pm_name = PagemapName(pid);
  CRYO_ASSIGN_OR_RETURN(auto pm_raw,
                        ReadImageEntries(dir, pm_name, kPagemapMagic, true, kMaxPagemapImage));
  if (pm_raw.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("CRIU image ", pm_name, ": no head"));
  }
  CRYO_ASSIGN_OR_RETURN(auto head, ParseEntry<::criu::pagemap_head>(pm_raw[0], pm_name));
  plan->pid = pid;
  plan->pagemap = pm_name;
  plan->pages_id = head.pages_id();

  std::vector<Segment> criu;
  uint64_t old_off = 0;
  for (size_t i = 1; i < pm_raw.size(); ++i) {
    Segment s;
    CRYO_ASSIGN_OR_RETURN(s.entry, ParseEntry<::criu::pagemap_entry>(pm_raw[i], pm_name));
    s.has_data = HasData(s.entry);
    s.src = old_off;
    if (s.has_data) old_off += static_cast<uint64_t>(s.entry.nr_pages()) * kPage;
    criu.push_back(std::move(s));
  }

  std::vector<PlannedRun> runs;
  {
    const UniqueFd pagemap(
        ::open(absl::StrCat("/proc/", pid, "/pagemap").c_str(), O_RDONLY | O_CLOEXEC));
    if (!pagemap.ok()) return ErrnoStatus(errno, absl::StrCat("opening the pagemap of pid ", pid));
    for (const auto& v : mm.vmas()) {
      if (!IsExternalAnonVma(v.status(), v.flags())) continue;
      // CRIU's pagemap holds pages of this mapping: it dumped them itself (no patch).
      for (const Segment& s : criu) {
        const uint64_t b = s.entry.vaddr();
        const uint64_t e = b + static_cast<uint64_t>(s.entry.nr_pages()) * kPage;
        if (b < v.end() && v.start() < e) {
          *criu_did_it = true;
          return absl::OkStatus();
        }
      }
      CRYO_RETURN_IF_ERROR(PlanMapping(pagemap.get(), v.start(), v.end(), zero_pfn, use_scan, ahead,
                                       &runs, ahead_bytes));
    }
  }

  // Merge: both lists in address order (CRIU lists mappings so; sorted here all the same), and
  // never overlapping (different mappings).
  std::sort(runs.begin(), runs.end(),
            [](const PlannedRun& a, const PlannedRun& b) { return a.vaddr < b.vaddr; });
  std::vector<Segment>& out = plan->segments;
  out.reserve(criu.size() + runs.size());
  size_t ci = 0;
  for (const PlannedRun& r : runs) {
    while (ci < criu.size() && criu[ci].entry.vaddr() < r.vaddr)
      out.push_back(std::move(criu[ci++]));
    AddEntries(&out, r.vaddr, r.vaddr, r.pages, r.ahead);
  }
  while (ci < criu.size()) out.push_back(std::move(criu[ci++]));
  for (const Segment& s : out) {
    if (s.has_data) plan->out_bytes += static_cast<uint64_t>(s.entry.nr_pages()) * kPage;
  }

  CRYO_RETURN_IF_ERROR(OpenOutput(dir, plan));
  plan->mem.reset(::open(absl::StrCat("/proc/", pid, "/mem").c_str(), O_RDONLY | O_CLOEXEC));
  if (!plan->mem.ok()) return ErrnoStatus(errno, absl::StrCat("opening the memory of pid ", pid));
  return absl::OkStatus();
}

// Shared memory CRIU left to cryod: segments of MAP_SHARED | MAP_ANONYMOUS mappings, and
// memfds (not hugetlb ones), each by its shmid (the inode number of its file).
struct SharedSegment {
  uint64_t size = 0;
  pid_t pid = 0;  // a task that maps it (start, end, at pgoff) or holds it open (fd)
  uint64_t start = 0, end = 0, pgoff = 0;
  int fd = -1;
  int maps = 0;  // the tasks' mappings of it
};

// The file of segment `shmid`: through the mapping of a task, or its open descriptor.
absl::StatusOr<UniqueFd> OpenShared(uint64_t shmid, const SharedSegment& seg) {
  const std::string path = seg.fd >= 0
                               ? absl::StrCat("/proc/", seg.pid, "/fd/", seg.fd)
                               : absl::StrCat("/proc/", seg.pid, "/map_files/",
                                              absl::Hex(seg.start), "-", absl::Hex(seg.end));
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) return ErrnoStatus(errno, absl::StrCat("opening shared memory ", shmid));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint32_t>(st.st_ino) != static_cast<uint32_t>(shmid)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", shmid, ": ", path, " is another file"));
  }
  return fd;
}

// Offsets [b, e) of a segment copied ahead (`g`), as entries: the pages of its mapping known not
// written since from the copy, the rest (written, outside the mapping, or not known) from its
// file.
absl::Status PlanTrackedShared(int pagemap, const PreCopy::Segment& g, uint64_t b, uint64_t e,
                               std::vector<Segment>* out, uint64_t* ahead_bytes) {
  const uint64_t mb = std::max(b, g.pgoff);
  const uint64_t me = std::min(e, g.pgoff + (g.end - g.start));
  if (mb >= me) {
    AddEntries(out, b, b, (e - b) / kPage);
    return absl::OkStatus();
  }
  std::vector<PageRun> found;
  const absl::Status st =
      ScanSharedWritten(pagemap, g.start + (mb - g.pgoff), g.start + (me - g.pgoff), false, &found);
  if (!st.ok() && !absl::IsFailedPrecondition(st)) return st;
  uint64_t at = b;  // offsets up to here are planned
  auto from_file = [&](uint64_t to) {
    if (to > at) AddEntries(out, at, at, (to - at) / kPage);
    at = std::max(at, to);
  };
  for (const PageRun& r : found) {
    const uint64_t rb = g.pgoff + (r.vaddr - g.start);
    const uint64_t re = rb + r.pages * kPage;
    from_file(rb);
    if (r.written) {
      from_file(re);
      continue;
    }
    while (at < re) {
      const char* src = nullptr;
      const uint64_t n = g.Cover(at, (re - at) / kPage, &src);
      if (src == nullptr) {
        from_file(at + n * kPage);
      } else {
        AddEntries(out, at, at, n, src);
        *ahead_bytes += n * kPage;
        at += n * kPage;
      }
    }
  }
  from_file(e);
  return absl::OkStatus();
}

// Plans one segment: its data as runs of offsets (SEEK_DATA), as CRIU would dump it. Leaves
// `plan` without a pagemap name when CRIU dumped it itself (its pagemap has entries).
absl::Status PlanShared(const std::string& dir, uint64_t shmid, const SharedSegment& seg,
                        const PreCopy* ahead, TaskPlan* plan, uint64_t* ahead_bytes) {
  const std::string pm_name = absl::StrCat("pagemap-shmem-", shmid, ".img");
  if (!fs::Exists(fs::Join(dir, pm_name))) return absl::OkStatus();  // not CRIU's to dump
  CRYO_ASSIGN_OR_RETURN(auto pm_raw,
                        ReadImageEntries(dir, pm_name, kPagemapMagic, true, kMaxPagemapImage));
  if (pm_raw.size() != 1) return absl::OkStatus();  // entries: CRIU dumped it
  if (seg.pid == 0) {
    // CRIU saw it (memfd.img) in a task cryod does not copy for: nothing to find it by.
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", shmid, " left to cryod, but no task holds it"));
  }
  CRYO_ASSIGN_OR_RETURN(auto head, ParseEntry<::criu::pagemap_head>(pm_raw[0], pm_name));
  CRYO_ASSIGN_OR_RETURN(plan->shm, OpenShared(shmid, seg));
  plan->pagemap = pm_name;
  plan->pages_id = head.pages_id();
  // Copied ahead (pre_copy.h) through this, its one mapping: the pages not written since are
  // taken from that copy.
  const PreCopy::Segment* tracked = nullptr;
  UniqueFd pagemap;
  if (ahead != nullptr && seg.maps == 1 && seg.fd < 0) {
    tracked = ahead->FindShared(shmid);
    if (tracked != nullptr && (tracked->pid != seg.pid || tracked->start != seg.start ||
                               tracked->end != seg.end || tracked->pgoff != seg.pgoff)) {
      tracked = nullptr;
    }
    if (tracked != nullptr) {
      pagemap.reset(
          ::open(absl::StrCat("/proc/", seg.pid, "/pagemap").c_str(), O_RDONLY | O_CLOEXEC));
      if (!pagemap.ok()) tracked = nullptr;
    }
  }
  const uint64_t end = (seg.size + kPage - 1) / kPage * kPage;
  for (uint64_t at = 0; at < end;) {
    const off_t data = ::lseek(plan->shm.get(), static_cast<off_t>(at), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;
    if (data < 0) return ErrnoStatus(errno, absl::StrCat("SEEK_DATA in shared memory ", shmid));
    const off_t hole = ::lseek(plan->shm.get(), data, SEEK_HOLE);
    if (hole < 0) return ErrnoStatus(errno, absl::StrCat("SEEK_HOLE in shared memory ", shmid));
    const uint64_t b = static_cast<uint64_t>(data) / kPage * kPage;
    const uint64_t e =
        std::min<uint64_t>(end, (static_cast<uint64_t>(hole) + kPage - 1) / kPage * kPage);
    if (b >= end) break;
    if (tracked != nullptr) {
      CRYO_RETURN_IF_ERROR(
          PlanTrackedShared(pagemap.get(), *tracked, b, e, &plan->segments, ahead_bytes));
    } else {
      AddEntries(&plan->segments, b, b, (e - b) / kPage);
    }
    plan->out_bytes += e - b;
    at = e;
  }
  return OpenOutput(dir, plan);
}

// The shared segments the tasks map or hold: the mappings from their mm images, the memfds
// from memfd.img, found open in a task.
absl::StatusOr<std::map<uint64_t, SharedSegment>> FindShared(
    const std::string& dir, const std::vector<std::pair<pid_t, ::criu::mm_entry>>& tasks) {
  std::map<uint64_t, SharedSegment> out;
  for (const auto& [pid, mm] : tasks) {
    for (const auto& v : mm.vmas()) {
      const bool anon =
          (v.status() & (vma::kRegular | vma::kAnonShared)) == (vma::kRegular | vma::kAnonShared) &&
          (v.status() & vma::kSysVIpc) == 0;
      const bool memfd = (v.status() & vma::kMemfd) != 0;
      if (!anon && !memfd) continue;
      // A memfd's mapping names its file by CRIU's file id: its inode is the shmid.
      uint64_t shmid = v.shmid();
      if (memfd) {
        struct stat st;
        const std::string link = absl::StrCat("/proc/", pid, "/map_files/", absl::Hex(v.start()),
                                              "-", absl::Hex(v.end()));
        if (::stat(link.c_str(), &st) != 0) {
          return ErrnoStatus(errno, absl::StrCat("reading ", link));
        }
        shmid = st.st_ino;
      }
      SharedSegment& seg = out[shmid];
      ++seg.maps;
      if (seg.pid == 0) {
        seg.pid = pid;
        seg.start = v.start();
        seg.end = v.end();
        seg.pgoff = v.pgoff();
      }
      // As CRIU sizes a segment of anonymous mappings; a memfd's size is its file's (below).
      if (anon) seg.size = std::max(seg.size, v.pgoff() + (v.end() - v.start()));
    }
  }
  if (fs::Exists(fs::Join(dir, "memfd.img"))) {
    CRYO_ASSIGN_OR_RETURN(auto raw,
                          ReadImageEntries(dir, "memfd.img", kMemfdInodeMagic, true, kMaxMmImage));
    for (const auto& r : raw) {
      CRYO_ASSIGN_OR_RETURN(auto m, ParseEntry<::criu::memfd_inode_entry>(r, "memfd.img"));
      if (m.has_hugetlb_flag()) continue;  // CRIU dumps those itself
      SharedSegment& seg = out[m.shmid()];
      seg.size = m.size();
      if (seg.pid != 0) continue;
      // Held open only: find the descriptor.
      for (const auto& [pid, mm] : tasks) {
        for (const std::string& name : fs::ListNames(absl::StrCat("/proc/", pid, "/fd"))) {
          struct stat st;
          int n = 0;
          if (!absl::SimpleAtoi(name, &n) ||
              ::stat(absl::StrCat("/proc/", pid, "/fd/", name).c_str(), &st) != 0 ||
              !S_ISREG(st.st_mode) || static_cast<uint32_t>(st.st_ino) != m.shmid()) {
            continue;
          }
          seg.pid = pid;
          seg.fd = n;
          break;
        }
        if (seg.pid != 0) break;
      }
    }
  }
  return out;
}

}  // namespace

bool IsExternalAnonVma(uint32_t status, uint32_t flags) {
  constexpr uint32_t kNeed = vma::kRegular | vma::kAnonPrivate;
  constexpr uint32_t kNot = vma::kVdso | vma::kVvar | vma::kVsyscall | vma::kAioRing |
                            vma::kShadowStack | vma::kSysVIpc | vma::kSocket | vma::kMemfd |
                            vma::kFilePrivate | vma::kFileShared | vma::kAnonShared |
                            vma::kUnsupported;
  return (status & kNeed) == kNeed && (status & kNot) == 0 && (flags & MAP_HUGETLB) == 0;
}

struct AnonPagesCopy::State {
  std::string dir;
  int threads = 1;
  AnonPagesResult r;
  std::vector<std::unique_ptr<TaskPlan>> plans;
  std::vector<ChunkWork> work;
};

AnonPagesCopy::AnonPagesCopy() : s_(std::make_unique<State>()) {}
AnonPagesCopy::~AnonPagesCopy() = default;

namespace {

// Runs `one(chunk, buf, hash)` over `work` with `threads` threads: the first error stops them.
absl::Status EachChunk(std::vector<ChunkWork*>& work, int threads,
                       const std::function<absl::Status(ChunkWork&, char*, XXH3_state_t*)>& one) {
  return EachIndexWith(work.size(), threads, [&] {
    std::shared_ptr<char[]> buf(new char[kPieceBytes]);  // where a file is not mapped
    std::shared_ptr<XXH3_state_t> hash(XXH3_createState(), &XXH3_freeState);
    return [&work, &one, buf, hash](size_t i) { return one(*work[i], buf.get(), hash.get()); };
  });
}

// A chunk done: its checksum kept, and (where mapped) its page tables dropped now, in parallel
// (mmap_lock taken for reading), not in one munmap of the whole file at the end.
void ChunkDone(ChunkWork& w, XXH3_state_t* hash) {
  TaskPlan& t = *w.task;
  t.chunks[w.index] = XXH3_128bits_digest(hash);
  if (t.map == nullptr) return;
  const uint64_t b = w.index * xxh3chunked::kChunk;
  const uint64_t e = std::min<uint64_t>(b + xxh3chunked::kChunk, t.out_bytes);
  ::madvise(t.map + b, (e - b + kPage - 1) / kPage * kPage, MADV_DONTNEED);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AnonPagesCopy>> AnonPagesCopy::WhileFrozen(
    const std::string& images_dir, int threads, const PreCopy* ahead, PagesPool* pool) {
  std::unique_ptr<AnonPagesCopy> c(new AnonPagesCopy());
  State& st = *c->s_;
  st.dir = images_dir;
  st.threads = threads;
  AnonPagesResult& r = st.r;
  const absl::Time t0 = absl::Now();
  CRYO_ASSIGN_OR_RETURN(
      auto tree, ReadImageEntries(images_dir, "pstree.img", kPstreeMagic, true, kMaxPstreeImage));
  const uint64_t zero_pfn = ZeroPagePfn();
  std::vector<std::unique_ptr<TaskPlan>>& plans = st.plans;
  // Each task, then each shared segment, planned by the copy's threads at once: reading the
  // tasks' pagemaps and opening the pages images took 0.17 s for a 4-rank job frozen meanwhile
  // (docs/benchmarks.md). The plans keep the images' order.
  struct TaskIn {
    pid_t pid = 0;
    ::criu::mm_entry mm;
    std::unique_ptr<TaskPlan> plan;
    bool criu_did_it = false;
    uint64_t ahead_bytes = 0;
  };
  std::vector<TaskIn> ins;
  for (const auto& raw : tree) {
    CRYO_ASSIGN_OR_RETURN(auto pe, ParseEntry<::criu::pstree_entry>(raw, "pstree.img"));
    const pid_t pid = static_cast<pid_t>(pe.pid());
    // A zombie has no memory, and no mm image.
    if (!fs::Exists(fs::Join(images_dir, absl::StrCat("mm-", pid, ".img")))) continue;
    ins.emplace_back().pid = pid;
  }
  CRYO_RETURN_IF_ERROR(EachIndex(ins.size(), threads, [&](size_t i) -> absl::Status {
    TaskIn& in = ins[i];
    CRYO_ASSIGN_OR_RETURN(in.mm, ReadMm(images_dir, in.pid));
    in.plan = std::make_unique<TaskPlan>();
    in.plan->pool = pool;
    bool use_scan = true;  // this call's: an older kernel's answer is found by each
    const PreCopy::Task* task_ahead = ahead != nullptr ? ahead->Find(in.pid) : nullptr;
    return PlanTask(images_dir, in.pid, in.mm, zero_pfn, &use_scan, task_ahead, in.plan.get(),
                    &in.criu_did_it, &in.ahead_bytes);
  }));
  std::vector<std::pair<pid_t, ::criu::mm_entry>> tasks;  // those planned, with their mappings
  for (TaskIn& in : ins) {
    r.ahead_bytes += in.ahead_bytes;
    if (in.criu_did_it) {
      ++r.left_to_criu;
      continue;
    }
    plans.push_back(std::move(in.plan));
    tasks.emplace_back(in.pid, std::move(in.mm));
  }
  CRYO_ASSIGN_OR_RETURN(auto found, FindShared(images_dir, tasks));
  const std::vector<std::pair<uint64_t, SharedSegment>> shared(found.begin(), found.end());
  std::vector<std::unique_ptr<TaskPlan>> shared_plans(shared.size());
  std::vector<uint64_t> shared_ahead(shared.size(), 0);
  CRYO_RETURN_IF_ERROR(EachIndex(shared.size(), threads, [&](size_t i) {
    shared_plans[i] = std::make_unique<TaskPlan>();
    shared_plans[i]->pool = pool;
    return PlanShared(images_dir, shared[i].first, shared[i].second, ahead, shared_plans[i].get(),
                      &shared_ahead[i]);
  }));
  for (size_t i = 0; i < shared.size(); ++i) {
    r.ahead_bytes += shared_ahead[i];
    if (!shared_plans[i]->pagemap.empty()) plans.push_back(std::move(shared_plans[i]));
  }
  r.scan = absl::Now() - t0;
  for (const auto& t : plans) {
    if (!t->pooled) continue;
    ++r.pooled;
    r.pooled_bytes += std::min(t->pooled->bytes, t->out_bytes);
  }

  std::vector<ChunkWork>& work = st.work;
  for (auto& t : plans) {
    t->chunks.assign(
        std::max<uint64_t>(1, (t->out_bytes + xxh3chunked::kChunk - 1) / xxh3chunked::kChunk),
        XXH128_hash_t{});
    for (size_t k = 0; k < t->chunks.size(); ++k)
      work.push_back(ChunkWork{t.get(), k, {}, 0, false});
    ChunkWork* first = &work[work.size() - t->chunks.size()];
    uint64_t out = 0;
    for (const Segment& s : t->segments) {
      if (!s.has_data) continue;
      const uint64_t len = static_cast<uint64_t>(s.entry.nr_pages()) * kPage;
      for (uint64_t done = 0; done < len;) {
        // Pieces end at checksum chunk boundaries (both are multiples of the page).
        const uint64_t at = out + done;
        const uint64_t chunk_end = (at / xxh3chunked::kChunk + 1) * xxh3chunked::kChunk;
        const uint64_t n = std::min({kPieceBytes, len - done, chunk_end - at});
        ChunkWork& w = first[at / xxh3chunked::kChunk];
        w.pieces.push_back(Piece{t.get(), at, n, s.from_task, s.src + done,
                                 s.ahead != nullptr ? s.ahead + done : nullptr});
        w.bytes += n;
        if (s.ahead != nullptr) {
          w.ahead = true;
        } else if (s.from_task) {
          r.bytes += n;
        }
        done += n;
      }
      out += len;
    }
  }
  // The largest first, so that no thread is left with a long one at the end.
  std::stable_sort(work.begin(), work.end(),
                   [](const ChunkWork& a, const ChunkWork& b) { return a.bytes > b.bytes; });
  const absl::Time t1 = absl::Now();
  const uint64_t huge_before = ShmemHugeBytes();
  const bool verify = ahead != nullptr && PreCopyVerify();
  std::atomic<uint64_t> mismatches{0};
  std::vector<ChunkWork*> all;
  for (ChunkWork& w : work) all.push_back(&w);
  CRYO_RETURN_IF_ERROR(
      EachChunk(all, threads, [&](ChunkWork& w, char* buf, XXH3_state_t* hash) -> absl::Status {
        // A chunk with pages from the copy ahead is checksummed after the thaw, as a whole.
        XXH3_128bits_reset(hash);
        for (const Piece& p : w.pieces) {
          CRYO_RETURN_IF_ERROR(CopyPiece(p, buf, w.ahead ? nullptr : hash));
          if (verify && p.ahead != nullptr) mismatches += AheadMismatches(p, buf);
        }
        if (!w.ahead) ChunkDone(w, hash);
        return absl::OkStatus();
      }));
  r.copy = absl::Now() - t1;
  const uint64_t huge_after = ShmemHugeBytes();
  r.huge_bytes = huge_after > huge_before ? huge_after - huge_before : 0;
  r.ahead_mismatches = mismatches.load();
  return c;
}

absl::StatusOr<AnonPagesResult> AnonPagesCopy::Finish() {
  State& st = *s_;
  AnonPagesResult& r = st.r;
  const absl::Time t0 = absl::Now();
  std::vector<ChunkWork*> ahead;
  for (ChunkWork& w : st.work) {
    if (w.ahead) ahead.push_back(&w);
  }
  CRYO_RETURN_IF_ERROR(
      EachChunk(ahead, st.threads, [](ChunkWork& w, char* buf, XXH3_state_t* hash) {
        XXH3_128bits_reset(hash);
        for (const Piece& p : w.pieces) {
          if (p.ahead != nullptr) {
            CRYO_RETURN_IF_ERROR(CopyPiece(p, buf, hash, /*ahead=*/true));
          } else {
            // Copied while frozen: in the mapping already (CopyPiece insists on one).
            XXH3_128bits_update(hash, p.task->map + p.out, p.len);
          }
        }
        ChunkDone(w, hash);
        return absl::OkStatus();
      }));
  r.after_thaw = absl::Now() - t0;

  const absl::Time t2 = absl::Now();
  const std::string& images_dir = st.dir;
  for (auto& t : st.plans) {
    ::criu::pagemap_head head;
    head.set_pages_id(t->pages_id);
    std::vector<const google::protobuf::MessageLite*> entries{&head};
    for (const Segment& s : t->segments) entries.push_back(&s.entry);
    const std::string image = FrameImage({kImgCommonMagic, kPagemapMagic}, entries);
    CRYO_ASSIGN_OR_RETURN(UniqueFd pm, OpenUnnamed(images_dir));
    CRYO_RETURN_IF_ERROR(WriteAll(pm.get(), image.data(), image.size(), 0, "writing a pagemap"));
    if (t->pooled) {
      // In place of CRIU's, at once (the pool is in the same tmpfs).
      const std::string to = fs::Join(images_dir, PagesName(t->pages_id));
      if (::rename(t->pooled->path.c_str(), to.c_str()) != 0) {
        return ErrnoStatus(errno, absl::StrCat("writing ", PagesName(t->pages_id)));
      }
      t->pooled.reset();
    } else {
      CRYO_RETURN_IF_ERROR(NameFile(t->new_pages.get(), images_dir, PagesName(t->pages_id)));
    }
    CRYO_RETURN_IF_ERROR(NameFile(pm.get(), images_dir, t->pagemap));
    r.pages[PagesName(t->pages_id)] = FileDigest{t->out_bytes, xxh3chunked::Combine(t->chunks)};
    r.pagemaps.push_back(t->pagemap);
    ++(t->shm.ok() ? r.segments : r.tasks);
  }
  r.replace = absl::Now() - t2;
  // What CRIU still copied itself: its pages images of other memory (shared, file-backed).
  for (const std::string& name : fs::ListNames(images_dir)) {
    struct stat sb;
    if (name.rfind("pages-", 0) != 0 || r.pages.count(name) != 0 ||
        ::stat(fs::Join(images_dir, name).c_str(), &sb) != 0) {
      continue;
    }
    r.criu_bytes += static_cast<uint64_t>(sb.st_size);
  }
  for (const auto& t : st.plans) {
    for (const Segment& s : t->segments) {
      if (s.has_data && !s.from_task && s.ahead == nullptr) {
        r.criu_bytes += uint64_t{s.entry.nr_pages()} * kPage;
      }
    }
  }
  st.plans.clear();  // unmaps the new files
  return std::move(r);
}

absl::StatusOr<AnonPagesResult> WriteAnonPages(const std::string& images_dir, int threads,
                                               const PreCopy* ahead, PagesPool* pool) {
  CRYO_ASSIGN_OR_RETURN(auto c, AnonPagesCopy::WhileFrozen(images_dir, threads, ahead, pool));
  return c->Finish();
}

}  // namespace cryo::criu
