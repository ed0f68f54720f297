#pragma once

// CRIU's image file framing (criu/include/magic.h, images/*.proto): a common magic (all but the
// inventory), the image's own magic, then (u32 little-endian size, protobuf message) pairs.
// Readers of single images (credentials.h, listen_ports.h) share it.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "criu/images.pb.h"
#include "lib/base/fs.h"

namespace google::protobuf {
class MessageLite;
}

namespace cryo::criu {

inline constexpr uint32_t kImgCommonMagic = 0x54564319;
inline constexpr uint32_t kInventoryMagic = 0x58313116;
inline constexpr uint32_t kCoreMagic = 0x55053847;
inline constexpr uint32_t kSeccompMagic = 0x64413049;
inline constexpr uint32_t kFilesMagic = 0x56303138;
inline constexpr uint32_t kPstreeMagic = 0x50273030;
inline constexpr uint32_t kGhostFileMagic = 0x52583605;

// files.img: the fd_types value of an inet socket's entry, and the most of it any reader takes.
inline constexpr uint32_t kInetSk = 4;
inline constexpr uint64_t kMaxFilesImage = 64 << 20;

// The messages of image `name` in `dir` (opened beneath it, never following a link out), at
// most `max_bytes` in all. `common`: whether the image starts with the common magic.
// INVALID_ARGUMENT, naming the image, for one that is not CRIU's or is cut short.
absl::StatusOr<std::vector<std::string>> ReadImageEntries(const std::string& dir,
                                                          const std::string& name, uint32_t magic,
                                                          bool common, uint64_t max_bytes);

// The first message of image `name` only (an image whose entry is followed by raw data, as a
// ghost file's is), at most `max_entry` bytes; the same errors.
absl::StatusOr<std::string> ReadFirstImageEntry(const std::string& dir, const std::string& name,
                                                uint32_t magic, bool common, uint32_t max_entry);

// The entries of the images directory `dir`, opened without following a link.
absl::StatusOr<std::vector<fs::Entry>> ListImages(const std::string& dir);

// Core image `name` (core-<tid>.img) of `dir`: its one entry, at most 1 MiB (registers, FPU
// state). INVALID_ARGUMENT, naming it, when it does not parse.
absl::StatusOr<::criu::core_entry> ReadCoreImage(const std::string& dir, const std::string& name);

// One framed image: the magics, then each message with its size (tests, and the fake CRIU).
std::string FrameImage(std::initializer_list<uint32_t> magics,
                       const std::vector<const google::protobuf::MessageLite*>& entries);

}  // namespace cryo::criu
