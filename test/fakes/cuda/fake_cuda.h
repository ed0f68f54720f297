#pragma once

// The fake CUDA driver (fake_cuda.cc) as the fast path's Driver table, for in-process tests.

#include <cstdint>

#include "plugins/fastpath/driver.h"

extern "C" uint64_t fake_cuda_used_bytes(int device);
extern "C" uint64_t fake_cuda_registered_bytes();
// Bytes the async copies moved to or from host memory registered with the driver.
extern "C" uint64_t fake_cuda_registered_dma_bytes();
extern "C" uint64_t fake_cuda_host_used_bytes();

namespace cryo::fastpath::testing {

inline Driver FakeDriver() {
  Driver d;
#define CRYO_FAKE_FILL(name) d.name = &::name;
  CRYO_FASTPATH_DRIVER_FUNCS(CRYO_FAKE_FILL)
#undef CRYO_FAKE_FILL
  return d;
}

}  // namespace cryo::fastpath::testing
