#include "cri-shim/metrics_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "prometheus/text_serializer.h"

namespace cryo::shim {

absl::StatusOr<std::unique_ptr<MetricsFileWriter>> MetricsFileWriter::Start(
    std::shared_ptr<prometheus::Registry> registry, std::string path, absl::Duration interval) {
  auto w = std::unique_ptr<MetricsFileWriter>(
      new MetricsFileWriter(std::move(registry), std::move(path), interval));
  if (absl::Status s = w->WriteOnce(); !s.ok()) return s;
  w->thread_ = std::thread([p = w.get()] { p->Loop(); });
  return w;
}

MetricsFileWriter::~MetricsFileWriter() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

absl::Status MetricsFileWriter::WriteOnce() {
  prometheus::TextSerializer ser;
  const std::string text = ser.Serialize(registry_->Collect());
  const std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("writing ", tmp, ": ", strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("writing ", tmp, ": ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("renaming ", tmp, " to ", path_, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

void MetricsFileWriter::Loop() {
  bool failing = false;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped), interval_)) return;
    }
    absl::Status s = WriteOnce();
    // Said once per run of failures, and when it works again.
    if (!s.ok() && !failing) CRYO_LOG(Warning) << "metrics file: " << s;
    if (s.ok() && failing) CRYO_LOG(Info) << "metrics file: written again to " << path_;
    failing = !s.ok();
  }
}

}  // namespace cryo::shim
