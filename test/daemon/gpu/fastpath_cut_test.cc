// The fast path's cut across the ranks of one job, end to end in one test process: two "ranks",
// each with the real library (registry, mover, gate, its channel on an abstract socket) over the
// fake CUDA driver, and cryod's real client and DrainTogether. A collective is modelled by the
// ranks' synchronize: a rank's GPU work ends only once its peer has launched every collective it
// launched.

#include "daemon/gpu/fastpath_cut.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/engine/job_cut.h"
#include "daemon/gpu/fastpath.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/proc.h"
#include "plugins/fastpath/control.h"
#include "plugins/fastpath/gate.h"
#include "plugins/fastpath/mover.h"
#include "plugins/fastpath/registry.h"
#include "test/fakes/cuda/fake_cuda.h"

namespace cryo::gpu {
namespace {

using ::testing::HasSubstr;
constexpr size_t kBytes = 8 << 20;

// Collectives launched per rank; a rank's synchronize waits for its peer to catch up.
struct Collective {
  std::mutex mu;
  std::condition_variable cv;
  int launched[2] = {0, 0};
  bool over = false;  // the test is done: nothing waits any more
};
Collective* g_coll = new Collective();  // outlives the library threads left waiting

template <int R>
CUresult SynchronizeRank() {
  std::unique_lock<std::mutex> l(g_coll->mu);
  g_coll->cv.wait(l, [] { return g_coll->over || g_coll->launched[R] <= g_coll->launched[1 - R]; });
  return CUDA_SUCCESS;
}

uint64_t Word(int rank, size_t i) { return (rank + 1) * 0x9E3779B97F4A7C15ull ^ i; }

// One rank: the library as it lives in a job. Never destroyed: its channel's thread serves on.
struct Rank {
  int r;
  fastpath::Driver d;
  fastpath::Gate gate;
  fastpath::CaptureGate capture;
  std::unique_ptr<fastpath::Registry> reg;
  std::unique_ptr<fastpath::Mover> mover;
  std::unique_ptr<fastpath::Control> control;
  CUdeviceptr mem = 0;
  FastpathProcess proc;

  // An NCCL kernel's launch, as the library's launch wrapper makes it: through the gate,
  // counted, held at the cut's count.
  void Launch() {
    fastpath::LaunchCollective(gate, mover->collectives(), [&] {
      std::lock_guard<std::mutex> l(g_coll->mu);
      ++g_coll->launched[r];
      g_coll->cv.notify_all();
    });
  }
  bool Intact() const {
    auto* w = reinterpret_cast<const uint64_t*>(mem);
    for (size_t i = 0; i < kBytes / 8; ++i) {
      if (w[i] != Word(r, i)) return false;
    }
    return true;
  }
};

class FastpathCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::lock_guard<std::mutex> l(g_coll->mu);
      g_coll->launched[0] = g_coll->launched[1] = 0;
      g_coll->over = false;
    }
    static int next_name = 0;
    for (int r = 0; r < 2; ++r) {
      auto* k = new Rank();
      k->r = r;
      k->d = fastpath::testing::FakeDriver();
      k->d.cuCtxSynchronize = r == 0 ? &SynchronizeRank<0> : &SynchronizeRank<1>;
      CUcontext c = nullptr;
      ASSERT_EQ(k->d.cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
      ASSERT_EQ(k->d.cuCtxSetCurrent(c), CUDA_SUCCESS);
      k->reg = std::make_unique<fastpath::Registry>(k->d, 1 << 20);
      k->mover = std::make_unique<fastpath::Mover>(k->d, *k->reg, k->gate, k->capture);
      k->control = std::make_unique<fastpath::Control>(*k->mover, *k->reg, nullptr);
      // Channel names of their own: the "ranks" are this process under pids of their own.
      const pid_t ns_pid = 1000000 + (::getpid() % 100000) * 100 + next_name++;
      ASSERT_EQ(k->control->Start(ns_pid).error, "");
      ASSERT_EQ(k->reg->MemAlloc(&k->mem, kBytes), CUDA_SUCCESS);
      auto* w = reinterpret_cast<uint64_t*>(k->mem);
      for (size_t i = 0; i < kBytes / 8; ++i) w[i] = Word(r, i);
      k->proc.pid = ::getpid();
      k->proc.ns_pid = ns_pid;
      ranks_.push_back(k);
    }
    fp_ = NewFastpath(&proc_);
    auto found = fp_->Find({::getpid()});  // a real status exchange gives each its version
    for (Rank* k : ranks_) {
      auto st = fp_->Status(k->proc);
      ASSERT_TRUE(st.ok()) << st.status();
      k->proc.version = st->version;
      procs_.push_back(k->proc);
    }
  }
  void TearDown() override {
    {
      std::lock_guard<std::mutex> l(g_coll->mu);
      g_coll->over = true;
      g_coll->cv.notify_all();
    }
    for (Rank* k : ranks_) {
      if (k->mover->state() != fastpath::State::kRunning)
        (void)fp_->Refill(k->proc, 2, {}, {}, nullptr);
      k->reg->MemFree(k->mem);
    }
  }

  FastpathDrainOptions Options(absl::Duration quiesce) {
    FastpathDrainOptions o;
    o.threads = 2;
    o.quiesce_timeout = quiesce;
    o.reply_timeout = absl::Seconds(60);
    return o;
  }

  // As NCCL's ranks run: each launches collective after collective; a rank may run ahead of its
  // peer by a few (then its launches wait for the peer's), and rank 0 is the slower one. Without
  // alignment rank 1 nearly always waits inside a collective when the gates shut.
  void StartCollectives() {
    for (Rank* k : ranks_) k->mover->collectives().set_counting(true);
    auto job = [this](int r) {
      while (!stop_) {
        {
          std::unique_lock<std::mutex> l(g_coll->mu);
          g_coll->cv.wait(
              l, [&] { return stop_ || g_coll->launched[r] - g_coll->launched[1 - r] < 4; });
        }
        if (stop_) break;
        ranks_[r]->Launch();
        if (r == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
    };
    stop_ = false;
    jobs_[0] = std::thread(job, 0);
    jobs_[1] = std::thread(job, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  void StopCollectives() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> l(g_coll->mu);
      g_coll->cv.notify_all();
    }
    for (auto& j : jobs_) j.join();
    for (Rank* k : ranks_) k->mover->collectives().set_counting(false);
  }
  // Both ranks stopped after the same collective, and drained.
  void ExpectOneCut() {
    {
      std::lock_guard<std::mutex> l(g_coll->mu);
      EXPECT_EQ(g_coll->launched[0], g_coll->launched[1]);
      EXPECT_GT(g_coll->launched[0], 0);
    }
    EXPECT_EQ(ranks_[0]->mover->state(), fastpath::State::kDrained);
    EXPECT_EQ(ranks_[1]->mover->state(), fastpath::State::kDrained);
  }

  std::atomic<bool> stop_{false};
  std::thread jobs_[2];
  proc::ProcReader proc_;
  std::unique_ptr<Fastpath> fp_;
  std::vector<Rank*> ranks_;  // never freed (see Rank)
  std::vector<FastpathProcess> procs_;
};

TEST_F(FastpathCutTest, RanksInsideACollectiveAreDrainedOnlyOnceNeitherWaitsOnTheOther) {
  ASSERT_GE(procs_[0].version, contract::gpu_fastpath::kVersionCut);
  // Rank 0 is inside collective 1; rank 1 launches its part only once its gate has been shut
  // and opened again: at the first cut rank 0 waits on rank 1, which waits at its gate.
  ranks_[0]->Launch();
  std::thread late([&] {
    while (!ranks_[1]->gate.shut()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ranks_[1]->Launch();
  });
  std::vector<std::unique_ptr<FastpathDrainHandle>> drains;
  absl::Status st = DrainTogether(*fp_, procs_, Options(absl::Seconds(20)), {}, &drains);
  late.join();
  ASSERT_TRUE(st.ok()) << st;
  // The cut came after the collective ended: rank 1 had launched its part.
  {
    std::lock_guard<std::mutex> l(g_coll->mu);
    EXPECT_EQ(g_coll->launched[1], 1);
  }
  ASSERT_EQ(drains.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_NE(drains[i], nullptr);
    EXPECT_EQ(drains[i]->bytes(), ranks_[i]->reg->Stats().owned_bytes);
    EXPECT_EQ(ranks_[i]->mover->state(), fastpath::State::kDrained);
  }
  drains.clear();
  for (Rank* k : ranks_) {
    auto r = fp_->Refill(k->proc, 2, {}, {}, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(k->mover->state(), fastpath::State::kRunning);
    EXPECT_TRUE(k->Intact());
  }
}

TEST_F(FastpathCutTest, ARankAheadInItsCollectivesIsHeldWhereItsPeerCatchesUp) {
  StartCollectives();
  std::vector<std::unique_ptr<FastpathDrainHandle>> drains;
  absl::Status st = DrainTogether(*fp_, procs_, Options(absl::Seconds(20)), {}, &drains);
  ASSERT_TRUE(st.ok()) << st;
  ExpectOneCut();
  drains.clear();
  for (Rank* k : ranks_) {
    auto r = fp_->Refill(k->proc, 2, {}, {}, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(k->Intact());
  }
  StopCollectives();
}

TEST_F(FastpathCutTest, ARankThatNeverStopsEndsTheCutInTimeAndEveryRankRunsOnIntact) {
  // Rank 0 waits on a collective rank 1 never joins.
  ranks_[0]->Launch();
  std::vector<std::unique_ptr<FastpathDrainHandle>> drains;
  absl::Status st = DrainTogether(*fp_, procs_, Options(absl::Seconds(1)), {}, &drains);
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("attempts to stop the GPU work of the job's 2 processes"));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(drains[i], nullptr);
    EXPECT_EQ(ranks_[i]->mover->state(), fastpath::State::kRunning);
    EXPECT_FALSE(ranks_[i]->mover->held());
    EXPECT_FALSE(ranks_[i]->gate.shut());
    EXPECT_TRUE(ranks_[i]->Intact());
  }
  // And rank 1 still runs: its next launch passes.
  ranks_[1]->Launch();
}

// Two members of a job checkpoint, one rank each, on two nodes: member a's cryod drives, member
// b's passes each round of the cut up to it (as the Peer stream carries it). Each member's rank
// is drained by its own DrainTogether; the cut is one.
struct TwoNodes {
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  engine::JobGpuCut driver{{"member a", "node b"}};
  engine::JobGpuCut node{{"member b"},
                         [this](int round, const CutWord& w) -> absl::StatusOr<CutWord> {
                           return driver.Meet("node b", round, w, deadline);
                         }};
  std::unique_ptr<CutParties> a = driver.For("member a", deadline, nullptr);
  std::unique_ptr<CutParties> b = node.For("member b", deadline, nullptr);
};

TEST_F(FastpathCutTest, RanksOfMembersOnTwoNodesAreHeldAtOneCutOnTheJobsCollectives) {
  // As in ARankAheadInItsCollectivesIsHeldWhereItsPeerCatchesUp, but each rank is another
  // member's: only the job's rounds can align them.
  StartCollectives();
  TwoNodes job_cut;
  std::vector<FastpathProcess> a{procs_[0]}, b{procs_[1]};
  std::vector<std::unique_ptr<FastpathDrainHandle>> da, db;
  absl::Status sb;
  std::thread tb(
      [&] { sb = DrainTogether(*fp_, b, Options(absl::Seconds(20)), {}, &db, job_cut.b.get()); });
  absl::Status sa = DrainTogether(*fp_, a, Options(absl::Seconds(20)), {}, &da, job_cut.a.get());
  tb.join();
  ASSERT_TRUE(sa.ok()) << sa;
  ASSERT_TRUE(sb.ok()) << sb;
  ExpectOneCut();
  da.clear();
  db.clear();
  for (Rank* k : ranks_) {
    auto r = fp_->Refill(k->proc, 2, {}, {}, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(k->Intact());
  }
  StopCollectives();
}

TEST_F(FastpathCutTest, AMemberWhoseRankNeverStopsKeepsTheOtherNodesMemberFromDrainingAlone) {
  // Member a's rank waits on a collective member b's rank never joins: b's rank could stop at
  // every attempt, but goes on only with a's, so neither drains and both run on intact.
  ranks_[0]->Launch();
  TwoNodes job_cut;
  std::vector<FastpathProcess> a{procs_[0]}, b{procs_[1]};
  std::vector<std::unique_ptr<FastpathDrainHandle>> da, db;
  absl::Status sb;
  std::thread tb(
      [&] { sb = DrainTogether(*fp_, b, Options(absl::Seconds(1)), {}, &db, job_cut.b.get()); });
  absl::Status sa = DrainTogether(*fp_, a, Options(absl::Seconds(1)), {}, &da, job_cut.a.get());
  tb.join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(sa)) << sa;
  EXPECT_FALSE(sb.ok());
  EXPECT_THAT(std::string(sb.message()),
              ::testing::AnyOf(HasSubstr("another member of the job could not stop"),
                               HasSubstr("the job's GPU cut was not reached")));
  ASSERT_EQ(da.size(), 1u);
  ASSERT_EQ(db.size(), 1u);
  EXPECT_EQ(da[0], nullptr);
  EXPECT_EQ(db[0], nullptr);
  for (Rank* k : ranks_) {
    EXPECT_EQ(k->mover->state(), fastpath::State::kRunning);
    EXPECT_FALSE(k->mover->held());
    EXPECT_FALSE(k->gate.shut());
    EXPECT_TRUE(k->Intact());
  }
  ranks_[1]->Launch();  // rank 1 runs on: its launch passes
}

TEST_F(FastpathCutTest, AHeldRankLetsGoWhenCryodGoesAway) {
  FastpathDrainOptions o = Options(absl::Seconds(5));
  o.hold = absl::Seconds(30);
  auto held = fp_->Drain(procs_[1], o, {});
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(ranks_[1]->gate.shut());
  EXPECT_TRUE(ranks_[1]->mover->held());
  held->reset();  // cryod lets go (or is gone): the channel closes, the library answers
  EXPECT_FALSE(ranks_[1]->gate.shut());
  EXPECT_FALSE(ranks_[1]->mover->held());
  EXPECT_EQ(ranks_[1]->mover->state(), fastpath::State::kRunning);
  ranks_[1]->Launch();
  EXPECT_TRUE(ranks_[1]->Intact());
}

// Memory shared the way NCCL's P2P transport shares it: rank 0 exports an allocation as a POSIX
// descriptor, rank 1 imports it and maps it.
struct SharedMemory {
  CUmemGenericAllocationHandle exported = 0, imported = 0;
  CUdeviceptr va = 0, peer_va = 0;
  static constexpr size_t kSize = 4 << 20;
};

SharedMemory Share(Rank& from, fastpath::Registry& to, const fastpath::Driver& d) {
  SharedMemory m;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(d.cuMemAddressReserve(&m.va, m.kSize, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(from.reg->MemCreate(&m.exported, m.kSize, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(from.reg->MemMap(m.va, m.kSize, 0, m.exported, 0), CUDA_SUCCESS);
  EXPECT_EQ(from.reg->MemSetAccess(m.va, m.kSize, &a, 1), CUDA_SUCCESS);
  auto* w = reinterpret_cast<uint64_t*>(m.va);
  for (size_t i = 0; i < m.kSize / 8; ++i) w[i] = Word(7, i);
  int fd = -1;
  EXPECT_EQ(d.cuMemExportToShareableHandle(&fd, from.reg->Translate(m.exported),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  from.reg->Exported(m.exported, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, &fd);
  EXPECT_EQ(to.MemImport(&m.imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  ::close(fd);  // passed on and imported: NCCL closes it
  EXPECT_EQ(d.cuMemAddressReserve(&m.peer_va, m.kSize, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(to.MemMap(m.peer_va, m.kSize, 0, m.imported, 0), CUDA_SUCCESS);
  EXPECT_EQ(to.MemSetAccess(m.peer_va, m.kSize, &a, 1), CUDA_SUCCESS);
  return m;
}

bool Holds7(CUdeviceptr va) {
  auto* w = reinterpret_cast<const uint64_t*>(va);
  for (size_t i = 0; i < SharedMemory::kSize / 8; ++i) {
    if (w[i] != Word(7, i)) return false;
  }
  return true;
}

TEST_F(FastpathCutTest, MemoryRanksShareIsDrainedByItsExporterAndMappedAgainInTheImporter) {
  SharedMemory m = Share(*ranks_[0], *ranks_[1]->reg, ranks_[0]->d);
  ASSERT_TRUE(Holds7(m.peer_va));
  const uint64_t used = fake_cuda_used_bytes(0);
  std::vector<std::unique_ptr<FastpathDrainHandle>> drains;
  absl::Status st = DrainTogether(*fp_, procs_, Options(absl::Seconds(20)), {}, &drains);
  ASSERT_TRUE(st.ok()) << st;
  // Rank 1's import is rank 0's export, found by the descriptors both hold.
  ASSERT_EQ(procs_[1].imports.size(), 1u);
  EXPECT_EQ(procs_[1].imports[0].from, procs_[0].ns_pid);
  EXPECT_TRUE(procs_[0].imports.empty());
  EXPECT_EQ(drains[0]->bytes(), kBytes + SharedMemory::kSize);  // the exporter moves it
  EXPECT_EQ(drains[1]->bytes(), kBytes);                        // the importer does not
  EXPECT_EQ(fake_cuda_used_bytes(0), used - 2 * kBytes - SharedMemory::kSize);
  drains.clear();

  // The journal and the manifest carry who imported what.
  auto again = FastpathProcessesFromJson(ToJson(procs_));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ((*again)[1].imports.size(), 1u);
  EXPECT_EQ((*again)[1].imports[0].export_id, procs_[1].imports[0].export_id);

  st = RefillTogether(*fp_, *again, 2, {}, {});
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(fake_cuda_used_bytes(0), used);
  for (Rank* k : ranks_) {
    EXPECT_EQ(k->mover->state(), fastpath::State::kRunning);
    EXPECT_FALSE(k->gate.shut());
    EXPECT_TRUE(k->Intact());
  }
  EXPECT_TRUE(Holds7(m.va));
  EXPECT_TRUE(Holds7(m.peer_va));  // mapped again where it was, the exporter's new memory
  reinterpret_cast<uint64_t*>(m.peer_va)[0] = 42;
  EXPECT_EQ(reinterpret_cast<uint64_t*>(m.va)[0], 42u);
}

TEST_F(FastpathCutTest, MemoryImportedFromOutsideTheJobIsRefusedBeforeAnythingMoves) {
  // Rank 1 imports from a process that is not part of the job (rank 0 is left out of it).
  SharedMemory m = Share(*ranks_[0], *ranks_[1]->reg, ranks_[0]->d);
  std::vector<FastpathProcess> job = {procs_[1]};
  const uint64_t used = fake_cuda_used_bytes(0);
  std::vector<std::unique_ptr<FastpathDrainHandle>> drains;
  absl::Status st = DrainTogether(*fp_, job, Options(absl::Seconds(5)), {}, &drains);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("not part of this job"));
  EXPECT_EQ(fake_cuda_used_bytes(0), used);
  EXPECT_EQ(ranks_[1]->mover->state(), fastpath::State::kRunning);
  EXPECT_FALSE(ranks_[1]->gate.shut());
  EXPECT_TRUE(Holds7(m.peer_va));
}

}  // namespace
}  // namespace cryo::gpu
