// Signed manifests: a change to any field, file checksum or the recorded credentials breaks the
// signature; another key does not verify; the key file is created once, private, and reused.

#include "daemon/store/signature.h"

#include <sys/stat.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/daemon/test_util.h"

namespace cryo::store {
namespace {

using ::testing::HasSubstr;

Manifest SampleToSign() {
  Manifest m;
  m.id = "train-1";
  m.root_pid = 42;
  m.pids = {42};
  m.files = {{"images/core-42.img", 1000, "xxh3-128:aa"}, {"images/pages-1.img", 9, "xxh3-128:bb"}};
  criu::CredentialCeiling c;
  c.uids = {1000};
  c.gids = {1000};
  c.no_new_privs = true;
  m.credentials = c;
  return m;
}

TEST(SignatureTest, AnyChangeBreaksIt) {
  const std::string key(32, 'k');
  Manifest m = SampleToSign();
  m.signature = SignManifest(m, key);
  EXPECT_TRUE(VerifyManifestSignature(m, key).ok());
  // What the parser reads back verifies too (the signature is over the manifest as written).
  auto parsed = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(VerifyManifestSignature(*parsed, key).ok());

  Manifest t = m;
  t.files[1].checksum = "xxh3-128:cc";
  EXPECT_EQ(VerifyManifestSignature(t, key).code(), absl::StatusCode::kPermissionDenied);
  t = m;
  t.credentials->uids.insert(0);
  EXPECT_EQ(VerifyManifestSignature(t, key).code(), absl::StatusCode::kPermissionDenied);
  t = m;
  t.credentials.reset();
  EXPECT_EQ(VerifyManifestSignature(t, key).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(VerifyManifestSignature(m, std::string(32, 'o')).code(),
            absl::StatusCode::kPermissionDenied);
  t = m;
  t.signature.clear();
  absl::Status st = VerifyManifestSignature(t, key);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(std::string(st.message()).find("not signed"), std::string::npos);
}

TEST(SignatureTest, KeyFileIsCreatedPrivateAndReused) {
  TempDir d;
  const std::string path = d.path + "/signing.key";
  auto k1 = LoadOrCreateSigningKey(path);
  ASSERT_TRUE(k1.ok()) << k1.status();
  EXPECT_EQ(k1->size(), kSigningKeyBytes);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto k2 = LoadOrCreateSigningKey(path);
  ASSERT_TRUE(k2.ok());
  EXPECT_EQ(*k1, *k2);
  // As a Kubernetes Secret mounts it: a link to the file (defaultMode 0400).
  const std::string link = d.path + "/secret-key";
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  auto k3 = LoadOrCreateSigningKey(link);
  ASSERT_TRUE(k3.ok()) << k3.status();
  EXPECT_EQ(*k1, *k3);
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(LoadOrCreateSigningKey(path).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(fs::WriteFileAtomic(path, "short", 0600).ok());
  EXPECT_EQ(LoadOrCreateSigningKey(path).status().code(), absl::StatusCode::kFailedPrecondition);
}

// What is no key, although it is root's, 0600 and long enough: a pattern, a text. And a FIFO
// planted at the path is refused at once instead of hanging cryod's start.
TEST(SignatureTest, AKeyFileThatIsNotRandomBytesOrNotAFileIsRefused) {
  TempDir d;
  const std::string path = d.path + "/signing.key";
  for (const std::string& weak :
       {std::string(32, 'k'), std::string("0123456789012345678901234567890123456789"),
        std::string("password=hunter2 password=hunter2\n")}) {
    ASSERT_TRUE(fs::WriteFileAtomic(path, weak, 0600).ok());
    auto k = LoadOrCreateSigningKey(path);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kFailedPrecondition) << weak;
    EXPECT_THAT(std::string(k.status().message()), HasSubstr("distinct byte values")) << weak;
  }
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto k = LoadOrCreateSigningKey(path);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kFailedPrecondition) << k.status();
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("not a file"));
}

}  // namespace
}  // namespace cryo::store
