#include "lib/base/parallel.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cryo {
namespace {

// Every index is done exactly once, by no more threads than asked, each with its own worker.
TEST(EachIndexTest, EveryIndexOnceOnAtMostTheThreadsAskedEachWithItsOwnWorker) {
  constexpr size_t kN = 1000;
  std::vector<std::atomic<int>> done(kN);
  std::atomic<int> workers{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  ASSERT_TRUE(EachIndexWith(kN, 3, [&] {
                ++workers;
                auto mine = std::make_shared<int>(0);  // this thread's own count
                return [&, mine](size_t i) {
                  ++*mine;
                  ++done[i];
                  std::lock_guard<std::mutex> l(mu);
                  threads.insert(std::this_thread::get_id());
                  return absl::OkStatus();
                };
              }).ok());
  for (size_t i = 0; i < kN; ++i) EXPECT_EQ(done[i].load(), 1) << i;
  EXPECT_GE(workers.load(), 1);
  EXPECT_LE(workers.load(), 3);
  EXPECT_LE(threads.size(), 3u);
  // No work: no worker is made.
  workers = 0;
  EXPECT_TRUE(EachIndexWith(0, 4, [&] {
                ++workers;
                return [](size_t) { return absl::OkStatus(); };
              }).ok());
  EXPECT_EQ(workers.load(), 0);
}

// A failure is returned and stops the rest: one thread takes the indexes in order, so nothing
// after the failing one is done.
TEST(EachIndexTest, TheFirstFailureIsReturnedAndNothingAfterItIsStarted) {
  std::vector<size_t> seen;
  absl::Status st = EachIndex(10, 1, [&](size_t i) {
    seen.push_back(i);
    return i == 3 ? absl::DataLossError("piece 3") : absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_EQ(seen, (std::vector<size_t>{0, 1, 2, 3}));
  // With several threads, whichever thread meets it, the failure comes back.
  for (size_t bad : {size_t{0}, size_t{517}, size_t{999}}) {
    st = EachIndex(1000, 4, [&](size_t i) {
      return i == bad ? absl::InternalError("bad") : absl::OkStatus();
    });
    EXPECT_TRUE(absl::IsInternal(st)) << bad << ": " << st;
  }
}

}  // namespace
}  // namespace cryo
