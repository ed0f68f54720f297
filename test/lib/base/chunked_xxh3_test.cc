// The store's checksum through libxxhash's runtime dispatch (AVX2 or AVX-512 where the CPU has
// them) gives the digests of plain scalar XXH3: a mismatch would refuse every checkpoint written
// by a node of another CPU, or by the fast-path library, which hashes with its own copy.
#include "lib/base/chunked_xxh3.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

std::pair<uint64_t, uint64_t> ScalarXxh3For128(const void* p, size_t n);

namespace cryo::xxh3chunked {
namespace {

#define CRYO_NAME_OF(x) CRYO_NAME_OF2(x)
#define CRYO_NAME_OF2(x) #x

TEST(ChunkedXxh3Test, HashingGoesThroughTheRuntimeDispatchOnX86) {
#if defined(__x86_64__)
  EXPECT_STREQ(CRYO_NAME_OF(XXH3_128bits_update), "XXH3_128bits_update_dispatch");
  EXPECT_STREQ(CRYO_NAME_OF(XXH3_128bits), "XXH3_128bits_dispatch");
#else
  GTEST_SKIP() << "libxxhash dispatches only on x86";
#endif
}

TEST(ChunkedXxh3Test, DispatchedDigestsAreTheScalarOnesAtEverySizeAndSplit) {
  std::mt19937_64 rng(41);
  std::vector<unsigned char> buf((3u << 20) + 777);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  // Sizes around XXH3's internal boundaries (16, 128, 240 bytes, its 1 KiB stripes' block).
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{16}, size_t{17}, size_t{128}, size_t{129}, size_t{240},
        size_t{241}, size_t{1024}, size_t{4099}, size_t{(1u << 20) + 7}, buf.size()}) {
    const auto want = ScalarXxh3For128(buf.data(), n);
    const XXH128_hash_t one = XXH3_128bits(buf.data(), n);
    EXPECT_EQ(one.low64, want.first) << n;
    EXPECT_EQ(one.high64, want.second) << n;
    // Fed in uneven pieces, as the store's readers feed it.
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    for (size_t at = 0, step = 1; at < n; at += step, step = step * 3 + 5) {
      XXH3_128bits_update(st, buf.data() + at, std::min(step, n - at));
    }
    const XXH128_hash_t fed = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    EXPECT_EQ(fed.low64, want.first) << n;
    EXPECT_EQ(fed.high64, want.second) << n;
  }
}

TEST(ChunkedXxh3Test, AFilesChecksumIsTheScalarDigestOfItsChunksDigests) {
  // Two chunks and a bit: Hasher fed in pieces that straddle the 64 MiB chunk boundary.
  std::vector<char> data(2 * kChunk + 4097);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < data.size(); i += 8) data[i] = static_cast<char>(rng());
  Hasher h;
  for (size_t at = 0; at < data.size(); at += 5u << 20) {
    h.Update(data.data() + at, std::min<size_t>(5u << 20, data.size() - at));
  }
  const FileDigest got = h.Finish();

  std::vector<XXH128_canonical_t> canon;
  for (size_t at = 0; at < data.size(); at += kChunk) {
    const auto d = ScalarXxh3For128(data.data() + at, std::min<size_t>(kChunk, data.size() - at));
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH128_hash_t{d.first, d.second});
    canon.push_back(c);
  }
  ASSERT_EQ(canon.size(), 3u);
  const auto whole = ScalarXxh3For128(canon.data(), canon.size() * sizeof(XXH128_canonical_t));
  EXPECT_EQ(got.size, data.size());
  // Hex only spells the digest out (canonical bytes, lowercase); it hashes nothing.
  EXPECT_EQ(got.checksum, Hex(XXH128_hash_t{whole.first, whole.second}));
}

}  // namespace
}  // namespace cryo::xxh3chunked
