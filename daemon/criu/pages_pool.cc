#include "daemon/criu/pages_pool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"

namespace cryo::criu {

PagesPool::PagesPool(Options o) : o_(std::move(o)) {
  if (::mkdir(o_.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    CRYO_LOG(Warning) << "pages pool: making " << o_.dir << ": " << strerror(errno)
                      << "; nothing is kept";
    o_.cap = 0;
  }
  if (o_.poll > absl::ZeroDuration() && o_.cap > 0) {
    watch_ = std::thread([this] {
      absl::MutexLock l(&mu_);
      while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), o_.poll)) {
        mu_.Unlock();
        Trim();
        mu_.Lock();
      }
    });
  }
}

PagesPool::~PagesPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (watch_.joinable()) watch_.join();
  absl::MutexLock l(&mu_);
  while (!kept_.empty()) Drop(kept_.begin());
}

void PagesPool::Drop(std::vector<Kept>::iterator it) {
  (void)::unlink(it->path.c_str());
  held_ -= it->bytes;
  kept_.erase(it);
}

std::optional<PagesPool::File> PagesPool::Take(uint64_t bytes) {
  Trim();
  absl::MutexLock l(&mu_);
  if (kept_.empty()) return std::nullopt;
  // The smallest that holds `bytes`, else the largest: the least cut off or added.
  auto best = kept_.end();
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (best == kept_.end()) {
      best = it;
    } else if (it->bytes >= bytes) {
      if (best->bytes < bytes || it->bytes < best->bytes) best = it;
    } else if (best->bytes < bytes && it->bytes > best->bytes) {
      best = it;
    }
  }
  File f;
  f.fd.reset(::open(best->path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!f.fd.ok()) {
    Drop(best);
    return std::nullopt;
  }
  f.path = best->path;
  f.bytes = best->bytes;
  held_ -= best->bytes;
  kept_.erase(best);
  return f;
}

void PagesPool::Return(File f) {
  struct stat sb;
  if (!f.fd.ok() || ::fstat(f.fd.get(), &sb) != 0 || sb.st_nlink == 0) return;
  absl::MutexLock l(&mu_);
  const uint64_t bytes = static_cast<uint64_t>(sb.st_size);
  if (held_ + bytes > o_.cap) {
    (void)::unlink(f.path.c_str());
    return;
  }
  kept_.push_back(Kept{std::move(f.path), bytes});
  held_ += bytes;
}

void PagesPool::Keep(const std::string& path) {
  struct stat sb;
  if (o_.cap == 0 || ::lstat(path.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) {
    return;
  }
  const uint64_t bytes = static_cast<uint64_t>(sb.st_size);
  if (o_.available && o_.available() < o_.low_water + bytes) return;
  absl::MutexLock l(&mu_);
  if (held_ + bytes > o_.cap) return;
  std::string to = fs::Join(o_.dir, absl::StrCat("p", next_++));
  if (::rename(path.c_str(), to.c_str()) != 0) return;  // left where it is, removed with it
  kept_.push_back(Kept{std::move(to), bytes});
  held_ += bytes;
}

void PagesPool::Trim() {
  if (!o_.available) return;
  absl::MutexLock l(&mu_);
  while (!kept_.empty() && o_.available() < o_.low_water) {
    auto largest = std::max_element(kept_.begin(), kept_.end(),
                                    [](const Kept& a, const Kept& b) { return a.bytes < b.bytes; });
    CRYO_LOG(Info) << "pages pool: " << largest->bytes << " bytes let go (the node has "
                   << o_.available() << " bytes available, under " << o_.low_water << ")";
    Drop(largest);
  }
}

uint64_t PagesPool::held() const {
  absl::MutexLock l(&mu_);
  return held_;
}

int PagesPool::files() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(kept_.size());
}

}  // namespace cryo::criu
