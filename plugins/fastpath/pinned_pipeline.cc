#include "plugins/fastpath/pinned_pipeline.h"

#include "plugins/fastpath/gate.h"

namespace cryo::fastpath {

PinnedPipeline::PinnedPipeline(std::vector<char*> bufs, std::function<Result(const Item&)> consume)
    : consume_(std::move(consume)), free_(bufs.begin(), bufs.end()) {
  thread_ = std::thread([this] { Consume(); });
}

PinnedPipeline::~PinnedPipeline() {
  // Dropped without Finish() only on its owner's early return, which reports its own error.
  (void)Finish();
}

char* PinnedPipeline::Acquire() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !free_.empty(); });
  char* b = free_.front();
  free_.pop_front();
  return b;
}

void PinnedPipeline::Submit(char* buf, uint64_t tag, uint64_t n) {
  {
    std::lock_guard<std::mutex> l(mu_);
    filled_.push_back({buf, tag, n});
  }
  cv_.notify_all();
}

Result PinnedPipeline::Finish() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  return error_;
}

void PinnedPipeline::Consume() {
  // The library's own thread: the job's gate never holds it.
  GateGuard::MarkLibraryThread();
  for (;;) {
    Item it;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return !filled_.empty() || closed_; });
      if (filled_.empty()) return;
      it = filled_.front();
      filled_.pop_front();
    }
    if (error_.ok()) error_ = consume_(it);
    {
      std::lock_guard<std::mutex> l(mu_);
      free_.push_back(it.buf);
    }
    cv_.notify_all();
  }
}

}  // namespace cryo::fastpath
