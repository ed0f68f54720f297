#pragma once

// A bounded pipeline between a producer that fills buffers (a file's reader) and a consumer
// thread that empties them in the order they were filled (hashes them and copies them to the
// GPU): the producer waits only when every buffer is in flight, the consumer only when none is
// filled. The refill from files runs one per file. The buffers are the caller's (pinned ones
// for the GPU's DMA).
//
//   PinnedPipeline p(bufs, [&](const PinnedPipeline::Item& it) { return Use(it); });
//   while (more) { char* b = p.Acquire(); Fill(b); p.Submit(b, offset, n); }
//   Result r = p.Finish();  // the consumer's first error, ok when none

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plugins/fastpath/result.h"

namespace cryo::fastpath {

class PinnedPipeline {
 public:
  struct Item {
    char* buf = nullptr;
    uint64_t tag = 0;  // the producer's (where the bytes go)
    uint64_t n = 0;    // bytes filled
  };
  // `consume` runs on the pipeline's thread, once per item in order, until it returns an error;
  // after that the items are only given back.
  PinnedPipeline(std::vector<char*> bufs, std::function<Result(const Item&)> consume);
  ~PinnedPipeline();  // Finish()
  PinnedPipeline(const PinnedPipeline&) = delete;
  PinnedPipeline& operator=(const PinnedPipeline&) = delete;

  // A free buffer; blocks while every one is in flight.
  char* Acquire();
  // `buf` (from Acquire) holds `n` bytes for `tag`.
  void Submit(char* buf, uint64_t tag, uint64_t n);
  // No more items: waits until the consumer has seen every one; its first error (ok: none).
  // Idempotent.
  Result Finish();

 private:
  void Consume();

  std::function<Result(const Item&)> consume_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<char*> free_;
  std::deque<Item> filled_;
  bool closed_ = false;
  Result error_;  // the consumer's (its thread only, until joined)
  std::thread thread_;
};

}  // namespace cryo::fastpath
