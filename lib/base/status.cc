#include "lib/base/status.h"

#include <cstring>

namespace cryo {

absl::StatusCode ErrnoToCode(int err) {
  switch (err) {
    case ENOENT:
    case ESRCH:
      return absl::StatusCode::kNotFound;
    case EEXIST:
    case ENOTEMPTY:
      return absl::StatusCode::kAlreadyExists;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case EROFS:
    case EBUSY:
    case ENOTDIR:
    case EISDIR:
      return absl::StatusCode::kFailedPrecondition;
    case EACCES:
    case EPERM:
      return absl::StatusCode::kPermissionDenied;
    case EINVAL:
    case ENAMETOOLONG:
      return absl::StatusCode::kInvalidArgument;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case EINTR:
    case EAGAIN:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoStatus(int err, absl::string_view what) {
  return absl::Status(ErrnoToCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

std::string CodeName(int code) {
  if (code < 0 || code > 16) return "UNKNOWN";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace cryo
