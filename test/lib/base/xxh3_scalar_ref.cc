// The reference for chunked_xxh3_test.cc: XXH3-128 built in this file alone, scalar, with none
// of libxxhash's code. Kept apart so that its inlined xxHash cannot meet the dispatched one.
#define XXH_INLINE_ALL
#define XXH_VECTOR 0  // XXH_SCALAR
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <utility>

std::pair<uint64_t, uint64_t> ScalarXxh3For128(const void* p, size_t n) {
  const XXH128_hash_t h = XXH3_128bits(p, n);
  return {h.low64, h.high64};
}
