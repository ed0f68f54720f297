#pragma once

// Lower-case hex of bytes and back: the fast-path channel's secrets and proofs. Plain C++ (no
// abseil): the library that runs inside jobs uses it too.

#include <cstddef>
#include <string>

namespace cryo::contract {

std::string HexEncode(const unsigned char* bytes, size_t n);
// Exactly 2n hex digits (either case) into `out`; false otherwise, `out` then unspecified.
bool HexDecode(const std::string& hex, unsigned char* out, size_t n);

}  // namespace cryo::contract
