#pragma once

// A file's size and its store checksum (chunked_xxh3.h): what the store records for every file of
// a checkpoint, what the GPU fast path reports for the files it writes and checks them against
// on refill. One type for all of them; std only, as the library inside jobs uses it too.

#include <cstdint>
#include <string>

namespace cryo {

struct FileDigest {
  uint64_t size = 0;
  std::string checksum;  // hex, "xxh3-128-chunked-64m"
  bool operator==(const FileDigest& o) const { return size == o.size && checksum == o.checksum; }
};

}  // namespace cryo
