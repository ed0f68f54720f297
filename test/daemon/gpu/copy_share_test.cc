// The node's copy threads among the fast-path drains that run at once (copy_share.h).

#include "daemon/gpu/copy_share.h"

#include "gtest/gtest.h"

namespace cryo::gpu {
namespace {

TEST(CopyShareTest, ALoneJobKeepsEveryThreadAndJobsAtOnceShareThem) {
  CopyShare share;
  EXPECT_EQ(share.ThreadsEach(32), 32) << "nobody claims: all of them";
  {
    CopyShare::Claim one = share.Take(1);
    EXPECT_EQ(share.ThreadsEach(32), 32) << "a lone job";
    CopyShare::Claim other = share.Take(1);
    EXPECT_EQ(share.ThreadsEach(32), 16) << "two jobs preempted together";
    CopyShare::Claim ranks = share.Take(2);
    EXPECT_EQ(share.claimed(), 4);
    EXPECT_EQ(share.ThreadsEach(32), 8) << "the ranks of a job count one each";
    other.Release();
    other.Release();  // once only
    EXPECT_EQ(share.ThreadsEach(32), 10);
    CopyShare::Claim moved = std::move(ranks);
    EXPECT_EQ(share.claimed(), 3) << "a claim moved is still one claim";
  }
  EXPECT_EQ(share.claimed(), 0) << "every claim went with its holder";
}

TEST(CopyShareTest, ADrainNeverGetsFewerThanTheMinimumNorMoreThanTheNodeHas) {
  CopyShare share;
  CopyShare::Claim many = share.Take(64);
  EXPECT_EQ(share.ThreadsEach(32), CopyShare::kMinThreads);
  EXPECT_EQ(share.ThreadsEach(2), 2) << "a node with fewer threads than the minimum";
  CopyShare::Claim none = share.Take(0);
  EXPECT_EQ(share.claimed(), 64);
}

}  // namespace
}  // namespace cryo::gpu
