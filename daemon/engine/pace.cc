#include "daemon/engine/pace.h"

#include <algorithm>
#include <vector>

namespace cryo::engine {
namespace {

double Median(std::vector<double> r) {
  std::sort(r.begin(), r.end());
  const size_t n = r.size();
  return n % 2 == 1 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
}

}  // namespace

void CheckpointPace::Add(const std::string& workload, uint64_t bytes, absl::Duration took) {
  if (bytes == 0 || took <= absl::ZeroDuration()) return;
  const double rate = static_cast<double>(bytes) / absl::ToDoubleSeconds(took);
  absl::MutexLock l(&mu_);
  ++adds_;
  for (Samples* s : {&node_, &workloads_[workload]}) {
    s->rates.push_back(rate);
    s->added = adds_;
    while (s->rates.size() > kSamples) s->rates.pop_front();
  }
  if (workloads_.size() > kWorkloads) {
    auto oldest = std::min_element(workloads_.begin(), workloads_.end(), [](auto& a, auto& b) {
      return a.second.added < b.second.added;
    });
    workloads_.erase(oldest);
  }
}

std::optional<double> CheckpointPace::BytesPerSecond(const std::string& workload) const {
  std::vector<double> r;
  {
    absl::MutexLock l(&mu_);
    auto it = workloads_.find(workload);
    const Samples& s = it != workloads_.end() ? it->second : node_;
    r.assign(s.rates.begin(), s.rates.end());
  }
  if (r.empty()) return std::nullopt;
  return Median(std::move(r));
}

std::optional<absl::Duration> CheckpointPace::Predict(const std::string& workload,
                                                      uint64_t bytes) const {
  auto bps = BytesPerSecond(workload);
  if (!bps) return std::nullopt;
  return absl::Seconds(static_cast<double>(bytes) / *bps);
}

}  // namespace cryo::engine
