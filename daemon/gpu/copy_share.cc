#include "daemon/gpu/copy_share.h"

#include <algorithm>

namespace cryo::gpu {

void CopyShare::Claim::Release() {
  if (share_ == nullptr) return;
  std::lock_guard<std::mutex> l(share_->mu_);
  share_->claimed_ -= n_;
  share_ = nullptr;
}

CopyShare::Claim CopyShare::Take(int processes) {
  if (processes <= 0) return Claim();
  std::lock_guard<std::mutex> l(mu_);
  claimed_ += processes;
  return Claim(this, processes);
}

int CopyShare::ThreadsEach(int node_threads) const {
  std::lock_guard<std::mutex> l(mu_);
  const int each = node_threads / std::max(1, claimed_);
  return std::min(node_threads, std::max(kMinThreads, each));
}

int CopyShare::claimed() const {
  std::lock_guard<std::mutex> l(mu_);
  return claimed_;
}

}  // namespace cryo::gpu
