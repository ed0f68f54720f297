#include "daemon/store/checksum.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo {
namespace {

std::string RandomData(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(Checksum, StreamingEqualsFileHashAcrossChunksAndThreads) {
  TempDir d;
  // Two full 64 MiB chunks and a partial one.
  std::string data = RandomData(2 * kChecksumChunk + 12345, 1);
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/f", data).ok());
  ChunkedHasher h;
  // Feed in odd-sized pieces so chunk boundaries fall mid-update.
  for (size_t off = 0; off < data.size(); off += 1000003) {
    h.Update(data.data() + off, std::min<size_t>(1000003, data.size() - off));
  }
  FileDigest streamed = h.Finish();
  auto one = HashFile(d.path + "/f", 1);
  auto four = HashFile(d.path + "/f", 4);
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_EQ(streamed.size, data.size());
  EXPECT_EQ(streamed.checksum, one->checksum);
  EXPECT_EQ(one->checksum, four->checksum);
  EXPECT_EQ(streamed.checksum.size(), 32u);
}

TEST(Checksum, OneBitChangesTheDigest) {
  TempDir d;
  std::string data = RandomData(1 << 20, 2);
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/a", data).ok());
  data[777] ^= 1;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/b", data).ok());
  EXPECT_NE(HashFile(d.path + "/a")->checksum, HashFile(d.path + "/b")->checksum);
}

TEST(Checksum, EmptyFileHasADigest) {
  TempDir d;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/e", "").ok());
  auto e = HashFile(d.path + "/e");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size, 0u);
  EXPECT_EQ(e->checksum, ChunkedHasher().Finish().checksum);
}

TEST(Checksum, VerifyNamesTruncatedAndCorruptFiles) {
  TempDir d;
  std::string data = RandomData(4096, 3);
  ASSERT_TRUE(fs::MakeDirs(d.path + "/images").ok());
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/images/pages-1.img", data).ok());
  auto dg = HashFile(d.path + "/images/pages-1.img");
  std::vector<ExpectedFile> files = {{"images/pages-1.img", dg->size, dg->checksum}};
  EXPECT_TRUE(VerifyFiles(d.path, files, 2).ok());

  data[10] ^= 0x80;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/images/pages-1.img", data).ok());
  absl::Status s = VerifyFiles(d.path, files, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("images/pages-1.img: checksum mismatch"), std::string::npos) << s;

  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/images/pages-1.img", data.substr(0, 100)).ok());
  s = VerifyFiles(d.path, files, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;

  ::unlink((d.path + "/images/pages-1.img").c_str());
  s = VerifyFiles(d.path, files, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;
}

// Found on 2026-11-24: an image replaced by a link to /etc/shadow had its size (and, when the
// size matched, its digest) reported; a FIFO in its place hung the restore.
TEST(Checksum, VerifyRefusesLinksAndFifosWithoutReadingThem) {
  TempDir d;
  ASSERT_TRUE(fs::MakeDirs(d.path + "/images").ok());
  TempDir outside;
  const std::string secret(17, 's');
  ASSERT_TRUE(fs::WriteFileAtomic(outside.path + "/secret", secret).ok());
  auto sd = HashFile(outside.path + "/secret");
  ASSERT_TRUE(sd.ok());
  ASSERT_EQ(::symlink((outside.path + "/secret").c_str(), (d.path + "/images/pages-1.img").c_str()),
            0);
  // The manifest claims exactly the secret's size: the old code then reported its digest.
  absl::Status s = VerifyFiles(d.path, {{"images/pages-1.img", 17, "0"}}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s;
  EXPECT_EQ(s.message().find(sd->checksum), std::string::npos) << "the secret's digest leaked";
  // A link in a directory of the path, too.
  ASSERT_EQ(::symlink(outside.path.c_str(), (d.path + "/linked").c_str()), 0);
  s = VerifyFiles(d.path, {{"linked/secret", 17, sd->checksum}}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // A FIFO answers at once instead of waiting for a writer.
  ASSERT_EQ(::mkfifo((d.path + "/images/core-1.img").c_str(), 0600), 0);
  const absl::Time t0 = absl::Now();
  s = VerifyFiles(d.path, {{"images/core-1.img", 0, "0"}}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

TEST(Checksum, TailHasherMatchesWhileFilesAreWritten) {
  TempDir d;
  TailHasher t(d.path);
  t.Start();
  std::string big = RandomData(3 << 20, 4), small = RandomData(100, 5);
  {
    // Written in pieces while the hasher follows, as CRIU writes its images.
    int fd = ::open((d.path + "/pages").c_str(), O_WRONLY | O_CREAT, 0600);
    for (size_t off = 0; off < big.size(); off += 65536) {
      ASSERT_EQ(::write(fd, big.data() + off, std::min<size_t>(65536, big.size() - off)),
                static_cast<ssize_t>(std::min<size_t>(65536, big.size() - off)));
      if (off % (1 << 20) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::close(fd);
  }
  ASSERT_TRUE(fs::MakeDirs(d.path + "/sub").ok());
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/sub/core", small).ok());
  auto got = t.Finish();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)["pages"].checksum, HashFile(d.path + "/pages")->checksum);
  EXPECT_EQ((*got)["pages"].size, big.size());
  EXPECT_EQ((*got)["sub/core"].checksum, HashFile(d.path + "/sub/core")->checksum);
}

// A file replaced behind the hasher by a writer that hashed it (cryod's pages images) keeps
// the writer's digest; one given with a size the file does not have is not trusted.
TEST(Checksum, TailHasherTakesAReplacedFilesDigestFromItsWriterOnlyWhereTheSizeAgrees) {
  TempDir d;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/pages-1.img", RandomData(4096, 6)).ok());
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/pages-2.img", RandomData(4096, 7)).ok());
  TailHasher t(d.path);
  t.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both followed by then
  const std::string one = RandomData(8192, 8), two = RandomData(8192, 9);
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/pages-1.img", one).ok());  // a new inode
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/pages-2.img", two).ok());
  const FileDigest writers{one.size(), "writer's digest"};
  t.Provide({{"pages-1.img", writers}, {"pages-2.img", FileDigest{two.size() + 1, "wrong size"}}});
  auto got = t.Finish();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["pages-1.img"], writers) << "taken from its writer, not read again";
  EXPECT_EQ((*got)["pages-2.img"], *HashFile(d.path + "/pages-2.img")) << "read again";
}

}  // namespace
}  // namespace cryo
