// The refill's bounded pipeline on its own (plugins/fastpath/pinned_pipeline.h), with plain
// buffers: order, the bound, and a consumer that fails.
#include "plugins/fastpath/pinned_pipeline.h"

#include <atomic>
#include <future>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cryo::fastpath {
namespace {

TEST(PinnedPipelineTest, ItemsAreConsumedInOrderAndTheProducerWaitsOnlyWhenAllAreInFlight) {
  char a[8], b[8];
  std::promise<void> go;
  std::shared_future<void> released = go.get_future().share();
  std::vector<uint64_t> seen;
  PinnedPipeline p({a, b}, [&](const PinnedPipeline::Item& it) -> Result {
    released.wait();  // the consumer holds every buffer it got until the test lets it go
    seen.push_back(it.tag);
    return {};
  });
  char* first = p.Acquire();
  p.Submit(first, 0, 8);
  char* second = p.Acquire();
  EXPECT_NE(first, second);
  p.Submit(second, 1, 8);
  // Both buffers are in flight: a third Acquire waits for the consumer.
  auto third = std::async(std::launch::async, [&] { return p.Acquire(); });
  EXPECT_EQ(third.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  go.set_value();
  char* c = third.get();
  EXPECT_TRUE(c == a || c == b);
  p.Submit(c, 2, 8);
  EXPECT_TRUE(p.Finish().ok());
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(p.Finish().ok()) << "idempotent";
}

TEST(PinnedPipelineTest, AConsumerThatFailsStopsConsumingAndEveryBufferStillComesBack) {
  char a[8], b[8];
  std::atomic<int> consumed{0};
  PinnedPipeline p({a, b}, [&](const PinnedPipeline::Item& it) -> Result {
    ++consumed;
    return it.tag == 1 ? Result::Failed("copying a file's data to the GPU: out of memory")
                       : Result{};
  });
  // Ten items over two buffers: the producer never waits forever on a consumer that failed.
  for (uint64_t t = 0; t < 10; ++t) p.Submit(p.Acquire(), t, 8);
  EXPECT_EQ(p.Finish().error, "copying a file's data to the GPU: out of memory");
  EXPECT_EQ(consumed.load(), 2);
}

}  // namespace
}  // namespace cryo::fastpath
