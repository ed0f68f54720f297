#pragma once

// Which pages of a task's address range hold data, read from /proc/<pid>/pagemap: with the
// PAGEMAP_SCAN ioctl (Linux 6.7) where the kernel has it, page by page where it does not. Shared
// by cryod's copy at CRIU's post-dump (anon_pages.h) and its copy ahead of the freeze
// (pre_copy.h).

#include <cstdint>
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

}  // namespace cryo::criu
