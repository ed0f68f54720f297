#pragma once

// What cryo accepts of a runtime's verbose `info` (ContainerStatus, ImageStatus): the shim and
// cryod parse it with the same bounds.

#include "lib/base/json.h"

namespace cryo {

inline constexpr json::Limits kCriVerboseInfoLimits{4u << 20, 64};

}  // namespace cryo
