#pragma once

// The store's checksum, "xxh3-128-chunked-64m": XXH3-128 over each 64 MiB chunk of a file, then
// XXH3-128 over the chunks' canonical digests. Header-only and free of abseil so that the GPU
// fast-path library, which runs inside jobs, computes exactly what the store verifies. A user
// that must not depend on libxxhash.so defines XXH_INLINE_ALL before including this.

#include <xxhash.h>

// Linked against libxxhash, XXH3 goes through its runtime dispatch: the plain entry points are
// its SSE2 build (16.5 GB/s a core on the build VM), the dispatched ones pick AVX2 or AVX-512
// where the CPU has them (41 GB/s there), for the same digests. Every file that hashes includes
// this header after <xxhash.h>, so the names below are replaced in all of them.
#if !defined(XXH_INLINE_ALL) && (defined(__x86_64__) || defined(__i386__))
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/base/file_digest.h"  // the {size, checksum} this checksum goes into

namespace cryo::xxh3chunked {

inline constexpr uint64_t kChunk = 64ull << 20;

inline std::string Hex(const XXH128_hash_t& h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  std::string out;
  out.reserve(2 * sizeof(c.digest));
  for (unsigned char b : c.digest) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

// The file's checksum from its chunks' digests, in order. An empty file has one chunk.
inline std::string Combine(const std::vector<XXH128_hash_t>& chunks) {
  std::vector<XXH128_canonical_t> canon(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) XXH128_canonicalFromHash(&canon[i], chunks[i]);
  return Hex(XXH3_128bits(canon.data(), canon.size() * sizeof(XXH128_canonical_t)));
}

// The checksum of one file, fed in file order.
class Hasher {
 public:
  Hasher() : st_(XXH3_createState()) { XXH3_128bits_reset(st_); }
  ~Hasher() { XXH3_freeState(st_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void Update(const char* p, size_t n) {
    while (n > 0) {
      size_t take = std::min<uint64_t>(n, kChunk - in_chunk_);
      XXH3_128bits_update(st_, p, take);
      in_chunk_ += take;
      total_ += take;
      p += take;
      n -= take;
      if (in_chunk_ == kChunk) {
        digests_.push_back(XXH3_128bits_digest(st_));
        XXH3_128bits_reset(st_);
        in_chunk_ = 0;
      }
    }
  }
  FileDigest Finish() {
    if (in_chunk_ > 0 || digests_.empty()) digests_.push_back(XXH3_128bits_digest(st_));
    return FileDigest{total_, Combine(digests_)};
  }

 private:
  XXH3_state_t* st_;
  uint64_t in_chunk_ = 0;
  uint64_t total_ = 0;
  std::vector<XXH128_hash_t> digests_;
};

}  // namespace cryo::xxh3chunked
