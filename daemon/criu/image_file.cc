#include "daemon/criu/image_file.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "lib/base/fd.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"

namespace cryo::criu {
namespace {

uint32_t Le32(absl::string_view b, size_t off) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data()) + off;
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void PutLe32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadImageEntries(const std::string& dir,
                                                          const std::string& name, uint32_t magic,
                                                          bool common, uint64_t max_bytes) {
  absl::StatusOr<std::string> read = fs::ReadRegularBeneath(dir, name, max_bytes);
  if (!read.ok()) return read.status();
  const absl::string_view b = *read;
  size_t off = 0;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("CRIU image ", name, ": ", why));
  };
  if (common) {
    if (b.size() < 4 || Le32(b, 0) != kImgCommonMagic) return bad("not a CRIU image");
    off = 4;
  }
  if (b.size() < off + 4 || Le32(b, off) != magic) return bad("wrong magic");
  off += 4;
  std::vector<std::string> out;
  while (off < b.size()) {
    if (b.size() - off < 4) return bad("truncated entry size");
    const uint32_t n = Le32(b, off);
    off += 4;
    if (n > b.size() - off) return bad("entry runs past the end of the file");
    out.emplace_back(b.substr(off, n));
    off += n;
  }
  return out;
}

absl::StatusOr<std::string> ReadFirstImageEntry(const std::string& dir, const std::string& name,
                                                uint32_t magic, bool common, uint32_t max_entry) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd fd, fs::OpenRegularBeneath(dir, name));
  const size_t head = common ? 12 : 8;
  std::string b(head + max_entry, '\0');
  const ssize_t n = ::pread(fd.get(), b.data(), b.size(), 0);
  if (n < 0) return ErrnoStatus(errno, absl::StrCat("reading CRIU image ", name));
  b.resize(static_cast<size_t>(n));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("CRIU image ", name, ": ", why));
  };
  if (b.size() < head) return bad("truncated");
  size_t off = 0;
  if (common) {
    if (Le32(b, 0) != kImgCommonMagic) return bad("not a CRIU image");
    off = 4;
  }
  if (Le32(b, off) != magic) return bad("wrong magic");
  const uint32_t len = Le32(b, off + 4);
  if (len > max_entry || len > b.size() - head) return bad("its first entry is too large or cut");
  return b.substr(head, len);
}

absl::StatusOr<std::vector<fs::Entry>> ListImages(const std::string& dir) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd dfd, fs::OpenDirBeneath(dir, ""));
  return fs::ListDirAt(dfd.get(), dir);
}

absl::StatusOr<::criu::core_entry> ReadCoreImage(const std::string& dir, const std::string& name) {
  constexpr uint64_t kMaxCoreBytes = 1 << 20;
  CRYO_ASSIGN_OR_RETURN(auto entries, ReadImageEntries(dir, name, kCoreMagic, true, kMaxCoreBytes));
  ::criu::core_entry core;
  if (entries.size() != 1 || !core.ParseFromString(entries[0])) {
    return absl::InvalidArgumentError(absl::StrCat("CRIU image ", name, " does not parse"));
  }
  return core;
}

std::string FrameImage(std::initializer_list<uint32_t> magics,
                       const std::vector<const google::protobuf::MessageLite*>& entries) {
  std::string out;
  for (uint32_t m : magics) PutLe32(&out, m);
  for (const auto* e : entries) {
    const std::string body = e->SerializeAsString();
    PutLe32(&out, static_cast<uint32_t>(body.size()));
    out += body;
  }
  return out;
}

}  // namespace cryo::criu
