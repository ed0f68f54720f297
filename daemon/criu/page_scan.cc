#include "daemon/criu/page_scan.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "lib/base/fd.h"
#include "lib/base/io_all.h"
#include "lib/base/status.h"

namespace cryo::criu {
namespace {

// /proc/<pid>/pagemap: one u64 per page.
constexpr uint64_t kPmPresent = 1ull << 63;
constexpr uint64_t kPmSwap = 1ull << 62;
constexpr uint64_t kPmPfnMask = (1ull << 55) - 1;

// PAGEMAP_SCAN (Linux 6.7, linux/fs.h; Debian 12's headers predate it).
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct PageRegion {
  uint64_t start, end, categories;
};
constexpr uint64_t kScanWpMatching = 1u << 0;
constexpr uint64_t kScanCheckWpAsync = 1u << 1;
constexpr uint64_t kPageIsWritten = 1u << 1;
constexpr uint64_t kPageIsFile = 1u << 2;
constexpr uint64_t kPageIsPresent = 1u << 3;
constexpr uint64_t kPageIsSwapped = 1u << 4;
constexpr uint64_t kPageIsPfnZero = 1u << 5;
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);  // NOLINT(runtime/int)

// One PAGEMAP_SCAN walk of [start, end) for the data pages (as CRIU takes them), calling
// `add(region)` for each; its errno on failure (0: done).
template <typename F>
int Scan(int pagemap, uint64_t start, uint64_t end, uint64_t flags, uint64_t returned, F add,
         bool every_page = false) {
  std::vector<PageRegion> regions(4096);
  for (uint64_t at = start; at < end;) {
    PmScanArg a{};
    a.size = sizeof(a);
    a.flags = flags;
    a.start = at;
    a.end = end;
    a.vec = reinterpret_cast<uintptr_t>(regions.data());
    a.vec_len = regions.size();
    if (!every_page) {
      a.category_inverted = kPageIsPfnZero | kPageIsFile;
      a.category_mask = kPageIsPfnZero | kPageIsFile;
      a.category_anyof_mask = kPageIsPresent | kPageIsSwapped;
    }
    a.return_mask = returned;
    const int n = ::ioctl(pagemap, kPagemapScan, &a);
    if (n < 0) return errno;
    for (int i = 0; i < n; ++i) add(regions[i]);
    if (a.walk_end <= at) return EIO;  // no progress
    at = a.walk_end;
  }
  return 0;
}

}  // namespace

void AddPageRun(std::vector<PageRun>* runs, uint64_t vaddr, uint64_t pages, bool written) {
  if (!runs->empty() && runs->back().vaddr + runs->back().pages * kPageBytes == vaddr &&
      runs->back().written == written) {
    runs->back().pages += pages;
  } else {
    runs->push_back(PageRun{vaddr, pages, written});
  }
}

uint64_t ZeroPagePfn() {
  void* p = ::mmap(nullptr, kPageBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  (void)*static_cast<volatile const char*>(p);
  uint64_t e = 0;
  const UniqueFd fd(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (fd.ok()) {
    const off_t off = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / kPageBytes * 8);
    if (::pread(fd.get(), &e, sizeof(e), off) != sizeof(e)) e = 0;
  }
  ::munmap(p, kPageBytes);
  return (e & kPmPresent) ? (e & kPmPfnMask) : 0;
}

absl::Status ScanRange(int pagemap, uint64_t start, uint64_t end, uint64_t zero_pfn, bool* use_scan,
                       std::vector<PageRun>* runs) {
  if (*use_scan) {
    const size_t before = runs->size();
    const int err = Scan(
        pagemap, start, end, 0, kPageIsPresent | kPageIsSwapped,
        [&](const PageRegion& r) { AddPageRun(runs, r.start, (r.end - r.start) / kPageBytes); });
    if (err == 0) return absl::OkStatus();
    if ((err != EINVAL && err != ENOTTY) || runs->size() != before) {
      return ErrnoStatus(err, "PAGEMAP_SCAN");
    }
    *use_scan = false;  // an older kernel: read the pagemap page by page below
  }
  std::vector<uint64_t> buf(65536);
  for (uint64_t at = start; at < end;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), (end - at) / kPageBytes);
    const ssize_t got =
        ::pread(pagemap, buf.data(), n * 8, static_cast<off_t>(at / kPageBytes * 8));
    if (got < 0) return ErrnoStatus(errno, "reading the pagemap");
    if (got == 0) return absl::InternalError("the pagemap ended early");
    const uint64_t entries = static_cast<uint64_t>(got) / 8;
    for (uint64_t i = 0; i < entries; ++i) {
      const uint64_t e = buf[i];
      const bool dump =
          (e & kPmSwap) || ((e & kPmPresent) && !(zero_pfn != 0 && (e & kPmPfnMask) == zero_pfn));
      if (dump) AddPageRun(runs, at + i * kPageBytes, 1);
    }
    at += entries * kPageBytes;
  }
  return absl::OkStatus();
}

absl::Status ScanWritten(int pagemap, uint64_t start, uint64_t end, bool protect,
                         std::vector<PageRun>* runs) {
  const size_t before = runs->size();
  const int err = Scan(pagemap, start, end, kScanCheckWpAsync | (protect ? kScanWpMatching : 0),
                       kPageIsPresent | kPageIsSwapped | kPageIsWritten, [&](const PageRegion& r) {
                         AddPageRun(runs, r.start, (r.end - r.start) / kPageBytes,
                                    (r.categories & kPageIsWritten) != 0);
                       });
  if (err == 0) return absl::OkStatus();
  runs->resize(before);
  // EPERM: a mapping of the range is not write-protected asynchronously by a userfaultfd.
  if (err == EPERM) return absl::FailedPreconditionError("not tracked");
  return ErrnoStatus(err, "PAGEMAP_SCAN of written pages");
}

absl::Status ScanSharedWritten(int pagemap, uint64_t start, uint64_t end, bool protect,
                               std::vector<PageRun>* runs) {
  const size_t before = runs->size();
  const int err = Scan(
      pagemap, start, end, kScanCheckWpAsync | (protect ? kScanWpMatching : 0),
      kPageIsPresent | kPageIsSwapped | kPageIsWritten,
      [&](const PageRegion& r) {
        // A page mapped (or its protection kept by a marker when unmapped) and not written is
        // the only one known unwritten; a hole may be a written page unmapped since.
        const bool known = (r.categories & (kPageIsPresent | kPageIsSwapped)) != 0;
        AddPageRun(runs, r.start, (r.end - r.start) / kPageBytes,
                   !known || (r.categories & kPageIsWritten) != 0);
      },
      /*every_page=*/true);
  if (err == 0) return absl::OkStatus();
  runs->resize(before);
  if (err == EPERM) return absl::FailedPreconditionError("not tracked");
  return ErrnoStatus(err, "PAGEMAP_SCAN of written shared pages");
}

absl::Status PreadAll(int fd, char* dst, uint64_t len, uint64_t off, const std::string& what) {
  std::string err;
  errno = 0;
  if (io::ReadAll(fd, dst, len, static_cast<off_t>(off), &err)) return absl::OkStatus();
  if (errno == 0) return absl::DataLossError(absl::StrCat(what, ": ended early"));
  return ErrnoStatus(errno, what);
}

absl::Status ReadTaskMemory(pid_t pid, int mem, uint64_t addr, char* dst, uint64_t len) {
  iovec local{dst, len};
  iovec remote{reinterpret_cast<void*>(addr), len};
  const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  const uint64_t got = n > 0 ? static_cast<uint64_t>(n) : 0;
  if (got == len) return absl::OkStatus();
  const std::string what =
      absl::StrCat("reading the memory of pid ", pid, " at 0x", absl::Hex(addr + got));
  if (mem < 0) return ErrnoStatus(n < 0 ? errno : EFAULT, what);
  return PreadAll(mem, dst + got, len - got, addr + got, what);
}

}  // namespace cryo::criu
