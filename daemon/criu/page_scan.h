#pragma once

// Which pages of a task's address range hold data, read from /proc/<pid>/pagemap: with the
// PAGEMAP_SCAN ioctl (Linux 6.7) where the kernel has it, page by page where it does not; and
// reading them. Shared by cryod's copy at CRIU's post-dump (anon_pages.h) and its copy ahead of
// the freeze (pre_copy.h).

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace cryo::criu {

inline constexpr uint64_t kPageBytes = 4096;

struct PageRun {
  uint64_t vaddr = 0;
  uint64_t pages = 0;
  bool written = false;  // ScanWritten: written since the range was write-protected
};

// Adds `pages` pages at `vaddr`, extending the last run where they follow it (and, for
// ScanWritten's runs, say the same of being written).
void AddPageRun(std::vector<PageRun>* runs, uint64_t vaddr, uint64_t pages, bool written = false);

// The pfn of the zero page, which CRIU never dumps. 0 when the kernel hides pfns (no
// CAP_SYS_ADMIN): every present page is then taken.
uint64_t ZeroPagePfn();

// The pages of [start, end) CRIU would dump: present or swapped, not the zero page. `use_scan`
// starts true and turns false on a kernel without PAGEMAP_SCAN.
absl::Status ScanRange(int pagemap, uint64_t start, uint64_t end, uint64_t zero_pfn, bool* use_scan,
                       std::vector<PageRun>* runs);

// The same pages of a mapping that a userfaultfd write-protects asynchronously (pre_copy.h),
// each run saying whether it was written since. With `protect`, write-protects the pages it
// reports as it goes (atomically with the report). FAILED_PRECONDITION when the mapping is not
// tracked so (not registered, or no longer: a new mapping in its place).
absl::Status ScanWritten(int pagemap, uint64_t start, uint64_t end, bool protect,
                         std::vector<PageRun>* runs);

// The same for a shared memory mapping (pre_copy.h's shared segments), over every page of
// [start, end): protecting holes too (the kernel keeps a marker), and calling a page written
// unless it is mapped or marked and not written (a hole may be a page written, then unmapped).
absl::Status ScanSharedWritten(int pagemap, uint64_t start, uint64_t end, bool protect,
                               std::vector<PageRun>* runs);

// `len` bytes of `fd` at `off`, whole (lib/base/io_all.h), into `dst`: DATA_LOSS naming `what`
// when the file ends first, its errno otherwise.
absl::Status PreadAll(int fd, char* dst, uint64_t len, uint64_t off, const std::string& what);

// Reads [addr, addr + len) of task `pid` into `dst`: process_vm_readv, then `mem` (the task's
// /proc/<pid>/mem, may be -1) for what that could not read (PROT_NONE pages, which the kernel
// still reads there). An error when some of it could not be read (unmapped, the task gone).
absl::Status ReadTaskMemory(pid_t pid, int mem, uint64_t addr, char* dst, uint64_t len);

}  // namespace cryo::criu
