// The fast-path library's bookkeeping and its moves, over the fake CUDA driver in-process: what
// it owns, the handles the job sees, a drain that frees the (fake) GPU and a refill that puts
// every byte back at the same address, files with the store's checksums, and the failures that
// must leave the job's memory intact.

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <tuple>
#include <vector>

#include "daemon/gpu/host_copy.h"
#include "daemon/gpu/progress_page.h"
#include "daemon/store/checksum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/fd.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "lib/contract/gpu_fastpath_wire.h"
#include "lib/contract/hex.h"
#include "plugins/fastpath/control.h"
#include "plugins/fastpath/gate.h"
#include "plugins/fastpath/legacy_ipc.h"
#include "plugins/fastpath/mover.h"
#include "plugins/fastpath/registry.h"
#include "test/fakes/cuda/fake_cuda.h"

namespace cryo::fastpath {
namespace {

using ::testing::HasSubstr;
constexpr size_t kMiB = 1 << 20;

uint64_t Word(uint64_t seed, size_t i) { return (seed * 0x9E3779B97F4A7C15ull) ^ (i * 31 + 7); }

void Fill(CUdeviceptr p, size_t bytes, uint64_t seed) {
  auto* w = reinterpret_cast<uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) w[i] = Word(seed, i);
}

bool Holds(CUdeviceptr p, size_t bytes, uint64_t seed) {
  auto* w = reinterpret_cast<const uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) {
    if (w[i] != Word(seed, i)) return false;
  }
  return true;
}

class FastpathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = testing::FakeDriver();
    CUcontext c = nullptr;
    ASSERT_EQ(d_.cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
    ASSERT_EQ(d_.cuCtxSetCurrent(c), CUDA_SUCCESS);
    base_used_ = fake_cuda_used_bytes(0);
    reg_ = std::make_unique<Registry>(d_, 2 * kMiB);
    MoverConfig cfg;
    cfg.ring_slot_bytes = 4 * kMiB;  // small, so that copies go through the ring many times
    cfg.read_bytes = 2 * kMiB;
    mover_ = std::make_unique<Mover>(d_, *reg_, gate_, capture_, cfg);
    dir_ = std::filesystem::temp_directory_path() /
           ("cryo-fastpath-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  uint64_t Used() { return fake_cuda_used_bytes(0) - base_used_; }

  // A job's own VMM allocation (as PyTorch's expandable segments make them), through the
  // library: reserve, create, map, allow access.
  // `where` CU_MEM_LOCATION_TYPE_HOST_NUMA: host memory, as NCCL's SHM transport makes it.
  CUdeviceptr JobVmm(size_t bytes, CUmemGenericAllocationHandle* handle,
                     CUmemLocationType where = CU_MEM_LOCATION_TYPE_DEVICE) {
    CUdeviceptr va = 0;
    EXPECT_EQ(d_.cuMemAddressReserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = where;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // exportable
    EXPECT_EQ(reg_->MemCreate(handle, bytes, &prop, 0), CUDA_SUCCESS);
    EXPECT_EQ(reg_->MemMap(va, bytes, 0, *handle, 0), CUDA_SUCCESS);
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_EQ(reg_->MemSetAccess(va, bytes, &a, 1), CUDA_SUCCESS);
    return va;
  }

  std::vector<int> OpenFiles(int n, int flags) {
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
      std::string p = (dir_ / ("part-" + std::to_string(i))).string();
      fds.push_back(::open(p.c_str(), flags | O_CLOEXEC, 0600));
      EXPECT_GE(fds.back(), 0) << p;
    }
    return fds;
  }

  Driver d_;
  uint64_t base_used_ = 0;
  Gate gate_;
  CaptureGate capture_;
  std::unique_ptr<Registry> reg_;
  std::unique_ptr<Mover> mover_;
  std::filesystem::path dir_;
};

TEST_F(FastpathTest, ALargeCudaMallocIsOwnedAndAnswersQueriesWithTheSizeAskedFor) {
  CUdeviceptr p = 0;
  const size_t asked = 3 * kMiB + 100;
  ASSERT_EQ(reg_->MemAlloc(&p, asked), CUDA_SUCCESS);
  RegistryStats st = reg_->Stats();
  EXPECT_EQ(st.owned_allocations, 1u);
  EXPECT_EQ(st.owned_cumemalloc, 1u);
  EXPECT_EQ(st.owned_bytes, 4 * kMiB) << "backed in whole 2 MiB granules";
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_TRUE(reg_->OwnedRange(p + 1000, &base, &size));
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, asked);
  EXPECT_TRUE(reg_->InOwnedPadding(p + asked + 8));
  EXPECT_FALSE(reg_->InOwnedPadding(p + asked - 8));
  Fill(p, 3 * kMiB, 1);  // the memory is there and writable
  EXPECT_EQ(reg_->MemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(reg_->Stats().owned_allocations, 0u);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(FastpathTest, SmallAllocationsStayWithTheDriver) {
  CUdeviceptr p = 0;
  ASSERT_EQ(reg_->MemAlloc(&p, 64 << 10), CUDA_SUCCESS);
  EXPECT_EQ(reg_->Stats().owned_allocations, 0u);
  EXPECT_FALSE(reg_->OwnedRange(p, nullptr, nullptr));
  EXPECT_EQ(reg_->MemFree(p), CUDA_SUCCESS);
}

TEST_F(FastpathTest, TheJobsOwnVmmHandlesAreTheLibrarysAndKeepTheDriversSemantics) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = JobVmm(4 * kMiB, &h);
  EXPECT_EQ(h & Registry::kHandleMask, Registry::kHandleTag);
  EXPECT_NE(reg_->Translate(h), h);
  CUmemAllocationProp prop{};
  // A handle the job never got from the library passes through untouched.
  EXPECT_EQ(reg_->Translate(0x1234), 0x1234u);
  Fill(va, 4 * kMiB, 2);
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(reg_->MemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + 5)), CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  // Two references now; releasing both while mapped keeps the memory (the mapping holds it).
  EXPECT_EQ(reg_->MemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(reg_->MemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(reg_->MemRelease(h), CUDA_ERROR_INVALID_VALUE) << "no reference left";
  EXPECT_TRUE(Holds(va, 4 * kMiB, 2));
  EXPECT_EQ(Used(), 4 * kMiB);
  EXPECT_EQ(reg_->MemUnmap(va, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 0u) << "unmapped and released: freed";
  EXPECT_EQ(reg_->Stats().owned_allocations, 0u);
  d_.cuMemAddressFree(va, 4 * kMiB);
  (void)prop;
}

TEST_F(FastpathTest, ACudaMallocPointerCannotBeUnmappedOrExported) {
  CUdeviceptr p = 0;
  ASSERT_EQ(reg_->MemAlloc(&p, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(reg_->MemUnmap(p, 4 * kMiB), CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(reg_->MemRetainAllocationHandle(&h, reinterpret_cast<void*>(p)),
            CUDA_ERROR_INVALID_VALUE);
  Fill(p, 4 * kMiB, 3);  // still mapped
  EXPECT_EQ(reg_->MemFree(p), CUDA_SUCCESS);
}

// The job's memory: two cudaMallocs, one of its own VMM allocations, one small allocation.
struct JobMemory {
  CUdeviceptr a = 0, b = 0, vmm = 0, small = 0;
  CUmemGenericAllocationHandle h = 0;
};

// Another process's library (registry, gates, mover), for the sharing tests.
struct PeerLibrary {
  explicit PeerLibrary(const Driver& d) : reg(d, 2 << 20), mover(d, reg, gate, capture) {}
  Registry reg;
  Gate gate;
  CaptureGate capture;
  Mover mover;
};

class FastpathMoveTest : public FastpathTest {
 protected:
  // NCCL's P2P and SHM transports: the job's allocation exported as a POSIX descriptor (-1 when
  // it cannot be), which the peer imports, maps and makes accessible to its device.
  int ExportAsNcclDoes(CUmemGenericAllocationHandle h) {
    int fd = -1;
    EXPECT_EQ(d_.cuMemExportToShareableHandle(&fd, reg_->Translate(h),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_SUCCESS);
    if (fd >= 0) reg_->Exported(h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, &fd);
    return fd;
  }
  CUdeviceptr ImportAsNcclDoes(Registry& peer, int fd, size_t bytes,
                               CUmemGenericAllocationHandle* ih) {
    EXPECT_EQ(peer.MemImport(ih, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_SUCCESS);
    ::close(fd);  // as NCCL does once imported
    CUdeviceptr va = 0;
    EXPECT_EQ(d_.cuMemAddressReserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (peer.MemMap(va, bytes, 0, *ih, 0) != CUDA_SUCCESS ||
        peer.MemSetAccess(va, bytes, &a, 1) != CUDA_SUCCESS) {
      ADD_FAILURE() << "the import could not be mapped";
      return 0;
    }
    return va;
  }

  JobMemory Allocate() {
    JobMemory m;
    EXPECT_EQ(reg_->MemAlloc(&m.a, 8 * kMiB), CUDA_SUCCESS);
    EXPECT_EQ(reg_->MemAlloc(&m.b, 6 * kMiB), CUDA_SUCCESS);
    m.vmm = JobVmm(10 * kMiB, &m.h);
    EXPECT_EQ(reg_->MemAlloc(&m.small, 64 << 10), CUDA_SUCCESS);
    Fill(m.a, 8 * kMiB, 11);
    Fill(m.b, 6 * kMiB, 12);
    Fill(m.vmm, 10 * kMiB, 13);
    Fill(m.small, 64 << 10, 14);
    return m;
  }
  // After a drain into cryod's memory `memfd`: the save finished, and the refill from it.
  void SaveAndRefillFrom(int memfd) {
    SaveResult s;
    ASSERT_TRUE(mover_->FinishSave(&s).ok());
    RefillOptions ro;
    ro.memfd = memfd;
    RefillResult rr;
    ASSERT_TRUE(mover_->Refill(ro, &rr).ok());
  }
  void ExpectIntact(const JobMemory& m) {
    EXPECT_TRUE(Holds(m.a, 8 * kMiB, 11));
    EXPECT_TRUE(Holds(m.b, 6 * kMiB, 12));
    EXPECT_TRUE(Holds(m.vmm, 10 * kMiB, 13));
    EXPECT_TRUE(Holds(m.small, 64 << 10, 14));
  }
  void Free(const JobMemory& m) {
    reg_->MemFree(m.a);
    reg_->MemFree(m.b);
    reg_->MemFree(m.small);
    reg_->MemUnmap(m.vmm, 10 * kMiB);
    reg_->MemRelease(m.h);
    d_.cuMemAddressFree(m.vmm, 10 * kMiB);
  }
};

TEST_F(FastpathMoveTest, ADrainFreesTheGpuAndARefillPutsEveryByteBackAtTheSameAddresses) {
  JobMemory m = Allocate();
  EXPECT_EQ(Used(), 24 * kMiB + (64 << 10));
  DrainOptions opt;
  opt.threads = 3;
  DrainResult r;
  Result o = mover_->Drain(opt, &r);
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(mover_->state(), State::kDrained);
  EXPECT_EQ(r.bytes, 24 * kMiB);
  EXPECT_EQ(r.allocations, 3u);
  EXPECT_EQ(Used(), 64u << 10) << "only what the library does not own is left on the GPU";
  EXPECT_TRUE(gate_.shut());
  RefillResult rr;
  o = mover_->Refill(RefillOptions{}, &rr);
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(mover_->state(), State::kRunning);
  EXPECT_FALSE(gate_.shut());
  EXPECT_EQ(Used(), 24 * kMiB + (64 << 10));
  ExpectIntact(m);
  // The job's handle still works after its memory was made anew.
  CUmemGenericAllocationHandle again = 0;
  EXPECT_EQ(reg_->MemRetainAllocationHandle(&again, reinterpret_cast<void*>(m.vmm)), CUDA_SUCCESS);
  EXPECT_EQ(again, m.h);
  EXPECT_EQ(reg_->MemRelease(again), CUDA_SUCCESS);
  Free(m);
  EXPECT_EQ(Used(), 0u);
}

// Driver calls that fail after a number of good ones (the Driver table is the test's own).
std::atomic<int> g_calls_left{0};
CUresult FailingCopyOut(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  if (g_calls_left.fetch_sub(1) <= 0) return CUDA_ERROR_ILLEGAL_ADDRESS;
  return ::cuMemcpyDtoHAsync_v2(dst, src, n, s);
}
CUresult FailingUnmap(CUdeviceptr va, size_t n) {
  if (g_calls_left.fetch_sub(1) <= 0) return CUDA_ERROR_INVALID_VALUE;
  return ::cuMemUnmap(va, n);
}

// A drain that fails half way takes back what it did, newest first: the writers stopped, the
// host copies freed, the gates open, every byte where it was (issue 21: the mover's cleanups as
// one undo stack).
TEST_F(FastpathMoveTest, ACopyThatFailsHalfWayLeavesTheJobAsItWas) {
  JobMemory m = Allocate();
  const uint64_t used = Used();
  g_calls_left = 3;  // the fourth 2 MiB piece fails
  d_.cuMemcpyDtoHAsync_v2 = &FailingCopyOut;
  std::vector<int> fds = OpenFiles(2, O_RDWR | O_CREAT | O_TRUNC);
  DrainOptions opt;
  opt.fds = fds;
  DrainResult r;
  Result o = mover_->Drain(opt, &r);
  d_ = testing::FakeDriver();
  CloseAll(fds);
  EXPECT_FALSE(o.ok());
  EXPECT_TRUE(o.rolled_back);
  EXPECT_NE(o.error.find("copying device memory out"), std::string::npos) << o.error;
  EXPECT_EQ(mover_->state(), State::kRunning);
  EXPECT_FALSE(gate_.shut());
  EXPECT_EQ(Used(), used) << "the device memory never left";
  ExpectIntact(m);
  Free(m);
}

// A stop checkpoint's drain into cryod's memory, followed (gpu_fastpath.h, "Following"): the
// library says on cryod's progress page how much of the stream is in the memfd, and then that
// the copy succeeded; a copy that fails says so instead, and cryod keeps none of what it wrote.
TEST_F(FastpathMoveTest, AFollowedDrainSaysHowFarItIsAndThenWhetherItSucceeded) {
  namespace wire = contract::gpu_fastpath;
  JobMemory m = Allocate();
  uint64_t total = 0;
  for (bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "failing" : "succeeding");
    auto memfd = gpu::NewHostCopy(64 * kMiB, 2);
    ASSERT_TRUE(memfd.ok()) << memfd.status();
    auto page = gpu::ProgressPage::Make();
    ASSERT_TRUE(page.ok()) << page.status();
    if (fail) {
      g_calls_left = 3;  // the fourth piece fails
      d_.cuMemcpyDtoHAsync_v2 = &FailingCopyOut;
    }
    DrainOptions opt;
    opt.memfd = memfd->get();
    opt.progress = (*page)->fd();
    DrainResult r;
    Result o = mover_->Drain(opt, &r);
    d_ = testing::FakeDriver();
    if (fail) {
      EXPECT_FALSE(o.ok());
      EXPECT_EQ((*page)->verdict(), wire::kVerdictBad);
      EXPECT_LT((*page)->ready(), total) << "the stream stopped where the copy failed";
      auto st = (*page)->WaitVerdict({});
      EXPECT_FALSE(st.ok()) << "cryod's write behind it must fail";
      EXPECT_EQ(mover_->state(), State::kRunning);
      continue;
    }
    ASSERT_TRUE(o.ok()) << o.error;
    total = r.bytes;
    EXPECT_GT(total, 0u);
    EXPECT_EQ((*page)->ready(), total) << "all of the stream";
    EXPECT_EQ((*page)->verdict(), wire::kVerdictGood);
    EXPECT_TRUE((*page)->WaitReady(r.bytes, {}).ok());
    EXPECT_TRUE((*page)->WaitVerdict({}).ok());
    SaveAndRefillFrom(memfd->get());
  }
  ExpectIntact(m);
  Free(m);
}

// A drain into cryod's memory registered a window at a time says how far it is window by
// window, as the DMA finishes each, not only at its end: cryod's write behind it starts early.
const gpu::ProgressPage* g_page = nullptr;
std::vector<uint64_t> g_ready_when_asked;
CUresult RecordingEventQuery(CUevent e) {
  g_ready_when_asked.push_back(g_page->ready());
  return ::cuEventQuery(e);
}

TEST_F(FastpathMoveTest, AWindowedDrainSaysHowFarItIsWindowByWindow) {
  namespace wire = contract::gpu_fastpath;
  MoverConfig cfg;
  cfg.ring_slot_bytes = 2 * kMiB;
  cfg.register_windows = true;
  cfg.register_window_bytes = 8 * kMiB;
  mover_ = std::make_unique<Mover>(d_, *reg_, gate_, capture_, cfg);
  JobMemory m = Allocate();
  auto memfd = gpu::NewHostCopy(64 * kMiB, 2);
  ASSERT_TRUE(memfd.ok()) << memfd.status();
  auto page = gpu::ProgressPage::Make();
  ASSERT_TRUE(page.ok()) << page.status();
  g_page = page->get();
  g_ready_when_asked.clear();
  d_.cuEventQuery = &RecordingEventQuery;
  DrainOptions opt;
  opt.memfd = memfd->get();
  opt.progress = (*page)->fd();
  DrainResult r;
  const uint64_t dma_before = fake_cuda_registered_dma_bytes();
  Result o = mover_->Drain(opt, &r);
  d_ = testing::FakeDriver();
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(fake_cuda_registered_dma_bytes() - dma_before, r.bytes) << "some went by the ring";
  EXPECT_EQ(fake_cuda_registered_bytes(), 0u) << "cryod's memory is still registered";
  // Asked about each window's copies after its last piece: by then the ones before were told,
  // one window further each time.
  std::vector<uint64_t> told;
  for (uint64_t v : g_ready_when_asked) {
    if (told.empty() || told.back() != v) told.push_back(v);
  }
  ASSERT_GE(told.size(), 2u) << "told only at the end";
  for (size_t i = 0; i < told.size(); ++i) EXPECT_EQ(told[i], i * 8 * kMiB) << i;
  EXPECT_LT(told.back(), r.bytes);
  EXPECT_EQ((*page)->ready(), r.bytes) << "all of the stream at the end";
  EXPECT_EQ((*page)->verdict(), wire::kVerdictGood);
  SaveAndRefillFrom(memfd->get());
  ExpectIntact(m);
  Free(m);
}

TEST_F(FastpathMoveTest, AReleaseThatFailsHalfWayPutsEveryByteBackFromHostMemory) {
  JobMemory m = Allocate();
  const uint64_t used = Used();
  g_calls_left = 1;  // the second allocation's unmap fails, after the first one's memory went
  d_.cuMemUnmap = &FailingUnmap;
  DrainOptions opt;
  DrainResult r;
  Result o = mover_->Drain(opt, &r);
  d_ = testing::FakeDriver();
  EXPECT_FALSE(o.ok());
  EXPECT_TRUE(o.rolled_back) << o.error;
  EXPECT_NE(o.error.find("unmapping device memory"), std::string::npos) << o.error;
  EXPECT_EQ(mover_->state(), State::kRunning);
  EXPECT_FALSE(gate_.shut());
  EXPECT_EQ(Used(), used);
  ExpectIntact(m);
  Free(m);
}

TEST_F(FastpathMoveTest, FilesCarryTheStoresChecksumsAndRefillFromThem) {
  JobMemory m = Allocate();
  // 24 MiB over 4 MiB... the stripe must be the store's checksum chunk (64 MiB): one unit, in
  // file 0; files 1 and 2 stay empty and still get a checksum.
  std::vector<int> out = OpenFiles(3, O_WRONLY | O_CREAT | O_TRUNC);
  DrainOptions opt;
  opt.fds = out;
  DrainResult r;
  ASSERT_TRUE(mover_->Drain(opt, &r).ok());
  SaveResult s;
  Result o = mover_->FinishSave(&s);
  ASSERT_TRUE(o.ok()) << o.error;
  CloseAll(out);
  EXPECT_EQ(mover_->state(), State::kSaved);
  ASSERT_EQ(s.files.size(), 3u);
  uint64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    auto want = HashFile((dir_ / ("part-" + std::to_string(i))).string());
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(s.files[i].size, want->size) << i;
    EXPECT_EQ(s.files[i].checksum, want->checksum) << i;
    total += s.files[i].size;
  }
  EXPECT_EQ(total, 24 * kMiB);
  EXPECT_EQ(Used(), 64u << 10);

  // Without the files there is nothing to refill from.
  RefillResult rr;
  EXPECT_THAT(mover_->Refill(RefillOptions{}, &rr).error, HasSubstr("must be given"));
  std::vector<int> in = OpenFiles(3, O_RDONLY);
  RefillOptions ro;
  ro.fds = in;
  ro.expected = s.files;
  o = mover_->Refill(ro, &rr);
  CloseAll(in);
  ASSERT_TRUE(o.ok()) << o.error;
  ExpectIntact(m);
  EXPECT_FALSE(gate_.shut());
  Free(m);
}

TEST_F(FastpathMoveTest, AProcessThatOwnsNothingDrainsAndRefillsEmptyFiles) {
  // A launcher that loaded the library and touched CUDA but holds no device memory of its own
  // (seen: the parent of a PyTorch DDP job): nothing to copy, no context to pin buffers with.
  std::vector<int> out = OpenFiles(2, O_WRONLY | O_CREAT | O_TRUNC);
  DrainOptions opt;
  opt.fds = out;
  DrainResult r;
  ASSERT_TRUE(mover_->Drain(opt, &r).ok());
  EXPECT_EQ(r.bytes, 0u);
  SaveResult s;
  Result o = mover_->FinishSave(&s);
  ASSERT_TRUE(o.ok()) << o.error;
  CloseAll(out);
  ASSERT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.files[0].size, 0u);

  std::vector<int> in = OpenFiles(2, O_RDONLY);
  RefillOptions ro;
  ro.fds = in;
  ro.expected = s.files;
  RefillResult rr;
  o = mover_->Refill(ro, &rr);
  CloseAll(in);
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_FALSE(gate_.shut());
}

TEST_F(FastpathMoveTest, ManyUnitsStripeOverTheFilesAndComeBackInOrder) {
  // 200 MiB: units of 64 MiB go to files 0, 1, 0, 1 (the last one 8 MiB).
  std::vector<CUdeviceptr> ps(5);
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(reg_->MemAlloc(&ps[i], 40 * kMiB), CUDA_SUCCESS);
    Fill(ps[i], 40 * kMiB, 100 + i);
  }
  std::vector<int> out = OpenFiles(2, O_WRONLY | O_CREAT | O_TRUNC);
  DrainOptions opt;
  opt.fds = out;
  opt.threads = 4;
  DrainResult r;
  ASSERT_TRUE(mover_->Drain(opt, &r).ok());
  SaveResult s;
  ASSERT_TRUE(mover_->FinishSave(&s).ok());
  CloseAll(out);
  ASSERT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.files[0].size, 128 * kMiB);
  EXPECT_EQ(s.files[1].size, 72 * kMiB);
  std::vector<int> in = OpenFiles(2, O_RDONLY);
  RefillOptions ro;
  ro.fds = in;
  ro.expected = s.files;
  RefillResult rr;
  Result o = mover_->Refill(ro, &rr);
  CloseAll(in);
  ASSERT_TRUE(o.ok()) << o.error;
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(Holds(ps[i], 40 * kMiB, 100 + i)) << i;
    reg_->MemFree(ps[i]);
  }
}

// Whether this process maps cryod's host memory (the memfd NewHostCopy names).
bool MapsHostCopy() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("cryo-gpu-host-copy") != std::string::npos) return true;
  }
  return false;
}

// A leave-running drain into cryod's memory (gpu_fastpath.h, "Memory"): the job keeps no copy
// of the data (CRIU would dump it), the refill comes from cryod's memfd, and the files cryod
// writes from it refill the job (as a restore would) the way the library's own files do.
TEST_F(FastpathMoveTest, ADrainIntoCryodsMemoryLeavesTheJobNoCopyAndRefillsFromItOrItsFiles) {
  std::vector<CUdeviceptr> ps(5);
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(reg_->MemAlloc(&ps[i], 40 * kMiB), CUDA_SUCCESS);
    Fill(ps[i], 40 * kMiB, 200 + i);
  }
  auto intact = [&] {
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!Holds(ps[i], 40 * kMiB, 200 + i)) return false;
    }
    return true;
  };
  // With cryod's memory registered with the driver (the DMA straight into it), and through the
  // ring where the driver refuses that.
  for (bool registered : {true, false}) {
    SCOPED_TRACE(registered ? "registered" : "through the ring");
    MoverConfig cfg;
    cfg.ring_slot_bytes = 4 * kMiB;
    cfg.read_bytes = 2 * kMiB;
    cfg.register_host = registered;
    mover_ = std::make_unique<Mover>(d_, *reg_, gate_, capture_, cfg);
    // Sized from an older status: the library grows it to what it drains.
    auto memfd = gpu::NewHostCopy(100 * kMiB, 2);
    ASSERT_TRUE(memfd.ok()) << memfd.status();
    DrainOptions opt;
    opt.memfd = memfd->get();
    opt.threads = 4;
    DrainResult r;
    Result o = mover_->Drain(opt, &r);
    ASSERT_TRUE(o.ok()) << o.error;
    EXPECT_EQ(fake_cuda_registered_bytes(), registered ? 200 * kMiB : 0)
        << "until it lets go of it, the job has cryod's memory registered, or not at all";
    EXPECT_EQ(r.bytes, 200 * kMiB);
    EXPECT_EQ(Used(), 0u);
    SaveResult s;
    ASSERT_TRUE(mover_->FinishSave(&s).ok());
    EXPECT_EQ(mover_->state(), State::kSaved);
    EXPECT_TRUE(s.files.empty());
    EXPECT_FALSE(MapsHostCopy()) << "the job still maps cryod's memory: CRIU would dump it";
    EXPECT_EQ(fake_cuda_registered_bytes(), 0u) << "nor may the driver hold it";
    struct stat st;
    ASSERT_EQ(::fstat(memfd->get(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), 200 * kMiB);

    // cryod writes it into three files while the job runs on: units of 64 MiB go to files
    // 0, 1, 2, 0 (the last unit 8 MiB), each with the store's checksum.
    std::vector<int> out = OpenFiles(3, O_WRONLY | O_CREAT | O_TRUNC);
    auto sums = gpu::WriteHostCopy(memfd->get(), r.bytes, 64 * kMiB, out, {}, {});
    CloseAll(out);
    ASSERT_TRUE(sums.ok()) << sums.status();
    ASSERT_EQ(sums->size(), 3u);
    const uint64_t sizes[] = {72 * kMiB, 64 * kMiB, 64 * kMiB};
    for (int i = 0; i < 3; ++i) {
      auto want = HashFile((dir_ / ("part-" + std::to_string(i))).string());
      ASSERT_TRUE(want.ok());
      EXPECT_EQ((*sums)[i].digest.size, sizes[i]) << i;
      EXPECT_EQ((*sums)[i].digest.checksum, want->checksum) << i;
      EXPECT_TRUE((*sums)[i].skipped.empty()) << "nothing to refer to: every chunk written";
    }

    // Back from cryod's memory.
    RefillOptions ro;
    ro.memfd = memfd->get();
    RefillResult rr;
    o = mover_->Refill(ro, &rr);
    ASSERT_TRUE(o.ok()) << o.error;
    EXPECT_EQ(mover_->state(), State::kRunning);
    EXPECT_FALSE(gate_.shut());
    EXPECT_TRUE(intact());
    EXPECT_FALSE(MapsHostCopy());

    // Drained into memory again; this time the refill comes from cryod's files, as after a
    // restore, where the files' count is cryod's (not the drain's): every byte in its place.
    auto memfd2 = gpu::NewHostCopy(200 * kMiB, 2);
    ASSERT_TRUE(memfd2.ok());
    opt.memfd = memfd2->get();
    ASSERT_TRUE(mover_->Drain(opt, &r).ok());
    ASSERT_TRUE(mover_->FinishSave(&s).ok());
    EXPECT_FALSE(mover_->RollBackFromHost()) << "the data is only in cryod's memory now";
    std::vector<int> in = OpenFiles(3, O_RDONLY);
    RefillOptions from_files;
    from_files.fds = in;
    for (const auto& w : *sums) from_files.expected.push_back(w.digest);
    o = mover_->Refill(from_files, &rr);
    CloseAll(in);
    ASSERT_TRUE(o.ok()) << o.error;
    EXPECT_TRUE(intact());
    EXPECT_EQ(fake_cuda_registered_bytes(), 0u) << "cryod's memory is still registered";
  }
  for (CUdeviceptr p : ps) reg_->MemFree(p);
}

// cryod's parking process's memory (gpu_fastpath.h, "Parking"): exportable device memory on GPU
// 0 that another process would hold, mapped here as that process would to read it.
struct Park {
  Park(const Driver& d, size_t bytes) : d(d), bytes(bytes) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    EXPECT_EQ(d.cuMemCreate(&h, bytes, &prop, 0), CUDA_SUCCESS);
    int raw = -1;
    EXPECT_EQ(d.cuMemExportToShareableHandle(&raw, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_SUCCESS);
    fd.reset(raw);
    EXPECT_EQ(d.cuMemAddressReserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(d.cuMemMap(va, bytes, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_EQ(d.cuMemSetAccess(va, bytes, &a, 1), CUDA_SUCCESS);
  }
  ~Park() {
    d.cuMemUnmap(va, bytes);
    d.cuMemAddressFree(va, bytes);
    d.cuMemRelease(h);
  }
  const Driver& d;
  size_t bytes;
  CUmemGenericAllocationHandle h = 0;
  UniqueFd fd;
  CUdeviceptr va = 0;
};

// A leave-running drain parked on the GPU: the data goes within the GPU into cryod's park, at
// its place in the stream, the job's own device memory is released, and cryod's memfd and
// progress page are left alone (cryod's parking process fills them after the thaw). The refill
// copies it back from the park; a refill without the park copies it from the memfd once cryod
// has filled it (a rollback). A park on another GPU, or too small, is not used: the drain goes
// into the memfd as before.
TEST_F(FastpathMoveTest, AParkedDrainStaysOnTheGpuAndComesBackFromTheParkOrTheMemfd) {
  JobMemory m = Allocate();
  const std::string gpu0 = mover_->Device();
  EXPECT_EQ(gpu0, "0000:10:00.0") << "the fake's bus id of GPU 0";
  const uint64_t used = Used();
  Park park(d_, 24 * kMiB);
  auto memfd = gpu::NewHostCopy(24 * kMiB, 1);
  ASSERT_TRUE(memfd.ok()) << memfd.status();
  auto page = gpu::ProgressPage::Make();
  ASSERT_TRUE(page.ok()) << page.status();
  auto* host = static_cast<const uint64_t*>(
      ::mmap(nullptr, 24 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, memfd->get(), 0));
  ASSERT_NE(host, MAP_FAILED);
  DrainOptions opt;
  opt.memfd = memfd->get();
  opt.progress = (*page)->fd();
  opt.park = park.fd.get();
  opt.park_bytes = park.bytes;
  opt.park_device = gpu0;
  DrainResult r;
  Result o = mover_->Drain(opt, &r);
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_TRUE(r.parked);
  EXPECT_EQ(r.bytes, 24 * kMiB);
  EXPECT_EQ(Used(), used - 24 * kMiB + park.bytes) << "the job's memory is released, the park held";
  // The stream in the park: a (8 MiB), b (6 MiB), the VMM allocation (10 MiB), in that order.
  EXPECT_TRUE(Holds(park.va, 8 * kMiB, 11));
  EXPECT_TRUE(Holds(park.va + 8 * kMiB, 6 * kMiB, 12));
  EXPECT_TRUE(Holds(park.va + 14 * kMiB, 10 * kMiB, 13));
  EXPECT_EQ((*page)->ready(), 0u) << "the progress page is the parking process's";
  EXPECT_EQ((*page)->verdict(), contract::gpu_fastpath::kVerdictPending);
  EXPECT_EQ(host[0], 0u) << "nothing went into the memfd";
  SaveResult s;
  ASSERT_TRUE(mover_->FinishSave(&s).ok());
  EXPECT_EQ(mover_->state(), State::kSaved);
  // The park's memory changes nothing of the job's until the refill.
  RefillOptions ro;
  ro.memfd = memfd->get();
  ro.park = park.fd.get();
  ro.park_bytes = park.bytes;
  RefillResult rr;
  o = mover_->Refill(ro, &rr);
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(mover_->state(), State::kRunning);
  EXPECT_FALSE(gate_.shut());
  ExpectIntact(m);
  EXPECT_EQ(host[0], 0u) << "nor came anything from it";

  // Parked again; the refill comes from the memfd, filled from the park as cryod's parking
  // process does (the job's memory is changed first, so that only the memfd can bring it back).
  ASSERT_TRUE(mover_->Drain(opt, &r).ok());
  ASSERT_TRUE(r.parked);
  ASSERT_TRUE(mover_->FinishSave(&s).ok());
  std::memcpy(const_cast<uint64_t*>(host), reinterpret_cast<const void*>(park.va), 24 * kMiB);
  Fill(park.va, 24 * kMiB, 99);
  RefillOptions from_memfd;
  from_memfd.memfd = memfd->get();
  ASSERT_TRUE(mover_->Refill(from_memfd, &rr).ok());
  ExpectIntact(m);

  // A park on another GPU, or smaller than the data: into the memfd as without one.
  for (const auto& [device, bytes] :
       {std::pair<std::string, uint64_t>{"0000:11:00.0", park.bytes}, {gpu0, 20 * kMiB}}) {
    SCOPED_TRACE(device + " " + std::to_string(bytes));
    opt.park_device = device;
    opt.park_bytes = bytes;
    ASSERT_TRUE(mover_->Drain(opt, &r).ok());
    EXPECT_FALSE(r.parked);
    EXPECT_TRUE(Holds(reinterpret_cast<CUdeviceptr>(host), 8 * kMiB, 11)) << "the memfd has it";
    EXPECT_EQ((*page)->verdict(), contract::gpu_fastpath::kVerdictGood);
    ASSERT_TRUE(mover_->FinishSave(&s).ok());
    ASSERT_TRUE(mover_->Refill(from_memfd, &rr).ok());
    ExpectIntact(m);
    std::memset(const_cast<uint64_t*>(host), 0, 24 * kMiB);
  }
  ::munmap(const_cast<uint64_t*>(host), 24 * kMiB);
  Free(m);
}

// A restore's park that cryod filled from the store (gpu_fastpath.h, "Filled"): whatever the
// drain was, the refill copies the data from the park within the GPU. A filled park on another
// GPU, or smaller than the data, is refused before anything is copied, and the gate stays shut.
TEST_F(FastpathMoveTest, ARefillFromAFilledParkCopiesItWithinTheGpuOnlyOnItsOwnGpu) {
  JobMemory m = Allocate();
  const std::string gpu0 = mover_->Device();
  Park park(d_, 24 * kMiB);
  auto memfd = gpu::NewHostCopy(24 * kMiB, 1);
  ASSERT_TRUE(memfd.ok()) << memfd.status();
  DrainOptions opt;
  opt.memfd = memfd->get();
  DrainResult r;
  Result o = mover_->Drain(opt, &r);
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_FALSE(r.parked);
  SaveResult s;
  ASSERT_TRUE(mover_->FinishSave(&s).ok());
  // The stream, as the parking process reads it from the files; the memfd is then spoiled, so
  // that only the park can bring the data back.
  auto* host = static_cast<uint64_t*>(
      ::mmap(nullptr, 24 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, memfd->get(), 0));
  ASSERT_NE(host, MAP_FAILED);
  std::memcpy(reinterpret_cast<void*>(park.va), host, 24 * kMiB);
  std::memset(host, 0, 24 * kMiB);
  ::munmap(host, 24 * kMiB);

  for (const auto& [device, bytes] :
       {std::pair<std::string, uint64_t>{"0000:11:00.0", park.bytes}, {gpu0, 20 * kMiB}}) {
    SCOPED_TRACE(device + " " + std::to_string(bytes));
    RefillOptions wrong;
    wrong.filled = true;
    wrong.park = park.fd.get();
    wrong.park_bytes = bytes;
    wrong.park_device = device;
    RefillResult rr;
    o = mover_->Refill(wrong, &rr);
    EXPECT_FALSE(o.ok());
    EXPECT_NE(o.error.find("is not for this process's memory"), std::string::npos) << o.error;
    EXPECT_EQ(mover_->state(), State::kSaved);
    EXPECT_TRUE(gate_.shut());
  }
  RefillOptions ro;
  ro.filled = true;
  ro.park = park.fd.get();
  ro.park_bytes = park.bytes;
  ro.park_device = gpu0;
  RefillResult rr;
  o = mover_->Refill(ro, &rr);
  ASSERT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(mover_->state(), State::kRunning);
  EXPECT_FALSE(gate_.shut());
  ExpectIntact(m);
  Free(m);
}

// A refill that follows cryod's read (gpu_fastpath.h, "Following"): cryod is still reading the
// data into its memory from the store. The library copies only what the progress page says is
// there (the rest of the memfd is zeros until then: copied early, the job's data would be
// wrong), and its gate opens only on a good verdict; on a bad one the refill fails with
// data_loss and the job stays held.
TEST_F(FastpathMoveTest, ARefillThatFollowsCryodsReadCopiesWhatIsReadAndOpensOnlyOnItsVerdict) {
  namespace wire = contract::gpu_fastpath;
  std::vector<CUdeviceptr> ps(5);
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(reg_->MemAlloc(&ps[i], 40 * kMiB), CUDA_SUCCESS);
    Fill(ps[i], 40 * kMiB, 90 + i);
  }
  constexpr uint64_t kBytes = 200 * kMiB;
  MoverConfig cfg;
  cfg.ring_slot_bytes = 4 * kMiB;
  cfg.register_windows = true;
  cfg.register_window_bytes = 16 * kMiB;
  mover_ = std::make_unique<Mover>(d_, *reg_, gate_, capture_, cfg);
  auto drained = gpu::NewHostCopy(kBytes, 2);
  ASSERT_TRUE(drained.ok()) << drained.status();
  for (uint64_t verdict : {wire::kVerdictBad, wire::kVerdictGood}) {
    SCOPED_TRACE(verdict == wire::kVerdictGood ? "good" : "bad");
    DrainOptions opt;
    opt.memfd = drained->get();
    DrainResult r;
    if (mover_->state() == State::kRunning) {
      // The drain too goes straight into cryod's registered memory, every byte of it.
      const uint64_t dma_before = fake_cuda_registered_dma_bytes();
      ASSERT_TRUE(mover_->Drain(opt, &r).ok());
      EXPECT_EQ(fake_cuda_registered_dma_bytes() - dma_before, kBytes) << "some went by the ring";
      EXPECT_EQ(fake_cuda_registered_bytes(), 0u) << "cryod's memory is still registered";
      SaveResult s;
      ASSERT_TRUE(mover_->FinishSave(&s).ok());
    }
    ASSERT_EQ(mover_->state(), State::kSaved);
    // What cryod reads into (zeros until read), and its progress page.
    auto slot = gpu::NewHostCopy(kBytes, 2);
    ASSERT_TRUE(slot.ok());
    UniqueFd page(::memfd_create("progress", MFD_CLOEXEC));
    ASSERT_EQ(::ftruncate(page.get(), wire::kProgressBytes), 0);
    auto* words = static_cast<uint64_t*>(
        ::mmap(nullptr, wire::kProgressBytes, PROT_READ | PROT_WRITE, MAP_SHARED, page.get(), 0));
    ASSERT_NE(words, MAP_FAILED);
    const char* from =
        static_cast<const char*>(::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, drained->get(), 0));
    char* to = static_cast<char*>(
        ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, slot->get(), 0));
    ASSERT_NE(from, MAP_FAILED);
    ASSERT_NE(to, MAP_FAILED);
    bool held_at_verdict = false;
    uint64_t seen_registered = 0;
    uint64_t registered_at_half = 0;
    std::thread cryod([&] {
      for (uint64_t off = 0; off < kBytes; off += 8 * kMiB) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        std::memcpy(to + off, from + off, 8 * kMiB);
        // Before the last word is written the library cannot be done copying.
        seen_registered = std::max(seen_registered, fake_cuda_registered_bytes());
        if (off == kBytes / 2) registered_at_half = fake_cuda_registered_bytes();
        __atomic_store_n(words, off + 8 * kMiB, __ATOMIC_RELEASE);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      held_at_verdict = gate_.shut() && mover_->state() != State::kRunning;
      __atomic_store_n(words + 1, verdict, __ATOMIC_RELEASE);
    });
    RefillOptions ro;
    ro.memfd = slot->get();
    ro.progress = page.get();
    RefillResult rr;
    const uint64_t dma_before = fake_cuda_registered_dma_bytes();
    Result o = mover_->Refill(ro, &rr);
    cryod.join();
    EXPECT_TRUE(held_at_verdict) << "the gate opened before cryod's verdict";
    // Copied straight from cryod's memory, registered a window at a time (at most the piece
    // waited for and two windows past what cryod has read), and all given back.
    EXPECT_GT(seen_registered, 0u) << "the copy went through the ring";
    EXPECT_LE(registered_at_half, kBytes / 2 + 4 * kMiB + 2 * 16 * kMiB)
        << "registered ahead of cryod's read, not a window at a time";
    EXPECT_EQ(fake_cuda_registered_dma_bytes() - dma_before, kBytes) << "some went by the ring";
    EXPECT_EQ(fake_cuda_registered_bytes(), 0u) << "cryod's memory is still registered";
    if (verdict == wire::kVerdictBad) {
      EXPECT_FALSE(o.ok());
      EXPECT_EQ(o.code, ErrorCode::kDataLoss) << o.error;
      EXPECT_THAT(o.error, HasSubstr("found it damaged"));
      EXPECT_TRUE(gate_.shut()) << "the job must not run on memory that is not its own";
      EXPECT_EQ(mover_->state(), State::kSaved);
    } else {
      ASSERT_TRUE(o.ok()) << o.error;
      EXPECT_FALSE(gate_.shut());
      for (size_t i = 0; i < ps.size(); ++i) {
        EXPECT_TRUE(Holds(ps[i], 40 * kMiB, 90 + i)) << "allocation " << i;
      }
    }
    ::munmap(const_cast<char*>(from), kBytes);
    ::munmap(to, kBytes);
    ::munmap(words, wire::kProgressBytes);
    EXPECT_FALSE(MapsHostCopy()) << "the library still maps cryod's memory";
  }
  for (CUdeviceptr p : ps) reg_->MemFree(p);
}

// cryod's huge-page tmpfs for host copies is held by its descriptor alone: no mount is left for
// the node to see (or for a killed cryod to leak), and files made in it hold what is written.
TEST(HostCopyTest, TheHugePageFileSystemLeavesNoMountBehindAndHoldsTheCopies) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string where = ::testing::TempDir() + "/host-copy-fs-" + std::to_string(::getpid());
  auto fs = gpu::MountHostCopyFs(where);
  ASSERT_TRUE(fs.ok()) << fs.status();
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) EXPECT_EQ(line.find(where), std::string::npos) << line;
  auto copy = gpu::NewHostCopy(8 * kMiB, 2, fs->get());
  ASSERT_TRUE(copy.ok()) << copy.status();
  const char word[] = "every byte";
  ASSERT_EQ(::pwrite(copy->get(), word, sizeof(word), 5 * kMiB),
            static_cast<ssize_t>(sizeof(word)));
  char back[sizeof(word)] = {};
  ASSERT_EQ(::pread(copy->get(), back, sizeof(back), 5 * kMiB), static_cast<ssize_t>(sizeof(back)));
  EXPECT_STREQ(back, word);
  struct stat st;
  ASSERT_EQ(::fstat(copy->get(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(8 * kMiB));
  ::rmdir(where.c_str());
}

// cryod takes no more host memory for copies than its cgroup (a DaemonSet's limit) leaves it:
// past that the kernel would kill cryod. The tightest of it and its ancestors counts, in v2 and
// in v1's memory controller; "max" and missing files are no limit.
TEST(HostCopyTest, TheMemoryCryodMayTakeIsWhatTheTightestCgroupLimitLeaves) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / ("cgroups-" + std::to_string(::getpid()));
  auto put = [&](const fs::path& p, const std::string& v) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << v << "\n";
  };
  const uint64_t node = 100 * kMiB;
  put(root / "v2" / "kubepods" / "memory.max", std::to_string(90 * kMiB));
  put(root / "v2" / "kubepods" / "memory.current", std::to_string(20 * kMiB));
  put(root / "v2" / "kubepods" / "cryod" / "memory.max", "max");
  put(root / "v2" / "kubepods" / "cryod" / "memory.current", std::to_string(5 * kMiB));
  put(root / "self-v2", "0::/kubepods/cryod");
  EXPECT_EQ(gpu::AvailableUnderCgroups(node, (root / "self-v2").string(), (root / "v2").string()),
            70 * kMiB);
  put(root / "v1" / "memory" / "job" / "memory.limit_in_bytes", std::to_string(40 * kMiB));
  put(root / "v1" / "memory" / "job" / "memory.usage_in_bytes", std::to_string(30 * kMiB));
  put(root / "self-v1", "9:pids:/\n4:memory:/job\n0::/");
  EXPECT_EQ(gpu::AvailableUnderCgroups(node, (root / "self-v1").string(), (root / "v1").string()),
            10 * kMiB);
  // Over its limit already: nothing.
  put(root / "v1" / "memory" / "job" / "memory.usage_in_bytes", std::to_string(50 * kMiB));
  EXPECT_EQ(gpu::AvailableUnderCgroups(node, (root / "self-v1").string(), (root / "v1").string()),
            0u);
  put(root / "self-none", "0::/nowhere");
  EXPECT_EQ(gpu::AvailableUnderCgroups(node, (root / "self-none").string(), (root / "v2").string()),
            node);
  EXPECT_GT(gpu::AvailableHostMemory(), 0u);
  fs::remove_all(root);
}

// cryod's write of its memory is stopped between units when the checkpoint is called off.
// What a refill following cryod's read may copy: the stream up to the first byte some file
// still lacks. Units of 4 bytes over 3 files, 30 bytes: units 0..7 go to files 0,1,2,0,1,2,0,1
// (unit 7 is 2 bytes long).
TEST(HostCopyTest, TheStreamIsReadUpToTheFirstByteAFileStillLacks) {
  auto read = [](std::vector<uint64_t> next) {
    return gpu::StreamBytesRead([&](size_t k) { return next[k]; }, next.size(), 4, 30);
  };
  EXPECT_EQ(read({0, 0, 0}), 0u);
  EXPECT_EQ(read({4, 0, 0}), 4u) << "unit 0 whole";
  EXPECT_EQ(read({4, 3, 0}), 7u) << "and 3 bytes of unit 1";
  EXPECT_EQ(read({8, 8, 0}), 8u) << "file 2 holds unit 2: nothing past it";
  EXPECT_EQ(read({8, 8, 4}), 20u) << "units 0 to 4 whole";
  EXPECT_EQ(read({12, 8, 8}), 28u) << "file 1 lacks unit 7";
  EXPECT_EQ(read({12, 9, 8}), 29u);
  EXPECT_EQ(read({12, 10, 8}), 30u) << "all of it";
  EXPECT_EQ(read({12, 10, 0}), 8u) << "file 2 has nothing yet";
  // More files than units: the ones beyond hold nothing and lack nothing.
  EXPECT_EQ(gpu::StreamBytesRead([](size_t k) { return k == 0 ? 4u : 0u; }, 4, 4, 4), 4u);
}

TEST(HostCopyTest, AWriteThatIsStoppedSaysSoAndAStripeOffTheChecksumsChunksIsRefused) {
  auto memfd = gpu::NewHostCopy(130 * kMiB, 1);
  ASSERT_TRUE(memfd.ok()) << memfd.status();
  const std::string path = ::testing::TempDir() + "/host-copy-" + std::to_string(::getpid());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  int asked = 0;
  auto r = gpu::WriteHostCopy(memfd->get(), 130 * kMiB, 64 * kMiB, {fd}, {},
                              [&] { return ++asked > 1; });
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(64 * kMiB)) << "one unit written, then stopped";
  // Behind a drain: each chunk waits for the drain to have put it there; the drain's failure
  // ends the write.
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  std::vector<uint64_t> waited;
  r = gpu::WriteHostCopy(memfd->get(), 130 * kMiB, 64 * kMiB, {fd}, {}, {},
                         [&](uint64_t end) -> absl::Status {
                           waited.push_back(end);
                           if (end > 64 * kMiB)
                             return absl::FailedPreconditionError("drain failed");
                           return absl::OkStatus();
                         });
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_EQ(waited, (std::vector<uint64_t>{64 * kMiB, 128 * kMiB}));
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(64 * kMiB)) << "only what the drain had put there";
  r = gpu::WriteHostCopy(memfd->get(), 130 * kMiB, 4 * kMiB, {fd}, {}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  // The drain cannot have put more there than the memfd holds.
  r = gpu::WriteHostCopy(memfd->get(), 131 * kMiB, 64 * kMiB, {fd}, {}, {});
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  ::close(fd);
  ::unlink(path.c_str());
}

// The files hold the same bytes and digests however they are written: through the page cache
// and into a tmpfs that takes O_DIRECT (both hashed and written a piece at a time), or straight
// to a disk (whole chunks, the device reading them itself). The last piece is short.
TEST(HostCopyTest, BufferedDirectAndTmpfsFilesHoldTheSameBytesAndDigests) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  constexpr uint64_t kBytes = 130 * kMiB + 4096;  // units 0, 2 in file 0; 1 in file 1
  auto memfd = gpu::NewHostCopy(kBytes, 2);
  ASSERT_TRUE(memfd.ok()) << memfd.status();
  char* p = static_cast<char*>(
      ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd->get(), 0));
  ASSERT_NE(p, MAP_FAILED);
  for (uint64_t i = 0; i < kBytes / 8; ++i)
    reinterpret_cast<uint64_t*>(p)[i] = i * 0x9e3779b97f4a7c15u;
  const std::string base = "host-copy-direct-" + std::to_string(::getpid());  // the disk
  const std::string where = ::testing::TempDir() + "/host-copy-fs-" + std::to_string(::getpid());
  auto tmpfs = gpu::MountHostCopyFs(where);
  ASSERT_TRUE(tmpfs.ok()) << tmpfs.status();
  struct Way {
    const char* name;
    int dir;
    int flags;
    bool cpu;
  };
  const Way ways[] = {{"buffered", AT_FDCWD, 0, true},
                      {"direct", AT_FDCWD, O_DIRECT, false},
                      {"tmpfs", tmpfs->get(), O_DIRECT, true}};
  std::vector<std::vector<gpu::WrittenFile>> got;
  for (const Way& w : ways) {
    std::vector<int> fds;
    for (int k = 0; k < 2; ++k) {
      const std::string name = base + "-" + w.name + "-" + std::to_string(k);
      fds.push_back(
          ::openat(w.dir, name.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | w.flags, 0600));
      ASSERT_GE(fds.back(), 0) << w.name << ": " << std::strerror(errno);
      if (w.dir == AT_FDCWD) ::unlink(name.c_str());  // held by its descriptor alone
    }
    EXPECT_EQ(gpu::WriteCopiesThroughTheCpu(fds[0]), w.cpu) << w.name;
    auto r = gpu::WriteHostCopy(memfd->get(), kBytes, 64 * kMiB, fds, {}, {});
    ASSERT_TRUE(r.ok()) << w.name << ": " << r.status();
    ASSERT_EQ(r->size(), 2u);
    // Every byte in its place, read back through the cache.
    for (int k = 0; k < 2; ++k) {
      const int fd =
          ::open(("/proc/self/fd/" + std::to_string(fds[k])).c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      const uint64_t size = k == 0 ? 66 * kMiB + 4096 : 64 * kMiB;
      EXPECT_EQ((*r)[k].digest.size, size) << w.name << " " << k;
      std::string back(size, '\0');
      ASSERT_EQ(::pread(fd, back.data(), size, 0), static_cast<ssize_t>(size));
      const uint64_t at = k == 0 ? 0 : 64 * kMiB;
      EXPECT_EQ(std::memcmp(back.data(), p + at, 64 * kMiB), 0) << w.name << " " << k;
      if (k == 0) {
        EXPECT_EQ(std::memcmp(back.data() + 64 * kMiB, p + 128 * kMiB, 2 * kMiB + 4096), 0)
            << w.name;
      }
      ::close(fd);
    }
    for (int fd : fds) ::close(fd);
    got.push_back(*std::move(r));
  }
  for (size_t i = 1; i < got.size(); ++i) {
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(got[i][k].digest, got[0][k].digest) << ways[i].name << " " << k;
      EXPECT_EQ(got[i][k].chunks.chunks, got[0][k].chunks.chunks) << ways[i].name << " " << k;
    }
  }
  // And the digests are the store's checksum of the bytes.
  EXPECT_EQ(got[0][1].chunks.chunks,
            (std::vector<std::string>{xxh3chunked::Hex(XXH3_128bits(p + 64 * kMiB, 64 * kMiB))}));
  ::munmap(p, kBytes);
  ::rmdir(where.c_str());
}

// Incremental GPU data: a second write of the same memory writes only the chunk that changed,
// leaves holes where the first's files hold the rest, and reads back whole through them.
TEST(HostCopyTest, UnchangedChunksAreNotWrittenAgainAndReadBackThroughTheFilesThatHoldThem) {
  constexpr uint64_t kBytes = 200 * kMiB;  // units 0, 2 in file 0; 1, 3 (8 MiB) in file 1
  auto memfd = gpu::NewHostCopy(kBytes, 2);
  ASSERT_TRUE(memfd.ok()) << memfd.status();
  char* p = static_cast<char*>(
      ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd->get(), 0));
  ASSERT_NE(p, MAP_FAILED);
  for (uint64_t i = 0; i < kBytes / 8; ++i) reinterpret_cast<uint64_t*>(p)[i] = i * 2654435761u;
  const std::string base = ::testing::TempDir() + "/incremental-" + std::to_string(::getpid());
  auto open_files = [&](const std::string& tag, int flags) {
    std::vector<int> fds;
    for (int k = 0; k < 2; ++k) {
      fds.push_back(::open((base + tag + std::to_string(k)).c_str(), flags | O_CLOEXEC, 0600));
      EXPECT_GE(fds.back(), 0);
    }
    return fds;
  };
  std::vector<int> first = open_files("-a", O_RDWR | O_CREAT | O_TRUNC);
  auto a = gpu::WriteHostCopy(memfd->get(), kBytes, 64 * kMiB, first, {}, {});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0].chunks.chunks.size(), 2u);
  EXPECT_EQ((*a)[1].chunks.size, 72 * kMiB);

  // Unit 1 (file 1, chunk 0) changes; nothing else does.
  p[64 * kMiB + 12345] ^= 0x5a;
  std::vector<int> second = open_files("-b", O_RDWR | O_CREAT | O_TRUNC);
  auto b = gpu::WriteHostCopy(memfd->get(), kBytes, 64 * kMiB, second,
                              {(*a)[0].chunks, (*a)[1].chunks}, {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)[0].skipped, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ((*b)[1].skipped, (std::vector<uint32_t>{1}));
  EXPECT_EQ((*b)[0].digest, (*a)[0].digest) << "file 0 holds the same bytes";
  EXPECT_NE((*b)[1].digest.checksum, (*a)[1].digest.checksum);
  struct stat st;
  ASSERT_EQ(::fstat(second[0], &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 128 * kMiB) << "holes up to its whole size";
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, kMiB) << "and nothing written";
  ASSERT_EQ(::fstat(second[1], &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 72 * kMiB);
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, 65 * kMiB) << "only the changed chunk";

  // Read back: file 0 wholly from the first's, file 1's chunk 1 from the first's.
  auto sources = [&] {
    std::vector<gpu::ChunkSources> src(2);
    src[0] = {{first[0], first[0]}, (*b)[0].chunks.chunks, (*b)[0].digest};
    src[1] = {{second[1], first[1]}, (*b)[1].chunks.chunks, (*b)[1].digest};
    return src;
  };
  auto back = gpu::NewHostCopy(kBytes, 2);
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(gpu::ReadHostCopy(back->get(), kBytes, 64 * kMiB, sources()).ok());
  char* q = static_cast<char*>(::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, back->get(), 0));
  ASSERT_NE(q, MAP_FAILED);
  EXPECT_EQ(std::memcmp(p, q, kBytes), 0) << "what was drained, byte for byte";

  // Files without chunk digests (the library wrote them) are read whole and checked whole.
  std::vector<gpu::ChunkSources> whole(2);
  for (int k = 0; k < 2; ++k) whole[k] = {{first[k]}, {}, (*a)[k].digest};
  ASSERT_TRUE(gpu::ReadHostCopy(back->get(), kBytes, 64 * kMiB, whole).ok());
  EXPECT_EQ(std::memcmp(q, p, 64 * kMiB), 0);
  EXPECT_NE(std::memcmp(q + 64 * kMiB, p + 64 * kMiB, 64 * kMiB), 0)
      << "unit 1 as the first checkpoint held it, before the change";
  whole[1].expected = (*b)[1].digest;
  auto r = gpu::ReadHostCopy(back->get(), kBytes, 64 * kMiB, whole);
  EXPECT_TRUE(absl::IsDataLoss(r)) << r;
  EXPECT_NE(r.message().find("the GPU data's file 1 does not hold"), std::string::npos) << r;

  // Reading the hole instead of the file that holds the chunk, or a damaged holder, is refused.
  auto wrong = sources();
  wrong[0].fds[1] = second[0];
  r = gpu::ReadHostCopy(back->get(), kBytes, 64 * kMiB, wrong);
  EXPECT_TRUE(absl::IsDataLoss(r)) << r;
  EXPECT_NE(r.message().find("chunk 1 of the GPU data's file 0"), std::string::npos) << r;
  ASSERT_EQ(::pwrite(first[1], "x", 1, 64 * kMiB + 7), 1);
  r = gpu::ReadHostCopy(back->get(), kBytes, 64 * kMiB, sources());
  EXPECT_TRUE(absl::IsDataLoss(r)) << r;
  EXPECT_NE(r.message().find("chunk 1 of the GPU data's file 1"), std::string::npos) << r;
  ::munmap(p, kBytes);
  ::munmap(q, kBytes);
  for (const char* tag : {"-a", "-b"}) {
    for (int k = 0; k < 2; ++k) ::unlink((base + tag + std::to_string(k)).c_str());
  }
  CloseAll(first);
  CloseAll(second);
}

TEST_F(FastpathMoveTest, ADamagedFileIsRefusedAndTheJobStaysHeld) {
  JobMemory m = Allocate();
  std::vector<int> out = OpenFiles(1, O_WRONLY | O_CREAT | O_TRUNC);
  DrainOptions opt;
  opt.fds = out;
  DrainResult r;
  ASSERT_TRUE(mover_->Drain(opt, &r).ok());
  SaveResult s;
  ASSERT_TRUE(mover_->FinishSave(&s).ok());
  CloseAll(out);
  const std::string path = (dir_ / "part-0").string();
  int fd = ::open(path.c_str(), O_RDWR);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, 5 * kMiB), 1);
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, 5 * kMiB), 1);
  std::vector<int> in = OpenFiles(1, O_RDONLY);
  RefillOptions ro;
  ro.fds = in;
  ro.expected = s.files;
  RefillResult rr;
  Result o = mover_->Refill(ro, &rr);
  CloseAll(in);
  EXPECT_THAT(o.error, HasSubstr("does not hold what the checkpoint recorded"));
  EXPECT_TRUE(gate_.shut()) << "the job must not run on memory that is not its own";
  EXPECT_NE(mover_->state(), State::kRunning);
  // Mended, the same files refill.
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, 5 * kMiB), 1);
  ::close(fd);
  in = OpenFiles(1, O_RDONLY);
  ro.fds = in;
  o = mover_->Refill(ro, &rr);
  CloseAll(in);
  ASSERT_TRUE(o.ok()) << o.error;
  ExpectIntact(m);
  Free(m);
}

TEST_F(FastpathMoveTest, ACallThatDoesNotLeaveInTimeCancelsTheDrainAndTouchesNothing) {
  JobMemory m = Allocate();
  std::atomic<bool> release{false};
  std::atomic<bool> inside{false};
  std::thread job([&] {
    GateGuard g(gate_);  // a job call in flight (a long synchronous copy, say)
    inside = true;
    while (!release) std::this_thread::yield();
  });
  while (!inside) std::this_thread::yield();
  DrainOptions opt;
  opt.timeout = std::chrono::milliseconds(50);
  DrainResult r;
  Result o = mover_->Drain(opt, &r);
  EXPECT_THAT(o.error, HasSubstr("still in flight"));
  EXPECT_TRUE(o.rolled_back);
  EXPECT_FALSE(gate_.shut());
  EXPECT_EQ(mover_->state(), State::kRunning);
  release = true;
  job.join();
  ExpectIntact(m);
  EXPECT_EQ(Used(), 24 * kMiB + (64 << 10));
  Free(m);
}

TEST_F(FastpathMoveTest, ACallMadeWhileDrainedWaitsAndRunsAfterTheRefill) {
  JobMemory m = Allocate();
  DrainResult r;
  ASSERT_TRUE(mover_->Drain(DrainOptions{}, &r).ok());
  std::atomic<bool> refilling{false};
  std::atomic<bool> saw_refilling{false};
  std::atomic<bool> intact{false};
  std::thread job([&] {
    GateGuard g(gate_);
    saw_refilling = refilling.load();
    intact = Holds(m.a, 8 * kMiB, 11);  // what a kernel would read
  });
  refilling = true;
  RefillResult rr;
  ASSERT_TRUE(mover_->Refill(RefillOptions{}, &rr).ok());
  job.join();
  EXPECT_TRUE(saw_refilling) << "the call ran before the memory was back";
  EXPECT_TRUE(intact);
  Free(m);
}

TEST_F(FastpathMoveTest, AGraphCaptureInProgressHoldsTheDrainBackUntilItEnds) {
  JobMemory m = Allocate();
  capture_.Began();
  DrainOptions opt;
  opt.timeout = std::chrono::milliseconds(50);
  DrainResult r;
  Result o = mover_->Drain(opt, &r);
  EXPECT_THAT(o.error, HasSubstr("graph capture"));
  EXPECT_EQ(mover_->state(), State::kRunning);
  opt.timeout = std::chrono::seconds(30);
  std::thread ender([&] { capture_.Ended(); });
  o = mover_->Drain(opt, &r);
  ender.join();
  ASSERT_TRUE(o.ok()) << o.error;
  RefillResult rr;
  ASSERT_TRUE(mover_->Refill(RefillOptions{}, &rr).ok());
  ExpectIntact(m);
  Free(m);
}

TEST_F(FastpathMoveTest, MemorySharedAnotherWayThanADescriptorIsLeftToTheDriver) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = JobVmm(4 * kMiB, &h);
  reg_->Exported(h, CU_MEM_HANDLE_TYPE_FABRIC, nullptr);
  EXPECT_EQ(reg_->Stats().foreign_allocations, 1u);
  EXPECT_EQ(reg_->Stats().owned_allocations, 0u);
  DrainResult r;
  ASSERT_TRUE(mover_->Drain(DrainOptions{}, &r).ok());
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_EQ(Used(), 4 * kMiB);
  RefillResult rr;
  ASSERT_TRUE(mover_->Refill(RefillOptions{}, &rr).ok());
  reg_->MemUnmap(va, 4 * kMiB);
  reg_->MemRelease(h);
  d_.cuMemAddressFree(va, 4 * kMiB);
}

// Two processes of a job sharing memory as NCCL's P2P transport does, in one test process: the
// exporter's allocation is moved by its exporter, the importer only lets its mapping go, and
// after the refill the importer maps the exporter's new descriptor where it was.
TEST_F(FastpathMoveTest, SharedMemoryIsMovedByItsExporterAndImportedAgainWhereItWas) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = JobVmm(4 * kMiB, &h);
  Fill(va, 4 * kMiB, 21);
  const int fd = ExportAsNcclDoes(h);
  ASSERT_GE(fd, 0);

  // The importer: its own library (registry, gates, mover).
  PeerLibrary lib(d_);
  CUmemGenericAllocationHandle ih = 0;
  const CUdeviceptr iva = ImportAsNcclDoes(lib.reg, fd, 4 * kMiB, &ih);
  ASSERT_NE(iva, 0u);
  ASSERT_TRUE(Holds(iva, 4 * kMiB, 21));  // one memory, two processes
  EXPECT_EQ(reg_->Stats().exports, 1u);
  EXPECT_EQ(reg_->Stats().owned_bytes, 4 * kMiB);
  EXPECT_EQ(lib.reg.Stats().imports, 1u);
  EXPECT_EQ(lib.reg.Stats().owned_bytes, 0u);
  const Shares mine = reg_->CurrentShares(), theirs = lib.reg.CurrentShares();
  ASSERT_EQ(mine.exports.size(), 1u);
  ASSERT_EQ(theirs.imports.size(), 1u);

  DrainResult r, pr;
  ASSERT_TRUE(mover_->Drain(DrainOptions{}, &r).ok());
  ASSERT_TRUE(lib.mover.Drain(DrainOptions{}, &pr).ok());
  EXPECT_EQ(r.bytes, 4 * kMiB);
  EXPECT_EQ(pr.bytes, 0u);  // the importer copies nothing
  EXPECT_EQ(Used(), 0u);    // and the memory is gone from the GPU

  RefillResult rr, prr;
  ASSERT_TRUE(mover_->Refill(RefillOptions{}, &rr).ok());
  EXPECT_EQ(mover_->state(), State::kRunning);
  ASSERT_TRUE(lib.mover.Refill(RefillOptions{}, &prr).ok());
  EXPECT_EQ(lib.mover.state(), State::kImporting);  // held until its import comes
  EXPECT_TRUE(lib.gate.shut());
  const Shares again = reg_->CurrentShares();
  ASSERT_EQ(again.exports.size(), 1u);
  EXPECT_EQ(again.exports[0].id, mine.exports[0].id);
  ASSERT_GE(again.exports[0].fd, 0);
  int64_t ms = 0;
  const int carried = ::dup(again.exports[0].fd);  // what cryod takes with pidfd_getfd
  ASSERT_TRUE(lib.mover.Import({{theirs.imports[0].id, carried}}, &ms).ok());
  ::close(carried);
  EXPECT_EQ(lib.mover.state(), State::kRunning);
  EXPECT_FALSE(lib.gate.shut());
  EXPECT_TRUE(Holds(va, 4 * kMiB, 21));
  EXPECT_TRUE(Holds(iva, 4 * kMiB, 21));
  Fill(iva, 4 * kMiB, 22);  // still one memory
  EXPECT_TRUE(Holds(va, 4 * kMiB, 22));

  lib.reg.MemUnmap(iva, 4 * kMiB);
  lib.reg.MemRelease(ih);
  d_.cuMemAddressFree(iva, 4 * kMiB);
  reg_->MemUnmap(va, 4 * kMiB);
  reg_->MemRelease(h);
  d_.cuMemAddressFree(va, 4 * kMiB);
  EXPECT_EQ(Used(), 0u);
}

// NCCL's SHM transport (P2P unavailable) shares host memory it made with cuMemCreate, exported
// as POSIX descriptors: the driver cannot restore that between processes, so the library moves
// it like shared device memory; host memory the job does not share stays the driver's.
TEST_F(FastpathMoveTest, SharedHostMemoryIsMovedByItsExporterAndUnsharedHostMemoryIsLeftAlone) {
  const uint64_t host_before = fake_cuda_host_used_bytes();
  CUmemGenericAllocationHandle h = 0, alone = 0;
  CUdeviceptr va = JobVmm(4 * kMiB, &h, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  CUdeviceptr lone = JobVmm(2 * kMiB, &alone, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  Fill(va, 4 * kMiB, 41);
  Fill(lone, 2 * kMiB, 42);
  EXPECT_EQ(reg_->Stats().owned_bytes, 0u) << "not shared: the driver's";
  const int fd = ExportAsNcclDoes(h);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(reg_->Stats().owned_bytes, 4 * kMiB);
  EXPECT_EQ(reg_->Stats().foreign_allocations, 0u) << "carried, not refused";

  PeerLibrary lib(d_);
  CUmemGenericAllocationHandle ih = 0;
  const CUdeviceptr iva = ImportAsNcclDoes(lib.reg, fd, 4 * kMiB, &ih);
  ASSERT_NE(iva, 0u);
  ASSERT_TRUE(Holds(iva, 4 * kMiB, 41));
  const Shares theirs = lib.reg.CurrentShares();
  ASSERT_EQ(theirs.imports.size(), 1u);

  DrainResult r, pr;
  ASSERT_TRUE(mover_->Drain(DrainOptions{}, &r).ok());
  ASSERT_TRUE(lib.mover.Drain(DrainOptions{}, &pr).ok());
  EXPECT_EQ(r.bytes, 4 * kMiB) << "the shared host memory, not the other";
  EXPECT_EQ(fake_cuda_host_used_bytes() - host_before, 2 * kMiB) << "the shared buffer released";
  EXPECT_TRUE(Holds(lone, 2 * kMiB, 42)) << "the unshared buffer untouched";

  RefillResult rr, prr;
  ASSERT_TRUE(mover_->Refill(RefillOptions{}, &rr).ok());
  ASSERT_TRUE(lib.mover.Refill(RefillOptions{}, &prr).ok());
  const Shares mine = reg_->CurrentShares();
  ASSERT_EQ(mine.exports.size(), 1u);
  ASSERT_GE(mine.exports[0].fd, 0);
  int64_t ms = 0;
  const int carried = ::dup(mine.exports[0].fd);
  ASSERT_TRUE(lib.mover.Import({{theirs.imports[0].id, carried}}, &ms).ok());
  ::close(carried);
  EXPECT_TRUE(Holds(va, 4 * kMiB, 41));
  EXPECT_TRUE(Holds(iva, 4 * kMiB, 41));
  Fill(iva, 4 * kMiB, 43);
  EXPECT_TRUE(Holds(va, 4 * kMiB, 43)) << "one memory again";

  lib.reg.MemUnmap(iva, 4 * kMiB);
  lib.reg.MemRelease(ih);
  d_.cuMemAddressFree(iva, 4 * kMiB);
  for (auto [ptr, handle, bytes] :
       {std::tuple{va, h, 4 * kMiB}, std::tuple{lone, alone, 2 * kMiB}}) {
    reg_->MemUnmap(ptr, bytes);
    reg_->MemRelease(handle);
    d_.cuMemAddressFree(ptr, bytes);
  }
  EXPECT_EQ(fake_cuda_host_used_bytes(), host_before);
}

// Receives the library's answer on `conn`, first proving (as cryod does, with process_vm_readv:
// this test is the job's own process) when the library challenges.
bool ReceiveProving(int conn, std::string* reply, std::vector<UniqueFd>* fds, std::string* why,
                    pid_t job = ::getpid()) {
  namespace wire = contract::gpu_fastpath;
  for (int round = 0; round < 2; ++round) {
    if (!wire::ReceiveMessage(conn, reply, fds)) {
      *why = "no answer";
      return false;
    }
    wire::Challenge c;
    if (!wire::DecodeChallenge(*reply, &c)) return true;
    if (!wire::AnswerChallenge(conn, job, c, why)) return false;
  }
  *why = "challenged twice";
  return false;
}

// Serves the channel of a process that is not there (a name no pid has) from this one: each
// connection to it goes to `control`, as the library's own thread serves it.
// Sends a status request on `conn` and decodes the answer; false (with why) when no status
// came back.
bool AskStatus(int conn, contract::gpu_fastpath::Reply<contract::gpu_fastpath::StatusReply>* r,
               std::string* why) {
  namespace wire = contract::gpu_fastpath;
  wire::Request req;
  req.op = wire::Op::kStatus;
  if (!wire::SendMessage(conn, wire::Encode(req))) {
    *why = std::string("send: ") + strerror(errno);
    return false;
  }
  std::string reply;
  std::vector<UniqueFd> fds;
  if (!ReceiveProving(conn, &reply, &fds, why)) return false;
  return wire::Decode(reply, r, why);
}

class FakeChannel {
 public:
  FakeChannel(Control& control, pid_t pid) {
    const std::string name = contract::gpu_fastpath::SocketName(pid);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path + 1, name.data(), name.size());
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a),
                     offsetof(sockaddr_un, sun_path) + 1 + name.size()),
              0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    thread_ = std::thread([this, &control] {
      for (;;) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;  // shut down
        control.Serve(c);
        ::close(c);
      }
    });
  }
  ~FakeChannel() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }

 private:
  int fd_ = -1;
  std::thread thread_;
};

// Legacy IPC of a cudaMalloc the library owns (legacy_ipc.h): the library makes the handle,
// serves the memory to the process that opens it, and a drain and refill carry it like any
// descriptor the job shared itself.
TEST_F(FastpathMoveTest, LegacyIpcOfOwnedMemoryIsServedByTheLibraryAndCarriedLikeAnyShare) {
  CUdeviceptr p = 0;
  ASSERT_EQ(reg_->MemAlloc(&p, 6 * kMiB), CUDA_SUCCESS);
  Fill(p, 6 * kMiB, 31);
  // The exporter is this process (its channel the FakeChannel below): an importer talks only to
  // the process a handle names.
  const pid_t exporter_pid = ::getpid();
  IpcHandle h, again;
  CUresult er = CUDA_ERROR_UNKNOWN;
  ASSERT_TRUE(reg_->IpcExport(p + 4096, exporter_pid, &h, &er));  // any address in it
  ASSERT_EQ(er, CUDA_SUCCESS);
  ASSERT_TRUE(reg_->IpcExport(p, exporter_pid, &again, &er));
  ASSERT_EQ(er, CUDA_SUCCESS);
  EXPECT_FALSE(reg_->IpcExport(p + 6 * kMiB, exporter_pid, &again, &er)) << "not owned there";
  EXPECT_EQ(again.id, h.id) << "one export per allocation";
  EXPECT_EQ(h.size, 6 * kMiB);
  CUipcMemHandle wire_handle;
  EncodeIpcHandle(h, &wire_handle);
  IpcHandle decoded;
  ASSERT_TRUE(DecodeIpcHandle(wire_handle, &decoded));
  EXPECT_EQ(decoded.pid, exporter_pid);
  EXPECT_EQ(decoded.id, h.id);
  EXPECT_EQ(SecretHex(decoded.secret), SecretHex(h.secret));
  CUipcMemHandle drivers{};
  EXPECT_FALSE(DecodeIpcHandle(drivers, &decoded)) << "the driver's own handles pass through";

  Control exporter(*mover_, *reg_, nullptr);
  FakeChannel channel(exporter, exporter_pid);
  PeerLibrary lib(d_);
  const std::chrono::seconds patience(5);
  CUdeviceptr iva = 0, iva2 = 0;
  ASSERT_EQ(OpenIpcHandle(lib.reg, lib.mover, lib.gate, h, &iva, patience), CUDA_SUCCESS);
  EXPECT_NE(iva, p);
  EXPECT_TRUE(Holds(iva, 6 * kMiB, 31)) << "one memory, two processes";
  ASSERT_EQ(OpenIpcHandle(lib.reg, lib.mover, lib.gate, h, &iva2, patience), CUDA_SUCCESS);
  EXPECT_EQ(iva2, iva) << "opened again: the same address, as the driver does";
  IpcHandle forged = h;
  forged.secret[1] ^= 1;
  CUdeviceptr none = 0;
  EXPECT_EQ(OpenIpcHandle(lib.reg, lib.mover, lib.gate, forged, &none, patience),
            CUDA_ERROR_INVALID_HANDLE)
      << "only the handle's secret opens it";
  EXPECT_EQ(reg_->Stats().exports, 1u);
  EXPECT_EQ(lib.reg.Stats().imports, 1u);
  EXPECT_EQ(lib.reg.Stats().foreign_allocations, 0u) << "carried, not refused";
  const Shares theirs = lib.reg.CurrentShares();
  ASSERT_EQ(theirs.imports.size(), 1u);

  DrainResult r, pr;
  ASSERT_TRUE(mover_->Drain(DrainOptions{}, &r).ok());
  ASSERT_TRUE(lib.mover.Drain(DrainOptions{}, &pr).ok());
  EXPECT_EQ(r.bytes, 6 * kMiB);
  EXPECT_EQ(pr.bytes, 0u);
  EXPECT_EQ(Used(), 0u);
  int fd = -1;
  const Result fetched = FetchIpcShare(h, &fd);
  EXPECT_FALSE(fetched.ok());
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(fetched.code, ErrorCode::kBusy)
      << "drained: asked again later (" << fetched.error << ")";

  RefillResult rr, prr;
  ASSERT_TRUE(mover_->Refill(RefillOptions{}, &rr).ok());
  ASSERT_TRUE(lib.mover.Refill(RefillOptions{}, &prr).ok());
  EXPECT_EQ(lib.mover.state(), State::kImporting);
  const Shares mine = reg_->CurrentShares();
  ASSERT_EQ(mine.exports.size(), 1u);
  ASSERT_GE(mine.exports[0].fd, 0) << "exported again";
  int64_t ms = 0;
  const int carried = ::dup(mine.exports[0].fd);  // what cryod takes with pidfd_getfd
  ASSERT_TRUE(lib.mover.Import({{theirs.imports[0].id, carried}}, &ms).ok());
  ::close(carried);
  EXPECT_TRUE(Holds(p, 6 * kMiB, 31));
  EXPECT_TRUE(Holds(iva, 6 * kMiB, 31));
  Fill(iva, 6 * kMiB, 32);  // still one memory
  EXPECT_TRUE(Holds(p, 6 * kMiB, 32));

  CUresult cr = CUDA_ERROR_UNKNOWN;
  ASSERT_TRUE(lib.reg.IpcClose(iva, &cr));
  EXPECT_EQ(cr, CUDA_SUCCESS);
  EXPECT_EQ(lib.reg.Stats().imports, 1u) << "opened twice: still mapped";
  ASSERT_TRUE(lib.reg.IpcClose(iva, &cr));
  EXPECT_EQ(cr, CUDA_SUCCESS);
  EXPECT_EQ(lib.reg.Stats().imports, 0u);
  EXPECT_FALSE(lib.reg.IpcClose(iva, &cr)) << "not the library's any more";
  EXPECT_EQ(reg_->MemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 0u) << "the export's descriptor went with the allocation";
}

TEST_F(FastpathMoveTest, ASecondDrainIsRefusedAndAbortRollsBack) {
  JobMemory m = Allocate();
  DrainResult r;
  ASSERT_TRUE(mover_->Drain(DrainOptions{}, &r).ok());
  Result o = mover_->Drain(DrainOptions{}, &r);
  EXPECT_THAT(o.error, HasSubstr("already out"));
  // The caller went away: back to the GPU from the job's memory.
  EXPECT_TRUE(mover_->Abort());
  EXPECT_EQ(mover_->state(), State::kRunning);
  EXPECT_FALSE(gate_.shut());
  ExpectIntact(m);
  Free(m);
}

// One hex codec for the channel's secrets and proofs (lib/contract/hex.h). A legacy IPC secret
// keeps its wire form: each word's 16 digits, most significant first, as %016llx printed them.
TEST(HexTest, SecretsKeepTheirWireFormAndBytesRoundTrip) {
  const uint64_t secret[2] = {0x0123456789abcdefull, 0xfedcba9876543210ull};
  char printed[33];
  snprintf(printed, sizeof(printed), "%016llx%016llx", static_cast<unsigned long long>(secret[0]),
           static_cast<unsigned long long>(secret[1]));
  EXPECT_EQ(SecretHex(secret), printed);
  uint64_t back[2] = {0, 0};
  ASSERT_TRUE(SecretFromHex(printed, back));
  EXPECT_EQ(back[0], secret[0]);
  EXPECT_EQ(back[1], secret[1]);
  EXPECT_FALSE(SecretFromHex(std::string(printed).substr(1), back)) << "a digit short";
  EXPECT_FALSE(SecretFromHex(std::string(31, '0') + "g", back)) << "not a digit";

  const unsigned char bytes[] = {0x00, 0x7f, 0x80, 0xff};
  EXPECT_EQ(contract::HexEncode(bytes, sizeof(bytes)), "007f80ff");
  unsigned char out[4];
  ASSERT_TRUE(contract::HexDecode("007F80ff", out, sizeof(out)));
  EXPECT_EQ(std::memcmp(out, bytes, sizeof(out)), 0);
  EXPECT_FALSE(contract::HexDecode("007f80f", out, sizeof(out)));
}

TEST(GateTest, ShutWaitsForCallsInsideAndOpenLetsWaitersGo) {
  Gate g;
  g.Enter();
  EXPECT_FALSE(g.Shut(std::chrono::milliseconds(10))) << "a call is inside";
  EXPECT_FALSE(g.shut()) << "a failed shut opens again";
  g.Leave();
  EXPECT_TRUE(g.Shut(std::chrono::milliseconds(1000)));
  std::atomic<bool> passed{false};
  std::thread t([&] {
    g.Enter();
    passed = true;
    g.Leave();
  });
  g.Open();
  t.join();
  EXPECT_TRUE(passed);
}

// The library's end of the channel (control.cc): every request decodes into its type, a version
// it does not speak is refused with the versions it does, and a cryod from before versions were
// sent is spoken to as version 1.
TEST_F(FastpathTest, TheChannelAnswersInTypesAndRefusesAVersionItDoesNotSpeak) {
  namespace wire = contract::gpu_fastpath;
  Control control(*mover_, *reg_, nullptr);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  auto ask = [&](const std::string& text) {
    EXPECT_TRUE(wire::SendMessage(sv[0], text));
    std::thread serve([&] { control.Serve(sv[1]); });
    std::string reply, why_not;
    std::vector<UniqueFd> fds;
    EXPECT_TRUE(ReceiveProving(sv[0], &reply, &fds, &why_not)) << why_not;
    serve.join();
    wire::Reply<wire::StatusReply> r;
    std::string why;
    EXPECT_TRUE(wire::Decode(reply, &r, &why)) << why << ": " << reply;
    return r;
  };
  wire::Request req;
  req.op = wire::Op::kStatus;
  auto own = ask(wire::Encode(req));
  ASSERT_TRUE(own.ok) << own.error.message;
  EXPECT_EQ(own.body.version, wire::kVersion);
  EXPECT_EQ(own.body.pid, ::getpid());
  EXPECT_EQ(own.body.state, State::kRunning);

  req.version = wire::kVersion + 1;
  auto newer = ask(wire::Encode(req));
  EXPECT_FALSE(newer.ok);
  EXPECT_EQ(newer.error.code, wire::ErrorCode::kVersion);
  EXPECT_THAT(newer.error.message, HasSubstr("speaks versions"));

  auto older = ask(R"({"op": "status"})");
  EXPECT_TRUE(older.ok) << older.error.message;

  auto bad = ask(R"({"op": "format-the-disk"})");
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.error.code, wire::ErrorCode::kBadRequest);
  ::close(sv[0]);
  ::close(sv[1]);
}

// Pods on the host's network share one abstract namespace, each with its own pids: a process of
// another pod with the job's pid holds the job's name. The library listens on an alternate, and
// cryod (and an importer) find the job's own by its SO_PEERCRED pid, never talking to the other.
TEST_F(FastpathTest, AJobWhoseChannelNameIsTakenListensOnAnAlternateFoundByItsPid) {
  namespace wire = contract::gpu_fastpath;
  const pid_t pid = 42000000 + ::getpid() % 1000000;  // the job's pid "in its own namespace"
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t other = ::fork();
  if (other == 0) {
    // The other pod's process with the same pid: holds the name and accepts, answering nothing.
    const std::string name = wire::SocketName(pid);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path + 1, name.data(), name.size());
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&a),
               offsetof(sockaddr_un, sun_path) + 1 + name.size()) != 0 ||
        ::listen(fd, 4) != 0) {
      ::_exit(3);
    }
    (void)!::write(ready[1], "r", 1);
    for (;;) ::close(::accept(fd, nullptr, nullptr));
  }
  char r;
  ASSERT_EQ(::read(ready[0], &r, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);

  Control control(*mover_, *reg_, nullptr);
  EXPECT_EQ(control.Start(pid).error, "") << "the library did not listen on an alternate";
  pid_t held_by = -1;
  UniqueFd owned = wire::ConnectToProcess(pid, ::getpid(), &held_by);
  ASSERT_TRUE(owned.ok()) << strerror(errno);
  const int conn = owned.get();
  timeval tv{10, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  wire::Reply<wire::StatusReply> st;
  std::string why;
  ASSERT_TRUE(AskStatus(conn, &st, &why)) << "the job's library: " << why;
  EXPECT_TRUE(st.ok);
  owned.reset();

  // Asked for a process that holds none of the names: refused, naming who holds the first.
  errno = 0;
  EXPECT_FALSE(wire::ConnectToProcess(pid, other + 1000000, &held_by).ok());
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(held_by, other);
  // Nobody at all on a pid's names.
  EXPECT_FALSE(wire::ConnectToProcess(pid + 1, ::getpid()).ok());
  EXPECT_EQ(errno, ECONNREFUSED);
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
}

// The channel serves one peer at a time: one that connects and says nothing is dropped within
// seconds (issue 34: it held off every checkpoint of the job), and the next peer is answered.
TEST_F(FastpathTest, APeerThatSaysNothingIsDroppedAndTheNextIsServed) {
  namespace wire = contract::gpu_fastpath;
  Control control(*mover_, *reg_, nullptr);
  const pid_t pid = 41000000 + ::getpid() % 1000000;  // no process has it
  FakeChannel channel(control, pid);
  const UniqueFd idle_fd = wire::ConnectAbstract(wire::SocketName(pid));
  ASSERT_TRUE(idle_fd.ok());
  const UniqueFd asks_fd = wire::ConnectAbstract(wire::SocketName(pid));
  ASSERT_TRUE(asks_fd.ok());
  const int idle = idle_fd.get(), asks = asks_fd.get();
  timeval tv{20, 0};  // far beyond the library's wait for a first message
  ::setsockopt(asks, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  wire::Reply<wire::StatusReply> r;
  std::string why;
  ASSERT_TRUE(AskStatus(asks, &r, &why)) << "the idle peer held the channel: " << why;
  EXPECT_TRUE(r.ok);
  // The idle one was hung up on.
  char b;
  EXPECT_EQ(::recv(idle, &b, 1, 0), 0);
}

// Issue 34: a root process without capabilities (a sidecar, a debug container, a pod on the
// host's network) reached the channel and drained a job's GPU memory into its own file. Now the
// library asks its peer to read fresh bytes out of the job's memory first: such a peer cannot
// (process_vm_readv: EPERM), a forged answer is refused with "denied", and the same process with
// its capabilities (as cryod holds them) is served.
TEST_F(FastpathTest, ARootPeerWithoutCapabilitiesCannotDriveTheJob) {
  namespace wire = contract::gpu_fastpath;
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the peer drops root's capabilities";
  Control control(*mover_, *reg_, nullptr);
  const pid_t pid = 42000000 + ::getpid() % 1000000;  // no process has it
  FakeChannel channel(control, pid);
  const pid_t job = ::getpid();
  // Each check runs in a child, as another process would; its exit status says what it saw.
  auto in_child = [&](bool drop_capabilities, const std::function<int()>& body) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (drop_capabilities) {
        __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct none[2] = {};
        if (::syscall(SYS_capset, &hdr, none) != 0) ::_exit(90);
        if (::geteuid() != 0) ::_exit(91);  // still root, only without capabilities
      }
      ::_exit(body());
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  auto ask_status = [&](std::string* reply, std::string* why) {
    const UniqueFd owned = wire::ConnectAbstract(wire::SocketName(pid));
    if (!owned.ok()) return -1;
    const int conn = owned.get();
    wire::Request req;
    req.op = wire::Op::kStatus;
    if (!wire::SendMessage(conn, wire::Encode(req))) return -1;
    std::vector<UniqueFd> fds;
    const bool got = ReceiveProving(conn, reply, &fds, why, job);
    return got ? 1 : 0;
  };

  // Without capabilities: it cannot read the challenge, and learns nothing.
  EXPECT_EQ(in_child(true,
                     [&] {
                       std::string reply, why;
                       if (ask_status(&reply, &why) != 0) return 1;
                       return why.find("Operation not permitted") != std::string::npos ? 0 : 2;
                     }),
            0)
      << "a root peer without capabilities read the job's memory, or was not asked to";
  // Nor can it guess: a forged proof is refused, and nothing was done.
  EXPECT_EQ(in_child(true,
                     [&] {
                       const UniqueFd owned = wire::ConnectAbstract(wire::SocketName(pid));
                       const int conn = owned.get();
                       wire::Request req;
                       req.op = wire::Op::kDrain;
                       std::string text, why;
                       std::vector<UniqueFd> fds;
                       wire::Challenge c;
                       if (conn < 0 || !wire::SendMessage(conn, wire::Encode(req)) ||
                           !wire::ReceiveMessage(conn, &text, &fds) ||
                           !wire::DecodeChallenge(text, &c)) {
                         return 1;
                       }
                       wire::Request forged;
                       forged.op = wire::Op::kProve;
                       forged.secret = std::string(2 * c.length, '0');
                       if (!wire::SendMessage(conn, wire::Encode(forged)) ||
                           !wire::ReceiveMessage(conn, &text, &fds)) {
                         return 2;
                       }
                       wire::Reply<wire::DrainedReply> r;
                       if (!wire::Decode(text, &r, &why)) return 3;
                       return !r.ok && r.error.code == wire::ErrorCode::kDenied ? 0 : 4;
                     }),
            0)
      << "a forged proof was not refused as \"denied\"";
  EXPECT_EQ(mover_->state(), State::kRunning);
  EXPECT_FALSE(gate_.shut());
  // The same process with root's capabilities proves and is answered.
  EXPECT_EQ(in_child(false,
                     [&] {
                       std::string reply, why;
                       wire::Reply<wire::StatusReply> r;
                       return ask_status(&reply, &why) == 1 && wire::Decode(reply, &r, &why) && r.ok
                                  ? 0
                                  : 1;
                     }),
            0)
      << "a peer with CAP_SYS_PTRACE was not served";
}

TEST_F(FastpathMoveTest, AHeldDrainGoesOnAtGoAndLetsTheJobGoWhenNoGoComes) {
  namespace wire = contract::gpu_fastpath;
  JobMemory m = Allocate();
  Control control(*mover_, *reg_, nullptr);
  auto held_drain = [&](int64_t hold_ms, int sv[2]) {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    wire::Request req;
    req.op = wire::Op::kDrain;
    req.version = wire::kVersionCut;
    req.hold_ms = hold_ms;
    EXPECT_TRUE(wire::SendMessage(sv[0], wire::Encode(req)));
    std::thread serve([&control, fd = sv[1]] { control.Serve(fd); });
    std::string text, why_not;
    std::vector<UniqueFd> fds;
    EXPECT_TRUE(ReceiveProving(sv[0], &text, &fds, &why_not)) << why_not;
    wire::Reply<wire::QuiescedReply> q;
    std::string why;
    EXPECT_TRUE(wire::Decode(text, &q, &why)) << why << ": " << text;
    EXPECT_TRUE(q.ok) << text;
    return serve;
  };
  auto next_reply = [](int fd) {
    std::string text;
    std::vector<UniqueFd> fds;
    EXPECT_TRUE(wire::ReceiveMessage(fd, &text, &fds));
    return text;
  };

  // No "go" within the hold: the job goes on, nothing moved.
  int sv[2];
  std::thread serve = held_drain(100, sv);
  EXPECT_TRUE(gate_.shut());
  EXPECT_EQ(Used(), 24 * kMiB + (64 << 10));
  wire::Reply<wire::DrainedReply> late;
  std::string why;
  ASSERT_TRUE(wire::Decode(next_reply(sv[0]), &late, &why)) << why;
  EXPECT_FALSE(late.ok);
  EXPECT_TRUE(late.error.rolled_back);
  EXPECT_THAT(late.error.message, HasSubstr("no \"go\" came within 100 ms"));
  serve.join();
  EXPECT_FALSE(gate_.shut());
  EXPECT_EQ(mover_->state(), State::kRunning);
  ::close(sv[0]);
  ::close(sv[1]);

  // With "go": drained, and refilled intact.
  serve = held_drain(30000, sv);
  wire::Request go;
  go.op = wire::Op::kGo;
  go.version = wire::kVersionCut;
  ASSERT_TRUE(wire::SendMessage(sv[0], wire::Encode(go)));
  wire::Reply<wire::DrainedReply> drained;
  ASSERT_TRUE(wire::Decode(next_reply(sv[0]), &drained, &why)) << why;
  ASSERT_TRUE(drained.ok) << drained.error.message;
  EXPECT_EQ(drained.body.bytes, 24 * kMiB);
  serve.join();
  EXPECT_EQ(mover_->state(), State::kDrained);
  EXPECT_EQ(Used(), 64u << 10);
  RefillResult rr;
  ASSERT_TRUE(mover_->Refill(RefillOptions{}, &rr).ok());
  ExpectIntact(m);
  ::close(sv[0]);
  ::close(sv[1]);

  // A "go" with nothing held is refused.
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_TRUE(wire::SendMessage(sv[0], wire::Encode(go)));
  control.Serve(sv[1]);
  wire::Reply<wire::DrainedReply> stray;
  ASSERT_TRUE(wire::Decode(next_reply(sv[0]), &stray, &why)) << why;
  EXPECT_FALSE(stray.ok);
  EXPECT_EQ(stray.error.code, wire::ErrorCode::kBadRequest);
  EXPECT_EQ(mover_->state(), State::kRunning);
  ::close(sv[0]);
  ::close(sv[1]);
  Free(m);
}

}  // namespace
}  // namespace cryo::fastpath
