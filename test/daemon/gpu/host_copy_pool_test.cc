#include "daemon/gpu/host_copy_pool.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "daemon/gpu/host_copy.h"
#include "gtest/gtest.h"

namespace cryo::gpu {
namespace {

constexpr uint64_t kMiB = 1 << 20;

HostCopyPool::Options Small(int slots, std::atomic<uint64_t>* avail) {
  HostCopyPool::Options o;
  o.slots = slots;
  o.slot_bytes = 4 * kMiB;
  o.threads = 2;
  o.available = [avail] { return avail->load(); };
  o.low_water = 64 * kMiB;
  o.poll = absl::Milliseconds(5);
  return o;
}

uint64_t Size(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Every byte of the first `len` of `fd` is zero.
bool AllZero(int fd, uint64_t len) {
  std::vector<char> buf(len);
  if (::pread(fd, buf.data(), len, 0) != static_cast<ssize_t>(len)) return false;
  for (char c : buf) {
    if (c != 0) return false;
  }
  return true;
}

// Takes a 4 MiB slot, writes `used` bytes of a job's data into it (growing it past its size, as
// a library may) and gives it back.
void GiveBackWritten(HostCopyPool& pool, uint64_t used) {
  UniqueFd a = pool.Take(4 * kMiB);
  ASSERT_TRUE(a.ok());
  if (used > 4 * kMiB) {
    ASSERT_EQ(::ftruncate(a.get(), static_cast<off_t>(used)), 0);
  }
  const std::string secret(used, 'j');
  ASSERT_EQ(::pwrite(a.get(), secret.data(), secret.size(), 0),
            static_cast<ssize_t>(secret.size()));
  pool.Give(std::move(a), used);
}

TEST(HostCopyPoolTest, SlotsAreFilledAndTakenUpToTheirSize) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool::Options o = Small(2, &avail);
  std::atomic<int> told_ready{-1}, told_busy{-1};
  o.changed = [&](const HostCopyPool::Counts& c) {
    told_ready = c.ready;
    told_busy = c.busy;
  };
  HostCopyPool pool(o);
  ASSERT_TRUE(pool.WaitReady(2, absl::Seconds(30))) << pool.Describe();
  EXPECT_FALSE(pool.Take(4 * kMiB + 1).ok()) << "larger than a slot";
  UniqueFd a = pool.Take(3 * kMiB);
  UniqueFd b = pool.Take(4 * kMiB);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Size(a.get()), 4 * kMiB);
  EXPECT_TRUE(AllZero(a.get(), 4 * kMiB));
  EXPECT_FALSE(pool.Take(kMiB).ok()) << "both slots are taken";
  const auto c = pool.counts();
  EXPECT_EQ(c.ready, 0);
  EXPECT_EQ(c.busy, 2);
  EXPECT_EQ(c.released, 0);
  EXPECT_EQ(told_ready, 0) << "the metrics' callback is told every change";
  EXPECT_EQ(told_busy, 2);
}

// What one job's drain put into a slot is gone before another job gets it, and a slot a
// library grew comes back at its size.
TEST(HostCopyPoolTest, ASlotGivenBackIsZeroedAndCutBackBeforeItIsTakenAgain) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool pool(Small(1, &avail));
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30))) << pool.Describe();
  GiveBackWritten(pool, 6 * kMiB);
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30))) << pool.Describe();
  UniqueFd again = pool.Take(4 * kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Size(again.get()), 4 * kMiB);
  EXPECT_TRUE(AllZero(again.get(), 4 * kMiB)) << "another job's data is still there";
}

// A restore right after a checkpoint on the same node: the slot the checkpoint gave back is
// still being zeroed, and a Take that may wait gets it once it is zeroed.
TEST(HostCopyPoolTest, ATakeThatMayWaitGetsASlotGivenBackOnceItIsZeroed) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool pool(Small(1, &avail));
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30))) << pool.Describe();
  GiveBackWritten(pool, 4 * kMiB);
  UniqueFd again = pool.Take(4 * kMiB, absl::Seconds(30));
  ASSERT_TRUE(again.ok()) << pool.Describe();
  EXPECT_TRUE(AllZero(again.get(), 4 * kMiB)) << "taken before it was zeroed";
}

// Every slot held by a job and none coming back: a Take that may wait gets nothing, and the
// slots' holders keep them.
TEST(HostCopyPoolTest, ATakeThatMayWaitGetsNothingWhenNoSlotIsComingBack) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool pool(Small(1, &avail));
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30))) << pool.Describe();
  UniqueFd held = pool.Take(4 * kMiB);
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(pool.Take(4 * kMiB, absl::Seconds(1)).ok());
  const auto c = pool.counts();
  EXPECT_EQ(c.ready, 0);
  EXPECT_EQ(c.busy, 1);
}

// A file that is not one of the pool's is closed, not taken in.
TEST(HostCopyPoolTest, AFileNotOfThePoolIsNotTakenIn) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool pool(Small(1, &avail));
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30)));
  UniqueFd other = NewHostCopy(4 * kMiB, 1).value();
  pool.Give(std::move(other), 4 * kMiB);
  EXPECT_FALSE(pool.WaitReady(2, absl::Milliseconds(100)));
  const auto c = pool.counts();
  EXPECT_EQ(c.ready, 1);
  EXPECT_EQ(c.busy, 0);
}

// The node runs short: ready slots are let go (one per poll) while it stays under the mark, and
// filled again once the memory is back. Taken slots stay with their drains.
TEST(HostCopyPoolTest, SlotsAreLetGoWhileTheNodeIsShortAndComeBackAfter) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool pool(Small(3, &avail));
  ASSERT_TRUE(pool.WaitReady(3, absl::Seconds(30))) << pool.Describe();
  UniqueFd held = pool.Take(kMiB);
  ASSERT_TRUE(held.ok());
  avail = 32 * kMiB;
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (pool.counts().released < 2 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
  auto c = pool.counts();
  EXPECT_EQ(c.released, 2) << pool.Describe();
  EXPECT_EQ(c.ready, 0);
  EXPECT_EQ(c.busy, 1);
  EXPECT_FALSE(pool.Take(kMiB).ok());
  // Not filled again while short.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(pool.counts().released, 2);
  avail = 1ull << 40;
  pool.Give(std::move(held), kMiB);
  ASSERT_TRUE(pool.WaitReady(3, absl::Seconds(30))) << pool.Describe();
  EXPECT_EQ(pool.counts().released, 0);
}

// The memory for a slot and the margin must both be there before a slot is filled.
TEST(HostCopyPoolTest, NoSlotIsFilledWhenTheNodeCannotSpareIt) {
  std::atomic<uint64_t> avail{64 * kMiB + 4 * kMiB};  // the mark and a slot, not its eighth
  HostCopyPool pool(Small(1, &avail));
  EXPECT_FALSE(pool.WaitReady(1, absl::Milliseconds(200)));
  EXPECT_EQ(pool.counts().released, 1);
  avail = 1ull << 40;
  EXPECT_TRUE(pool.WaitReady(1, absl::Seconds(30))) << pool.Describe();
}

// A HostCopy of a slot gives it back when it goes, with what may hold a job's data; one of
// cryod's own memory is only closed.
TEST(HostCopyPoolTest, AHostCopyGivesItsSlotBackWhenItGoes) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool pool(Small(1, &avail));
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30)));
  {
    HostCopy copy(pool.Take(kMiB), &pool, kMiB);
    ASSERT_TRUE(copy.ok() && copy.pooled());
    copy.use(2 * kMiB);
    const std::string data(2 * kMiB, 'x');
    ASSERT_EQ(::pwrite(copy.get(), data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
    EXPECT_EQ(pool.counts().busy, 1);
  }
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30)));
  UniqueFd again = pool.Take(kMiB);
  EXPECT_TRUE(AllZero(again.get(), 4 * kMiB));
  HostCopy own(NewHostCopy(kMiB, 1).value(), nullptr, kMiB);
  EXPECT_FALSE(own.pooled());
  own.reset();
  EXPECT_FALSE(own.ok());
}

}  // namespace
}  // namespace cryo::gpu
