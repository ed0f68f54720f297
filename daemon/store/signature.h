#pragma once

// Manifests signed with a key the nodes hold and store writers do not: HMAC-SHA256 over the
// whole manifest (every field, every file's size and checksum, the job's recorded credentials),
// so that whoever can write the store cannot change what a process-mode restore runs, nor raise
// the credentials it runs with. Checksums alone detect damage, not tampering.

#include <string>

#include "absl/status/statusor.h"
#include "daemon/store/job_checkpoint.h"
#include "daemon/store/manifest.h"

namespace cryo::store {

inline constexpr size_t kSigningKeyBytes = 32;
inline constexpr char kSignaturePrefix[] = "hmac-sha256:";

// The key at `path`: created (32 random bytes, 0600, never replaced) when absent. A key file
// that is not a regular file of root's, is readable by others, or is shorter than 32 bytes is
// refused (FAILED_PRECONDITION).
absl::StatusOr<std::string> LoadOrCreateSigningKey(const std::string& path);

// "hmac-sha256:<hex>" over the manifest with its signature left out.
std::string SignManifest(const Manifest& m, const std::string& key);

// OK when m.signature is SignManifest(m, key); PERMISSION_DENIED otherwise (unsigned, another
// key, or changed since), saying which.
absl::Status VerifyManifestSignature(const Manifest& m, const std::string& key);

// The same for a job checkpoint's record: whoever can write the store cannot make a set of
// parts into a job checkpoint, nor swap one part for another of the same job.
std::string SignJobCheckpoint(const JobCheckpoint& jc, const std::string& key);
absl::Status VerifyJobCheckpointSignature(const JobCheckpoint& jc, const std::string& key);

}  // namespace cryo::store
