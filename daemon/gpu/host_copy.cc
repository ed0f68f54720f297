#include "daemon/gpu/host_copy.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/io_all.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"

namespace cryo::gpu {
namespace {

// A read or write mapping of a memfd, unmapped on scope exit.
class Mapping {
 public:
  Mapping(int fd, uint64_t bytes, int prot) : len_(bytes) {
    if (bytes == 0) return;
    void* m = ::mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) p_ = static_cast<char*>(m);
  }
  ~Mapping() {
    if (p_ != nullptr) ::munmap(p_, len_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* get() const { return p_; }

 private:
  char* p_ = nullptr;
  uint64_t len_;
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

}  // namespace

namespace {

// A cgroup v2 file's one number; nullopt for "max", a missing file or junk.
std::optional<uint64_t> CgroupNumber(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return std::nullopt;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

}  // namespace

uint64_t AvailableUnderCgroups(uint64_t avail, const std::string& proc_cgroup,
                               const std::string& sys_fs_cgroup) {
  // The host copies count against cryod's own cgroup (a DaemonSet's memory limit): what is left
  // below the tightest limit of it and its ancestors. Past it the kernel would kill cryod.
  // cgroup v2 ("0::path"), or v1's memory controller ("N:memory:path").
  std::ifstream cg(proc_cgroup);
  std::string line;
  while (std::getline(cg, line)) {
    std::string root, max_file, cur_file;
    size_t at = 0;
    if (line.rfind("0::", 0) == 0) {
      root = sys_fs_cgroup, max_file = "/memory.max", cur_file = "/memory.current", at = 3;
    } else if (size_t m = line.find(":memory:"); m != std::string::npos) {
      root = sys_fs_cgroup + "/memory", max_file = "/memory.limit_in_bytes";
      cur_file = "/memory.usage_in_bytes", at = m + 8;
    } else {
      continue;
    }
    std::string path = line.substr(at);
    while (!path.empty()) {
      const std::string dir = root + (path == "/" ? std::string() : path);
      auto max = CgroupNumber(dir + max_file);
      auto cur = CgroupNumber(dir + cur_file);
      if (max && cur) avail = std::min(avail, *max > *cur ? *max - *cur : 0);
      if (path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return avail;
}

namespace {

// One line of /proc/meminfo, in bytes; 0 when absent.
uint64_t Meminfo(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k, unit;
  uint64_t kib = 0;
  while (in >> k >> kib) {
    std::getline(in, unit);
    if (k == key) return kib << 10;
  }
  return 0;
}

}  // namespace

uint64_t AvailableHostMemory() {
  return AvailableUnderCgroups(Meminfo("MemAvailable:"), "/proc/self/cgroup", "/sys/fs/cgroup");
}

uint64_t TotalHostMemory() { return Meminfo("MemTotal:"); }

absl::StatusOr<UniqueFd> MountPrivateTmpfs(const std::string& where, const std::string& source,
                                           TmpfsHuge huge) {
  if (::mkdir(where.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("making ", where));
  }
  // Huge pages for the GPU data whatever the node's shmem_enabled says: with 4 KiB pages the
  // copies into and out of it ran at a third of the speed (H100, 2026-11-27). CRIU's images only
  // where the file is sized first (cryod's pages images, criu/anon_pages.h): dozens of small
  // files per process, appended to, would each take a huge page.
  const char* options = huge == TmpfsHuge::kAlways ? "huge=always,mode=0700,size=100%"
                                                   : "huge=within_size,mode=0700,size=100%";
  if (::mount(source.c_str(), where.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) !=
      0) {
    return ErrnoStatus(errno, absl::StrCat("mounting a tmpfs (", options, ") on ", where));
  }
  // Held by this descriptor alone: detached at once, it leaves no mount behind, and goes with
  // cryod however cryod ends.
  UniqueFd fd(::open(where.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  const int err = errno;
  ::umount2(where.c_str(), MNT_DETACH);
  if (fd.get() < 0) return ErrnoStatus(err, absl::StrCat("opening ", where));
  return fd;
}

bool HostMemoryHolds(uint64_t bytes) {
  return AvailableHostMemory() >= bytes + bytes / 8 + (1ull << 30);
}

absl::Status EachPieceMapped(int fd, uint64_t bytes, int threads,
                             const std::function<absl::Status(char*, uint64_t)>& each) {
  if (bytes == 0) return absl::OkStatus();
  Mapping m(fd, bytes, PROT_READ | PROT_WRITE);
  if (m.get() == nullptr) return ErrnoStatus(errno, "mapping cryod's host memory");
  constexpr uint64_t kPiece = 256ull << 20;
  const uint64_t pieces = (bytes + kPiece - 1) / kPiece;
  return EachIndex(pieces, threads, [&](size_t i) {
    const uint64_t off = i * kPiece;
    return each(m.get() + off, std::min(kPiece, bytes - off));
  });
}

absl::StatusOr<UniqueFd> NewHostCopy(uint64_t bytes, int threads, int fs) {
  UniqueFd fd(fs < 0 ? ::memfd_create("cryo-gpu-host-copy", MFD_CLOEXEC)
                     : ::openat(fs, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return ErrnoStatus(errno, fs < 0 ? "memfd_create" : "a file in cryod's huge-page tmpfs");
  }
  if (bytes == 0) return fd;
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return ErrnoStatus(errno, "sizing cryod's host memory for the GPU data");
  }
  // Allocated by several threads at once: one thread fills fresh pages at a few GB/s.
  CRYO_RETURN_IF_ERROR(EachPieceMapped(fd.get(), bytes, threads, [bytes](char* p, uint64_t n) {
    ::madvise(p, n, MADV_HUGEPAGE);
    if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return absl::OkStatus();
    if (errno != EINVAL) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cryod's host memory for ", bytes, " bytes of GPU data: ", std::strerror(errno)));
    }
    // A kernel without MADV_POPULATE_WRITE: touch each page.
    for (uint64_t o = 0; o < n; o += 4096) p[o] = 0;
    return absl::OkStatus();
  }));
  return fd;
}

namespace {

absl::Status CheckLayout(int memfd, uint64_t bytes, uint64_t stripe, size_t files) {
  if (files == 0 || stripe == 0 || stripe % xxh3chunked::kChunk != 0) {
    return absl::InvalidArgumentError(
        "the GPU data's files: none, or a stripe off the checksum's chunks");
  }
  struct stat st;
  if (::fstat(memfd, &st) != 0) return ErrnoStatus(errno, "fstat of cryod's host memory");
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    return absl::DataLossError(
        absl::StrCat("cryod's host memory holds ", st.st_size, " bytes; the GPU data has ", bytes));
  }
  return absl::OkStatus();
}

// Calls `each(chunk, offset in the stream, offset in file k, length)` for every checksum chunk
// of file k, in file order; stops at the first error.
template <typename F>
absl::Status EachChunkOfFile(uint64_t bytes, uint64_t stripe, size_t w, size_t k, F each) {
  const uint64_t units = (bytes + stripe - 1) / stripe;
  for (uint64_t c = k; c < units; c += w) {
    const uint64_t at = c * stripe;
    const uint64_t len = std::min(stripe, bytes - at);
    for (uint64_t o = 0; o < len; o += xxh3chunked::kChunk) {
      const uint64_t file_off = (c / w) * stripe + o;
      CRYO_RETURN_IF_ERROR(each(static_cast<uint32_t>(file_off / xxh3chunked::kChunk), at + o,
                                file_off, std::min(xxh3chunked::kChunk, len - o)));
    }
  }
  return absl::OkStatus();
}

uint64_t ChunkLength(uint64_t size, uint32_t j) {
  const uint64_t off = uint64_t{j} * xxh3chunked::kChunk;
  return off < size ? std::min(xxh3chunked::kChunk, size - off) : 0;
}

// What a writer or reader hashes at a time: small enough to stay in a core's cache.
constexpr uint64_t kHashPiece = 1ull << 20;

}  // namespace

bool WriteCopiesThroughTheCpu(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_DIRECT) == 0) return true;
  struct statfs fs;
  return ::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
}

absl::StatusOr<std::vector<WrittenFile>> WriteHostCopy(
    int memfd, uint64_t bytes, uint64_t stripe, const std::vector<int>& files,
    const std::vector<ChunkDigests>& previous, const std::function<bool()>& stop,
    const std::function<absl::Status(uint64_t end)>& ready) {
  CRYO_RETURN_IF_ERROR(CheckLayout(memfd, bytes, stripe, files.size()));
  Mapping m(memfd, bytes, PROT_READ);
  if (bytes > 0 && m.get() == nullptr) return ErrnoStatus(errno, "mapping cryod's host memory");
  const size_t w = files.size();
  std::vector<WrittenFile> out(w);
  std::vector<absl::Status> st_each = EachInParallel(w, [&](size_t k) -> absl::Status {
    const ChunkDigests* prev = k < previous.size() ? &previous[k] : nullptr;
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                   &XXH3_freeState);
    std::vector<XXH128_hash_t> hashes;
    uint64_t size = 0;
    const uint64_t piece = WriteCopiesThroughTheCpu(files[k]) ? kHashPiece : xxh3chunked::kChunk;
    auto write = [&](uint64_t at, uint64_t file_off, uint64_t n) -> absl::Status {
      std::string err;
      errno = 0;
      if (!io::WriteAll(files[k], {iovec{m.get() + at, n}}, static_cast<off_t>(file_off), &err)) {
        // A write that makes no progress is a full store too.
        const int e = errno != 0 ? errno : ENOSPC;
        return absl::Status(ErrnoToCode(e),
                            absl::StrCat("writing the GPU data's file ", k, ": ", err));
      }
      return absl::OkStatus();
    };
    CRYO_RETURN_IF_ERROR(EachChunkOfFile(
        bytes, stripe, w, k,
        [&](uint32_t j, uint64_t at, uint64_t file_off, uint64_t len) -> absl::Status {
          if (stop && stop()) return absl::CancelledError("the GPU data's write was stopped");
          if (ready) CRYO_RETURN_IF_ERROR(ready(at + len));
          size = file_off + len;
          const bool may_skip =
              prev != nullptr && j < prev->chunks.size() && ChunkLength(prev->size, j) == len;
          if (may_skip) {
            // Whether to write it at all hangs on the whole chunk's digest.
            hashes.push_back(XXH3_128bits(m.get() + at, len));
            const std::string hex = xxh3chunked::Hex(hashes.back());
            out[k].chunks.chunks.push_back(hex);
            if (prev->chunks[j] == hex) {
              out[k].skipped.push_back(j);
              return absl::OkStatus();
            }
            return write(at, file_off, len);
          }
          // Hashed piece by piece and each piece written while it is in the cache: hashing the
          // whole chunk first read it from memory twice (a tmpfs store goes at the memory's
          // pace).
          XXH3_128bits_reset(state.get());
          for (uint64_t o = 0; o < len; o += piece) {
            const uint64_t n = std::min(piece, len - o);
            XXH3_128bits_update(state.get(), m.get() + at + o, n);
            CRYO_RETURN_IF_ERROR(write(at + o, file_off + o, n));
          }
          hashes.push_back(XXH3_128bits_digest(state.get()));
          out[k].chunks.chunks.push_back(xxh3chunked::Hex(hashes.back()));
          return absl::OkStatus();
        }));
    // Chunks not written at the end leave the file short of its size otherwise.
    if (::ftruncate(files[k], static_cast<off_t>(size)) != 0) {
      return ErrnoStatus(errno, absl::StrCat("sizing the GPU data's file ", k));
    }
    if (hashes.empty()) {
      hashes.push_back(XXH3_128bits(nullptr, 0));
      out[k].chunks.chunks.push_back(xxh3chunked::Hex(hashes.back()));
    }
    out[k].chunks.size = size;
    out[k].digest = FileDigest{size, xxh3chunked::Combine(hashes)};
    return absl::OkStatus();
  });
  CRYO_RETURN_IF_ERROR(FirstError(st_each));
  return out;
}

uint64_t StreamBytesRead(const std::function<uint64_t(size_t k)>& next, size_t w, uint64_t stripe,
                         uint64_t bytes) {
  // The next byte file j lacks, at its offset f, is at stream offset
  // (j + (f / stripe) * w) * stripe + f % stripe.
  uint64_t ready = bytes;
  for (size_t j = 0; j < w && stripe > 0; ++j) {
    const uint64_t f = next(j);
    ready = std::min(ready, (j + (f / stripe) * w) * stripe + f % stripe);
  }
  return ready;
}

absl::Status ReadHostCopy(int memfd, uint64_t bytes, uint64_t stripe,
                          const std::vector<ChunkSources>& files,
                          const std::function<void(size_t k, uint64_t read)>& progress) {
  CRYO_RETURN_IF_ERROR(CheckLayout(memfd, bytes, stripe, files.size()));
  Mapping m(memfd, bytes, PROT_READ | PROT_WRITE);
  if (bytes > 0 && m.get() == nullptr) return ErrnoStatus(errno, "mapping cryod's host memory");
  const size_t w = files.size();
  std::vector<absl::Status> st_each = EachInParallel(w, [&](size_t k) -> absl::Status {
    const ChunkSources& src = files[k];
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                   &XXH3_freeState);
    std::vector<XXH128_hash_t> hashes;
    uint64_t size = 0;
    CRYO_RETURN_IF_ERROR(EachChunkOfFile(
        bytes, stripe, w, k,
        [&](uint32_t j, uint64_t at, uint64_t file_off, uint64_t len) -> absl::Status {
          const bool whole = src.chunks.empty();  // one file, checked whole
          if (whole ? src.fds.empty() : (j >= src.fds.size() || j >= src.chunks.size())) {
            return absl::DataLossError(
                absl::StrCat("the GPU data's file ", k, " has no chunk ", j, " recorded"));
          }
          // Hashed piece by piece as it is read, while the piece is in the cache: hashing the
          // whole chunk after reading it read it from memory again (15 GB/s where the tmpfs
          // reads 20, one H200 host, 2026-11-30).
          std::string err;
          XXH3_128bits_reset(state.get());
          for (uint64_t o = 0; o < len; o += kHashPiece) {
            const uint64_t n = std::min(kHashPiece, len - o);
            if (!io::ReadAll(src.fds[whole ? 0 : j], m.get() + at + o, n,
                             static_cast<off_t>(file_off + o), &err)) {
              return absl::DataLossError(
                  absl::StrCat("reading chunk ", j, " of the GPU data's file ", k, ": ", err));
            }
            XXH3_128bits_update(state.get(), m.get() + at + o, n);
            if (progress) progress(k, file_off + o + n);
          }
          hashes.push_back(XXH3_128bits_digest(state.get()));
          if (!whole && xxh3chunked::Hex(hashes.back()) != src.chunks[j]) {
            return absl::DataLossError(absl::StrCat("chunk ", j, " of the GPU data's file ", k,
                                                    " does not hold what the checkpoint recorded"));
          }
          size = file_off + len;
          return absl::OkStatus();
        }));
    if (hashes.empty()) hashes.push_back(XXH3_128bits(nullptr, 0));
    const FileDigest got{size, xxh3chunked::Combine(hashes)};
    if (!(got == src.expected)) {
      return absl::DataLossError(absl::StrCat(
          "the GPU data's file ", k, " does not hold what the checkpoint recorded: it reads as ",
          got.size, " bytes, checksum ", got.checksum, "; recorded ", src.expected.size, ", ",
          src.expected.checksum));
    }
    return absl::OkStatus();
  });
  return FirstError(st_each);
}

}  // namespace cryo::gpu
