#include "daemon/store/signature.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"

namespace cryo::store {

// Fewer distinct byte values than this in a key is not random bytes: 32 random ones have about
// 30, and fewer than 20 almost never (well below one chance in a billion).
constexpr size_t kSigningKeyMinDistinct = 20;

absl::StatusOr<std::string> LoadOrCreateSigningKey(const std::string& path) {
  // Links are followed (a Kubernetes Secret's files are links into its data directory); what
  // they lead to is checked below: a regular file of cryod's user that nobody else may read.
  // O_NONBLOCK: a FIFO planted there must not hang cryod's start (it is refused below).
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.ok() && errno == ENOENT) {
    std::string key(kSigningKeyBytes, '\0');
    if (::getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size())) {
      return ErrnoStatus(errno, "generating the manifest signing key");
    }
    // O_EXCL: two cryods starting at once keep one key, never two.
    int w = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (w >= 0) {
      const bool ok =
          ::write(w, key.data(), key.size()) == static_cast<ssize_t>(key.size()) && ::fsync(w) == 0;
      ::close(w);
      if (!ok) {
        ::unlink(path.c_str());
        return ErrnoStatus(errno, absl::StrCat("writing the signing key ", path));
      }
      return key;
    }
    if (errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("creating signing key ", path));
    fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  }
  if (!fd.ok()) return ErrnoStatus(errno, absl::StrCat("opening signing key ", path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("signing key ", path, " is not a file"));
  }
  if ((st.st_mode & 0077) != 0 || st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "signing key ", path, " must belong to cryod's user and be readable by it alone (0600)"));
  }
  CRYO_ASSIGN_OR_RETURN(std::string key, fs::ReadOpenFile(std::move(fd), path, 4096));
  if (key.size() < kSigningKeyBytes) {
    return absl::FailedPreconditionError(absl::StrCat("signing key ", path, " holds ", key.size(),
                                                      " bytes; at least ", kSigningKeyBytes,
                                                      " random bytes are needed"));
  }
  // Any root-owned file of the right size would do otherwise (a config, a log, zeros): a text
  // or a pattern has far fewer distinct bytes than random ones.
  std::set<unsigned char> distinct(key.begin(), key.end());
  if (distinct.size() < kSigningKeyMinDistinct) {
    return absl::FailedPreconditionError(absl::StrCat(
        "signing key ", path, " has only ", distinct.size(),
        " distinct byte values: not random bytes (make it with head -c 32 /dev/urandom)"));
  }
  return key;
}

namespace {

std::string Hmac(const std::string& body, const std::string& key) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &len);
  return absl::StrCat(kSignaturePrefix,
                      absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(mac), len)));
}

bool SameSignature(const std::string& got, const std::string& want) {
  return got.size() == want.size() && CRYPTO_memcmp(got.data(), want.data(), want.size()) == 0;
}

}  // namespace

std::string SignManifest(const Manifest& m, const std::string& key) {
  Manifest unsigned_m = m;
  unsigned_m.signature.clear();
  return Hmac(ManifestToJson(unsigned_m), key);
}

absl::Status VerifyManifestSignature(const Manifest& m, const std::string& key) {
  if (m.signature.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint '", m.id,
                     "' is not signed (field signature): it was not written by a cryod "
                     "that signs its manifests, so nothing bounds what its images would restore"));
  }
  const std::string want = SignManifest(m, key);
  if (!SameSignature(m.signature, want)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint '", m.id,
        "': its signature (field signature) does not match: the manifest "
        "or its images were changed after the checkpoint, or it was signed with another key "
        "(config signing_key_file; nodes that restore each other's checkpoints share one)"));
  }
  return absl::OkStatus();
}

std::string SignJobCheckpoint(const JobCheckpoint& jc, const std::string& key) {
  JobCheckpoint unsigned_jc = jc;
  unsigned_jc.signature.clear();
  return Hmac(JobCheckpointToJson(unsigned_jc), key);
}

absl::Status VerifyJobCheckpointSignature(const JobCheckpoint& jc, const std::string& key) {
  const std::string what =
      absl::StrCat("job checkpoint '", jc.id, "' of ", jc.namespace_, "/", jc.job);
  if (jc.signature.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " is not signed: it was not committed by a cryod that signs"));
  }
  if (!SameSignature(jc.signature, SignJobCheckpoint(jc, key))) {
    return absl::PermissionDeniedError(
        absl::StrCat(what,
                     ": its signature does not match: the record was changed after the commit, or "
                     "signed with another key (config signing_key_file)"));
  }
  return absl::OkStatus();
}

}  // namespace cryo::store
