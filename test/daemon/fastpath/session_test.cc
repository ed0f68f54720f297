#include "daemon/fastpath/session.h"

#include <sys/stat.h>

#include <atomic>

#include "gtest/gtest.h"

namespace cryo::gpu {
namespace {

constexpr uint64_t kMiB = 1 << 20;

FastpathProcess Proc(pid_t pid, uint64_t bytes) {
  FastpathProcess f;
  f.pid = pid;
  f.ns_pid = pid;
  f.bytes = bytes;
  return f;
}

uint64_t Size(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// A job's launcher (owning nothing) beside two ranks and one slot: the largest rank gets the
// slot, the launcher takes none, and the other rank gets fresh memory once that is allowed.
TEST(FastpathSessionTest, SlotsGoToTheLargestProcessesAndNoneToOneThatOwnsNothing) {
  std::atomic<uint64_t> avail{1ull << 40};
  HostCopyPool::Options o;
  o.slots = 1;
  o.slot_bytes = 8 * kMiB;
  o.available = [&] { return avail.load(); };
  o.poll = absl::Milliseconds(5);
  HostCopyPool pool(o);
  ASSERT_TRUE(pool.WaitReady(1, absl::Seconds(30)));

  FastpathSession s({Proc(10, 0), Proc(11, 2 * kMiB), Proc(12, 6 * kMiB)});
  uint64_t asked = 0;
  auto pooled = s.AllocateHostCopies(1, -1, &pool, [&](uint64_t bytes) {
    asked = bytes;
    return absl::OkStatus();
  });
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_EQ(*pooled, 1u);
  EXPECT_EQ(asked, 2 * kMiB) << "fresh memory for the rank without a slot only";
  ASSERT_TRUE(s.has_host_copies());
  s.PlaceData(/*memory=*/true, 4);
  const auto targets = s.DrainTargets();
  EXPECT_EQ(Size(targets[0][0]), 0u) << "the launcher: an empty copy";
  EXPECT_EQ(Size(targets[1][0]), 2 * kMiB) << "the smaller rank: fresh memory of its size";
  EXPECT_EQ(Size(targets[2][0]), 8 * kMiB) << "the larger rank: the slot";
  EXPECT_EQ(pool.counts().busy, 1);

  // Refused fresh memory (a stop checkpoint, the one slot taken above): none at all.
  FastpathSession t({Proc(20, 6 * kMiB), Proc(21, 6 * kMiB)});
  absl::StatusOr<size_t> none =
      t.AllocateHostCopies(1, -1, &pool, [](uint64_t) { return absl::UnavailableError("no"); });
  EXPECT_TRUE(absl::IsUnavailable(none.status())) << none.status();
  EXPECT_FALSE(t.has_host_copies());
}

// The launcher alone needs no slot and no fresh memory: its copy is an empty file.
TEST(FastpathSessionTest, AProcessThatOwnsNothingGetsAnEmptyCopyWithoutAsking) {
  FastpathSession s({Proc(10, 0)});
  bool asked = false;
  auto pooled = s.AllocateHostCopies(1, -1, nullptr, [&](uint64_t) {
    asked = true;
    return absl::OkStatus();
  });
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_EQ(*pooled, 0u);
  EXPECT_FALSE(asked);
  ASSERT_TRUE(s.has_host_copies());
  s.PlaceData(/*memory=*/true, 4);
  EXPECT_EQ(Size(s.DrainTargets()[0][0]), 0u);
}

}  // namespace
}  // namespace cryo::gpu
