#include "lib/metrics/registry.h"

#include <dirent.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/fs.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"

namespace cryo::metrics {
namespace {

// Refreshes the process metrics whenever it is collected.
class ProcessRegistry final : public prometheus::Registry {
 public:
  explicit ProcessRegistry(absl::string_view component, absl::string_view version) {
    prometheus::BuildGauge()
        .Name("cryo_build_info")
        .Help("cryo's version (always 1), by component")
        .Register(*this)
        .Add({{"component", std::string(component)}, {"version", std::string(version)}})
        .Set(1);
    cpu_ = &prometheus::BuildCounter()
                .Name("process_cpu_seconds_total")
                .Help("Total user and system CPU time spent in seconds.")
                .Register(*this)
                .Add({});
    resident_ = &Gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
    virtual_ = &Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
    open_fds_ = &Gauge("process_open_fds", "Number of open file descriptors.");
    max_fds_ = &Gauge("process_max_fds", "Maximum number of open file descriptors.");
    start_ = &Gauge("process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.");
    Refresh();
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    Refresh();
    return prometheus::Registry::Collect();
  }

 private:
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(*this).Add({});
  }

  void Refresh() const {
    ProcessStats s = ReadProcessStats();
    absl::MutexLock l(&mu_);
    // A counter only goes up: add what was used since the last scrape.
    if (s.cpu_seconds > cpu_seen_) {
      cpu_->Increment(s.cpu_seconds - cpu_seen_);
      cpu_seen_ = s.cpu_seconds;
    }
    resident_->Set(s.resident_bytes);
    virtual_->Set(s.virtual_bytes);
    open_fds_->Set(s.open_fds);
    max_fds_->Set(s.max_fds);
    start_->Set(s.start_time_seconds);
  }

  mutable absl::Mutex mu_;
  mutable double cpu_seen_ ABSL_GUARDED_BY(mu_) = 0;
  prometheus::Counter* cpu_;
  prometheus::Gauge* resident_;
  prometheus::Gauge* virtual_;
  prometheus::Gauge* open_fds_;
  prometheus::Gauge* max_fds_;
  prometheus::Gauge* start_;
};

}  // namespace

ProcessStats ReadProcessStats(const std::string& proc_root) {
  ProcessStats s;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  double btime = 0;
  if (auto stat = fs::ReadFile(proc_root + "/stat"); stat.ok()) {
    for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
      if (absl::ConsumePrefix(&line, "btime ")) (void)absl::SimpleAtod(line, &btime);
    }
  }
  if (auto self = fs::ReadFile(proc_root + "/self/stat"); self.ok()) {
    // After the command in parentheses (which may hold spaces): field 3 on.
    size_t close = self->rfind(')');
    if (close != std::string::npos) {
      std::vector<absl::string_view> f =
          absl::StrSplit(absl::string_view(*self).substr(close + 2), ' ', absl::SkipEmpty());
      // f[0] is field 3 (state): utime 14, stime 15, starttime 22, vsize 23, rss 24.
      auto field = [&](size_t n) {
        double v = 0;
        if (n - 3 < f.size()) (void)absl::SimpleAtod(f[n - 3], &v);
        return v;
      };
      if (ticks > 0) {
        s.cpu_seconds = (field(14) + field(15)) / ticks;
        s.start_time_seconds = btime + field(22) / ticks;
      }
      s.virtual_bytes = field(23);
      s.resident_bytes = field(24) * page;
    }
  }
  if (DIR* d = ::opendir((proc_root + "/self/fd").c_str())) {
    int n = 0;
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
    // Our own listing holds a descriptor of the directory it lists.
    s.open_fds = proc_root == "/proc" ? n - 1 : n;
  }
  if (auto limits = fs::ReadFile(proc_root + "/self/limits"); limits.ok()) {
    for (absl::string_view line : absl::StrSplit(*limits, '\n')) {
      if (!absl::ConsumePrefix(&line, "Max open files")) continue;
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (!f.empty()) (void)absl::SimpleAtod(f[0], &s.max_fds);
    }
  }
  return s;
}

std::shared_ptr<prometheus::Registry> NewRegistry(absl::string_view component,
                                                  absl::string_view version) {
  return std::make_shared<ProcessRegistry>(component, version);
}

}  // namespace cryo::metrics
