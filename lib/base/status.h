#pragma once

// Status plumbing shared by every module: errno mapping and early-return macros (this abseil
// has no public ones).

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cryo {

// Maps an errno to the status code a client can act on: a full store is RESOURCE_EXHAUSTED,
// a read-only one FAILED_PRECONDITION, and so on.
absl::StatusCode ErrnoToCode(int err);
absl::Status ErrnoStatus(int err, absl::string_view what);

// Prepends context to a status message, keeping its code.
absl::Status Annotate(const absl::Status& s, absl::string_view context);

// The canonical name of a status code as absl and gRPC number them ("DEADLINE_EXCEEDED");
// "UNKNOWN" for a number outside 0..16. The one table the CLI, the shim and the metrics use.
std::string CodeName(int code);

}  // namespace cryo

#define CRYO_CONCAT_INNER(a, b) a##b
#define CRYO_CONCAT(a, b) CRYO_CONCAT_INNER(a, b)

#define CRYO_RETURN_IF_ERROR(expr)              \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (0)

#define CRYO_ASSIGN_OR_RETURN(lhs, expr) \
  CRYO_ASSIGN_OR_RETURN_IMPL(CRYO_CONCAT(_statusor_, __LINE__), lhs, expr)
#define CRYO_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
