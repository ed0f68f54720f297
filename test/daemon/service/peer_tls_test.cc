#include "daemon/service/peer_tls.h"

#include <sys/stat.h>

#include <string>

#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/temp_dir.h"

namespace cryo::service {
namespace {

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

void WriteAll(const TempDir& d) {
  for (const char* f : {"ca.crt", "tls.crt", "tls.key"}) {
    ASSERT_TRUE(fs::WriteFileAtomic(d / f, kPem).ok());
  }
}

TEST(PeerTlsTest, ReadsTheSecretsThreeFiles) {
  TempDir d;
  WriteAll(d);
  auto tls = ReadPeerTls(d.path);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->ca, kPem);
  EXPECT_EQ(tls->key, kPem);
}

TEST(PeerTlsTest, AMissingEmptyOrPlantedFileIsRefusedNamingIt) {
  TempDir d;
  WriteAll(d);
  ASSERT_EQ(::unlink((d / "tls.key").c_str()), 0);
  auto tls = ReadPeerTls(d.path);
  EXPECT_EQ(tls.status().code(), absl::StatusCode::kNotFound) << tls.status();
  EXPECT_NE(tls.status().message().find("tls.key"), std::string::npos) << tls.status();

  ASSERT_TRUE(fs::WriteFileAtomic(d / "tls.key", "not a key").ok());
  tls = ReadPeerTls(d.path);
  EXPECT_EQ(tls.status().code(), absl::StatusCode::kInvalidArgument) << tls.status();
  EXPECT_NE(tls.status().message().find("holds no PEM"), std::string::npos) << tls.status();

  // A FIFO must not hang cryod's start.
  ASSERT_EQ(::unlink((d / "tls.key").c_str()), 0);
  ASSERT_EQ(::mkfifo((d / "tls.key").c_str(), 0600), 0);
  tls = ReadPeerTls(d.path);
  EXPECT_EQ(tls.status().code(), absl::StatusCode::kFailedPrecondition) << tls.status();

  // Nor may a huge file fill its memory.
  ASSERT_EQ(::unlink((d / "tls.key").c_str()), 0);
  ASSERT_TRUE(
      fs::WriteFileAtomic(d / "tls.key", std::string(kPem) + std::string(1 << 20, 'A')).ok());
  EXPECT_FALSE(ReadPeerTls(d.path).ok());
}

}  // namespace
}  // namespace cryo::service
