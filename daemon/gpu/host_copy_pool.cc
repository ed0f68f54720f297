#include "daemon/gpu/host_copy_pool.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/gpu/host_copy.h"
#include "lib/base/log.h"

namespace cryo::gpu {
namespace {

std::pair<dev_t, ino_t> Identity(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

// Zeroes the first `len` bytes of `fd` with `threads` threads; false when it cannot be mapped.
bool Zero(int fd, uint64_t len, int threads) {
  return EachPieceMapped(fd, len, threads,
                         [](char* p, uint64_t n) {
                           std::memset(p, 0, n);
                           return absl::OkStatus();
                         })
      .ok();
}

}  // namespace

HostCopyPool::HostCopyPool(Options o) : o_(std::move(o)) {
  {
    absl::MutexLock l(&mu_);
    Changed();
  }
  thread_ = std::thread([this] { Run(); });
}

HostCopyPool::~HostCopyPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

UniqueFd HostCopyPool::Take(uint64_t bytes, absl::Duration wait, std::string_view taker) {
  absl::MutexLock l(&mu_);
  if (bytes > o_.slot_bytes) return UniqueFd();
  if (ready_.empty() && wait > absl::ZeroDuration()) {
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !ready_.empty() || (dirty_.empty() && zeroing_ == 0);
    };
    const absl::Time t0 = absl::Now();
    mu_.AwaitWithTimeout(absl::Condition(&settled), wait);
    if (!ready_.empty()) {
      CRYO_LOG(Info) << "staging memory: " << taker << " waited "
                     << absl::ToInt64Milliseconds(absl::Now() - t0)
                     << " ms for a slot being zeroed";
    }
  }
  if (ready_.empty()) return UniqueFd();
  UniqueFd fd = std::move(ready_.back());
  ready_.pop_back();
  ++taken_;
  Changed();
  CRYO_LOG(Info) << "staging memory: " << taker << " took a slot (" << ready_.size() << " of "
                 << o_.slots << " ready)";
  return fd;
}

void HostCopyPool::Give(UniqueFd fd, uint64_t used) {
  if (!fd.ok()) return;
  const auto id = Identity(fd.get());
  absl::MutexLock l(&mu_);
  if (std::find(mine_.begin(), mine_.end(), id) == mine_.end()) return;  // closed
  --taken_;
  dirty_.emplace_back(std::move(fd), used);
  Changed();
}

HostCopyPool::Counts HostCopyPool::counts() const {
  absl::MutexLock l(&mu_);
  return CountsLocked();
}

void HostCopyPool::Changed() const {
  if (o_.changed) o_.changed(CountsLocked());
}

HostCopyPool::Counts HostCopyPool::CountsLocked() const {
  Counts c;
  c.ready = static_cast<int>(ready_.size());
  c.busy = taken_ + zeroing_ + static_cast<int>(dirty_.size());
  c.released = o_.slots - static_cast<int>(mine_.size());
  return c;
}

bool HostCopyPool::WaitReady(int slots, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto ready = [this, slots]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(ready_.size()) >= slots;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

std::string HostCopyPool::Describe() const {
  const Counts c = counts();
  return absl::StrCat(o_.slots, " slots of ", o_.slot_bytes >> 20, " MiB (", c.ready, " ready, ",
                      c.busy, " in use, ", c.released, " not held)");
}

void HostCopyPool::Run() {
  while (true) {
    const bool worked = Step();
    absl::MutexLock l(&mu_);
    if (stop_) return;
    if (worked) continue;
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !dirty_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&wake), o_.poll);
  }
}

bool HostCopyPool::Step() {
  // A slot given back is zeroed first: a drain may be waiting for it.
  std::pair<UniqueFd, uint64_t> dirty;
  {
    absl::MutexLock l(&mu_);
    if (stop_) return false;
    if (!dirty_.empty()) {
      dirty = std::move(dirty_.back());
      dirty_.pop_back();
      ++zeroing_;
    }
  }
  if (dirty.first.ok()) {
    const int fd = dirty.first.get();
    const absl::Time t0 = absl::Now();
    const uint64_t len = std::min(dirty.second, o_.slot_bytes);
    const bool ok =
        ::ftruncate(fd, static_cast<off_t>(o_.slot_bytes)) == 0 && Zero(fd, len, o_.threads);
    absl::MutexLock l(&mu_);
    --zeroing_;
    if (ok) {
      ready_.push_back(std::move(dirty.first));
      Changed();
      CRYO_LOG(Info) << "staging memory: a slot is ready again, " << (len >> 20)
                     << " MiB zeroed in " << absl::ToInt64Milliseconds(absl::Now() - t0) << " ms ("
                     << ready_.size() << " of " << o_.slots << " ready)";
    } else {
      // Never handed on unzeroed: let go, and filled afresh when the node allows.
      CRYO_LOG(Warning) << "staging memory: a slot could not be zeroed; it is let go";
      const auto id = Identity(fd);
      mine_.erase(std::remove(mine_.begin(), mine_.end(), id), mine_.end());
      Changed();
    }
    return true;
  }
  const uint64_t avail = o_.available ? o_.available() : AvailableHostMemory();
  int held = 0;
  {
    absl::MutexLock l(&mu_);
    if (avail < o_.low_water && !ready_.empty()) {
      const auto id = Identity(ready_.back().get());
      ready_.pop_back();
      mine_.erase(std::remove(mine_.begin(), mine_.end(), id), mine_.end());
      Changed();
      CRYO_LOG(Warning) << "staging memory: the node has " << (avail >> 20)
                        << " MiB available, under the low-water mark of " << (o_.low_water >> 20)
                        << " MiB: a slot of " << (o_.slot_bytes >> 20) << " MiB is let go";
      return false;  // one per poll: the node's memory is looked at again first
    }
    held = static_cast<int>(mine_.size());
  }
  if (held >= o_.slots || avail < o_.low_water + o_.slot_bytes + o_.slot_bytes / 8) return false;
  const absl::Time t0 = absl::Now();
  auto fd = NewHostCopy(o_.slot_bytes, o_.threads, o_.fs);
  if (!fd.ok()) {
    CRYO_LOG(Warning) << "staging memory: a slot of " << (o_.slot_bytes >> 20)
                      << " MiB could not be filled: " << fd.status();
    return false;
  }
  absl::MutexLock l(&mu_);
  mine_.push_back(Identity(fd->get()));
  ready_.push_back(*std::move(fd));
  Changed();
  CRYO_LOG(Info) << "staging memory: a slot of " << (o_.slot_bytes >> 20) << " MiB filled in "
                 << absl::ToInt64Milliseconds(absl::Now() - t0) << " ms (" << ready_.size()
                 << " of " << o_.slots << " ready)";
  return true;
}

}  // namespace cryo::gpu
