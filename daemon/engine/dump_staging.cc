#include "daemon/engine/dump_staging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/criu/pages_pool.h"
#include "daemon/store/checksum.h"
#include "lib/base/fd.h"
#include "lib/base/fs.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"

namespace cryo::engine {
namespace {

constexpr size_t kPiece = 8u << 20;
// Files copied at once: the pages of several processes go side by side; more would only
// contend for the store.
constexpr int kCopiers = 4;

absl::Status CopyOne(const std::string& from, const std::string& to, const FileDigest& want,
                     std::atomic<uint64_t>& copied, const std::function<void(uint64_t)>& progress,
                     const std::function<bool()>& stop) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return ErrnoStatus(errno, absl::StrCat("opening ", from));
  CRYO_RETURN_IF_ERROR(fs::MakeDirs(to.substr(0, to.rfind('/')), 0700));
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (out.get() < 0) return ErrnoStatus(errno, absl::StrCat("creating ", to));
  ChunkedHasher hasher;
  std::vector<char> buf(kPiece);
  for (;;) {
    if (stop && stop()) return absl::CancelledError(absl::StrCat("copying ", from, " stopped"));
    ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("reading ", from));
    if (n == 0) break;
    hasher.Update(buf.data(), static_cast<size_t>(n));
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(out.get(), buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoStatus(errno, absl::StrCat("writing ", to));
      off += w;
    }
    const uint64_t total = copied += static_cast<uint64_t>(n);
    if (progress) progress(total);
  }
  FileDigest got = hasher.Finish();
  if (!(got == want)) {
    return absl::DataLossError(absl::StrCat(
        from, " no longer holds what CRIU wrote (", got.size, " bytes, checksum ", got.checksum,
        "; the dump had ", want.size, " bytes, ", want.checksum, "): not published"));
  }
  if (::close(out.release()) != 0) return ErrnoStatus(errno, absl::StrCat("closing ", to));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DumpStaging> DumpStaging::Make(int fs, const std::string& name,
                                              criu::PagesPool* pool) {
  if (fs < 0) return absl::FailedPreconditionError("no tmpfs for dumps into memory");
  if (::mkdirat(fs, name.c_str(), 0700) != 0) {
    return ErrnoStatus(errno, absl::StrCat("making ", name, " in cryod's tmpfs for dumps"));
  }
  DumpStaging d;
  d.dir_ = absl::StrCat("/proc/", ::getpid(), "/fd/", fs, "/", name);
  d.pool_ = pool;
  return d;
}

void DumpStaging::Release() {
  if (!active()) return;
  if (pool_ != nullptr) {
    for (const std::string& n : fs::ListNames(dir_)) {
      if (absl::StartsWith(n, "pages-") && absl::EndsWith(n, ".img"))
        pool_->Keep(fs::Join(dir_, n));
    }
  }
  (void)fs::RemoveTree(dir_);  // best effort: the tmpfs goes with cryod anyway
  dir_.clear();
}

DumpStaging& DumpStaging::operator=(DumpStaging&& o) noexcept {
  if (this != &o) {
    Release();
    dir_ = std::move(o.dir_);
    pool_ = o.pool_;
    o.dir_.clear();
  }
  return *this;
}

DumpStaging::~DumpStaging() { Release(); }

absl::Status DumpStaging::CopyTo(const std::string& to,
                                 const std::map<std::string, FileDigest>& digests,
                                 const std::function<void(uint64_t)>& progress,
                                 const std::function<bool()>& stop) const {
  std::vector<const std::pair<const std::string, FileDigest>*> files;
  for (const auto& e : digests) files.push_back(&e);
  std::atomic<uint64_t> copied{0};
  std::atomic<bool> failed{false};
  return EachIndex(files.size(), kCopiers, [&](size_t i) -> absl::Status {
    const auto& [rel, want] = *files[i];
    absl::Status st = CopyOne(fs::Join(dir_, rel), fs::Join(to, rel), want, copied, progress,
                              [&] { return failed.load() || (stop && stop()); });
    // The first failure is the one to report; the others stopped because of it.
    if (!st.ok()) return failed.exchange(true) ? absl::OkStatus() : st;
    return absl::OkStatus();
  });
}

}  // namespace cryo::engine
