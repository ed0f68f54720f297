#include "daemon/gpu/thp.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/proc.h"

namespace cryo::gpu {
namespace {

absl::Status WriteMode(const std::string& path, const std::string& mode) {
  std::ofstream out(path);
  out << mode;
  out.flush();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", mode, " to ", path));
  return absl::OkStatus();
}

// "always [madvise] never" -> "madvise": the selected value of a sysfs choice file.
std::string SelectedChoice(absl::string_view text) {
  size_t open = text.find('[');
  size_t close = text.find(']', open);
  if (open == absl::string_view::npos || close == absl::string_view::npos) {
    return std::string(absl::StripAsciiWhitespace(text));
  }
  return std::string(text.substr(open + 1, close - open - 1));
}

}  // namespace

absl::StatusOr<std::string> ThpSetter::Acquire() {
  absl::MutexLock l(&mu_);
  if (mode_.empty()) return std::string();
  if (users_++ > 0) return absl::StrCat(mode_, " (was ", previous_, ")");
  auto cur = fs::ReadFile(path_);
  if (!cur.ok()) return cur.status();
  previous_ = SelectedChoice(*cur);
  changed_ = false;
  if (previous_ == mode_) return mode_;
  absl::Status s = WriteMode(path_, mode_);
  if (!s.ok()) return s;
  changed_ = true;
  return absl::StrCat(mode_, " (was ", previous_, ")");
}

void ThpSetter::Release() {
  absl::MutexLock l(&mu_);
  if (mode_.empty() || users_ == 0) return;
  if (--users_ > 0 || !changed_) return;
  if (absl::Status s = WriteMode(path_, previous_); !s.ok()) {
    CRYO_LOG(Warning) << "transparent huge pages left at " << mode_ << ", not set back to "
                      << previous_ << ": " << s;
  }
  changed_ = false;
}

}  // namespace cryo::gpu
